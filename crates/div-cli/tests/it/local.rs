//! End to end: the real `div` on the local control plane, started on demand.

use std::process::Output;

use crate::support::{Local, text};

const TRAIN: &str = r#"import json, os, sys

def main():
    for step in range(3):
        print(f"step {step}")
    json.dump({"metrics": {"accuracy": 0.91, "loss": 0.71}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))

def crash():
    print("about to exit 3")
    sys.exit(3)
"#;

/// The project `quickstart` on the local control plane, with two emulated H100s.
fn quickstart() -> Local {
    Local::new("quickstart", &[("train.py", TRAIN)]).emulating("h100:2")
}

#[test]
fn a_run_with_a_passing_and_a_missed_check() {
    let local = quickstart();
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "train.py::main",
        "--check",
        "metrics.accuracy>=0.8",
        "--check",
        "metrics.loss<0.6",
        "--max-spend",
        "1",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("step 0\nstep 1\nstep 2\n"), "{stdout}");
    assert!(
        stdout.contains("check passed: metrics.accuracy >= 0.8 (found 0.91)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("check failed: metrics.loss < 0.6 (found 0.71)\n"),
        "{stdout}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines[0], "not a git repository: shipping every file but the skip list (1 file)",
        "{stderr}"
    );
    assert!(lines[1].contains(" → quickstart-code/code/"), "{stderr}");
    assert!(
        lines[2].ends_with("  CPU  $0.30/h  $1.00 buys 3h 20m"),
        "{stderr}"
    );
    assert!(
        lines[3].contains(" finished in ") && lines[3].ends_with(" · missed 1 of 2 checks"),
        "{stderr}"
    );
}

#[test]
fn a_run_that_exits_3_makes_div_exit_3() {
    let local = quickstart();
    let out = local.div(&["run", "--gpu", "cpu", "train.py::crash"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(" failed after ") && last.contains("(exit 3): about to exit 3 — $"),
        "{stderr}"
    );
}

/// `div logs RUN --node K` is for runs placed on several nodes (Slurm): a run on this machine
/// has none, and says so.
#[test]
fn a_run_on_this_machine_has_no_node_logs() {
    let local = quickstart();
    let out = local.div(&["run", "--gpu", "cpu", "--name", "solo", "--", "echo", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = local.div(&["logs", "solo", "--node", "1"]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "run `solo` ran on one machine, not on several nodes: it has no node 1 (its log is `div logs solo`)"
        ),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

/// `DIVERGENT_TIMINGS=1`: the last line names every step, in order, each with its time;
/// without it there is no such line.
#[test]
fn timings_name_each_step_of_a_run_in_order() {
    let local = quickstart();
    let out = local
        .command(&["run", "--gpu", "cpu", "train.py::main"])
        .env("DIVERGENT_TIMINGS", "1")
        .output()
        .expect("div runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    // It ends with when `main` began, in seconds since the epoch to the microsecond.
    let (last, began) = last
        .strip_suffix(')')
        .and_then(|l| l.rsplit_once(" (main began at "))
        .unwrap_or_else(|| panic!("a timings line saying when main began: {stderr}"));
    let (secs, micros) = began.split_once('.').unwrap_or_default();
    assert!(
        secs.parse::<u64>().is_ok_and(|s| s > 1_700_000_000) && micros.len() == 6,
        "{began}"
    );
    let steps: Vec<&str> = last
        .strip_prefix("timings: ")
        .unwrap_or_else(|| panic!("a timings line: {stderr}"))
        .split(" · ")
        .map(|step| {
            let (name, ms) = step
                .rsplit_once(' ')
                .and_then(|(rest, unit)| {
                    assert_eq!(unit, "ms", "{step}");
                    rest.rsplit_once(' ')
                })
                .unwrap_or_else(|| panic!("`name N ms`: {step}"));
            assert!(ms.parse::<f64>().is_ok_and(|v| v >= 0.0), "{step}");
            name
        })
        .collect();
    assert_eq!(
        steps,
        [
            "validate",
            "list",
            "price",
            "upload",
            "create",
            "start + first log byte",
            "run",
            "exit"
        ],
        "{stderr}"
    );
    // A dry run ends at its price, then its report.
    let dry = local
        .command(&["run", "--dry-run", "--gpu", "cpu", "train.py::main"])
        .env("DIVERGENT_TIMINGS", "1")
        .output()
        .expect("div runs");
    let stderr = text(&dry.stderr);
    assert_eq!(dry.status.code(), Some(0), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    let names: Vec<&str> = last
        .split(" (main began at ")
        .next()
        .and_then(|l| l.strip_prefix("timings: "))
        .unwrap_or_else(|| panic!("a timings line: {stderr}"))
        .split(" · ")
        .filter_map(|step| step.rsplitn(3, ' ').nth(2))
        .collect();
    assert_eq!(names, ["validate", "list", "price", "exit"], "{stderr}");
    let plain = local.div(&["run", "--gpu", "cpu", "train.py::main"]);
    assert!(
        !text(&plain.stderr).contains("timings:"),
        "{}",
        text(&plain.stderr)
    );
}

#[test]
fn detach_then_follow_then_stop() {
    let local = quickstart();
    let out = local.div(&["run", "-d", "--gpu", "cpu", "--", "echo started; sleep 30"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let name = text(&out.stdout).trim().to_string();
    assert!(name.starts_with("run-"), "{name}");

    let stopped = local.div(&["stop", &name]);
    let stderr = text(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with(&format!("{name} was canceled after ")),
        "{stderr}"
    );

    let logs = local.div(&["logs", &name, "--follow"]);
    // Followed to its end, `div logs` exits as `div run` would have: 206, canceled (issue 14).
    assert_eq!(logs.status.code(), Some(206));
    assert!(text(&logs.stderr).starts_with(&format!("{name} was canceled after ")));

    let again = local.div(&["stop", &name]);
    assert_eq!(again.status.code(), Some(0));
    assert!(text(&again.stderr).starts_with(&format!("{name} had already ended\n")));
}

const AROUND: &str = r#"import json, os
for step in range(5):
    with open(os.environ["DIVERGENT_TELEMETRY_PATH"], "a") as f:
        f.write(json.dumps({"step": step, "loss": 1.0 / (step + 1)}) + "\n")
print("HF_TOKEN=" + os.environ.get("HF_TOKEN", "unset"))
print("data=" + open("/mnt/ds/v1/a.txt").read().strip())
json.dump({"metrics": {"accuracy": 0.91}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
"#;

impl Local {
    fn div_stdin(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("div starts");
        child
            .stdin
            .take()
            .expect("a piped stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("div runs")
    }
}

/// A `div` whose file is replaced while it runs still starts the local control plane. Linux
/// then names the running executable `PATH (deleted)`: an upgrade does this, and so does
/// cargo, which links `target/debug/div` again at the start of every `cargo test` (two suites
/// at once, `.ci/stress`, once failed here). The `div` now at `PATH` serves.
#[test]
fn a_div_replaced_while_it_runs_still_starts_the_local_control_plane() {
    use std::io::Write;
    let local = quickstart();
    let bin = local.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let div = bin.join("div");
    // As cargo does: a link to the same file where it can, else a copy.
    let place = || {
        if std::fs::hard_link(crate::support::DIV, &div).is_err() {
            std::fs::copy(crate::support::DIV, &div).expect("copy div");
        }
    };
    place();
    // `secrets set` reads its value before it asks the control plane: it waits on stdin.
    let mut child = local
        .command_of(&div, &["secrets", "set", "HF_TOKEN"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("div starts");
    std::fs::remove_file(&div).expect("remove div");
    place();
    let exe = std::fs::read_link(format!("/proc/{}/exe", child.id())).expect("its executable");
    assert!(
        exe.to_string_lossy().ends_with(" (deleted)"),
        "the running div was not replaced: {exe:?}"
    );
    let mut stdin = child.stdin.take().expect("a piped stdin");
    stdin.write_all(b"from-secret\n").expect("write stdin");
    drop(stdin);
    let set = child.wait_with_output().expect("div runs");
    assert_eq!(set.status.code(), Some(0), "{}", text(&set.stderr));
    assert!(
        text(&set.stderr).starts_with("secret HF_TOKEN set;"),
        "{}",
        text(&set.stderr)
    );
    let ls = local.div(&["secrets", "ls"]);
    assert!(
        text(&ls.stdout).contains("HF_TOKEN"),
        "{}",
        text(&ls.stderr)
    );
}

#[test]
fn the_commands_around_a_run() {
    let local = quickstart();
    std::fs::write(local.project().join("around.py"), AROUND).expect("write");
    let data = local.tmp.path().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(data.join("a.txt"), "hello\n").expect("write");
    let data = data.to_string_lossy().into_owned();

    // Storage: a put makes the volume; a second put sends nothing and succeeds.
    let put = local.div(&["storage", "put", "ds", &data, "--to", "v1"]);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));
    assert_eq!(text(&put.stderr), "new volume ds\n1 file, 6 B → ds/v1\n");
    let again = local.div(&["storage", "put", "ds", &data, "--to", "v1"]);
    assert_eq!(text(&again.stderr), "1 file, 6 B → ds/v1\n");
    std::fs::write(local.tmp.path().join("data/a.txt"), "changed\n").expect("write");
    let replace = local.div(&["storage", "put", "ds", &data, "--to", "v1"]);
    assert_eq!(
        replace.status.code(),
        Some(0),
        "a put replaces a file, as cp does: {}",
        text(&replace.stderr)
    );

    // Secrets: every run has them; --env wins.
    let set = local.div_stdin(&["secrets", "set", "HF_TOKEN"], "from-secret\n");
    assert_eq!(set.status.code(), Some(0), "{}", text(&set.stderr));
    let ls = local.div(&["secrets", "ls"]);
    assert!(text(&ls.stdout).contains("HF_TOKEN"));
    assert!(!text(&ls.stdout).contains("from-secret"));

    let first = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "around.py",
        "--check",
        "metrics.accuracy>=0.8",
    ]);
    let stdout = text(&first.stdout);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert!(
        stdout.contains("HF_TOKEN=from-secret\ndata=changed\n"),
        "{stdout}"
    );
    let second = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--env",
        "HF_TOKEN=from-env",
        "around.py",
    ]);
    assert!(
        text(&second.stdout).contains("HF_TOKEN=from-env\n"),
        "{}",
        text(&second.stdout)
    );

    // Runs: newest first.
    let runs = local.div(&["runs", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&runs.stdout).expect("json");
    let names: Vec<&str> = list
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let (newest, older) = (names[0], names[1]);
    let table = text(&local.div(&["runs"]).stdout);
    assert!(
        table
            .lines()
            .nth(2)
            .is_some_and(|l| l.starts_with(older) && l.ends_with("passed 1/1  around.py")),
        "{table}"
    );

    // Result: stored verdicts, and checks judged here decide the exit code.
    let result = local.div(&["result", older]);
    assert_eq!(result.status.code(), Some(0));
    assert!(text(&result.stdout).contains("check passed: metrics.accuracy >= 0.8 (found 0.91)\n"));
    let missed = local.div(&["result", older, "--check", "metrics.accuracy>0.95"]);
    assert_eq!(missed.status.code(), Some(210));

    // Telemetry: the points, raw and plotted.
    let points = local.div(&["telemetry", newest, "--json"]);
    assert_eq!(
        text(&points.stdout).lines().count(),
        5,
        "{}",
        text(&points.stdout)
    );
    let plot = text(&local.div(&["telemetry", newest]).stdout);
    assert!(plot.starts_with("loss (over step)\n"), "{plot}");

    // What the run was given reads back from the code volume.
    let run: serde_json::Value = list[0].clone();
    let code = format!(
        "{}/{}",
        run["code"]["volume"].as_str().unwrap_or_default(),
        run["code"]["path"].as_str().unwrap_or_default()
    );
    let got = local.div(&["storage", "get", &code, "../given"]);
    assert_eq!(got.status.code(), Some(0), "{}", text(&got.stderr));
    assert_eq!(
        std::fs::read_to_string(local.tmp.path().join("given/around.py"))
            .ok()
            .as_deref(),
        Some(AROUND)
    );

    // Removing a volume: refused without a terminal, done with --yes.
    assert_eq!(local.div(&["storage", "rm", "ds"]).status.code(), Some(200));
    assert_eq!(
        local.div(&["storage", "rm", "ds", "--yes"]).status.code(),
        Some(0)
    );
    assert!(!text(&local.div(&["storage", "ls"]).stdout).contains("ds "));
    let rm = local.div(&["secrets", "rm", "HF_TOKEN"]);
    assert_eq!(rm.status.code(), Some(0));
}

#[test]
fn detach_with_json_prints_the_run_as_placed_with_its_env_shown_back() {
    let local = quickstart();
    let out = local.div(&[
        "run",
        "-d",
        "--json",
        "--gpu",
        "cpu",
        "--env",
        "SHOWN=back",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let placed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(
        placed["env"],
        serde_json::json!([{"key": "SHOWN", "value": "back"}])
    );
    assert!(
        placed["status"] == "queued" || placed["status"] == "running",
        "as placed: {placed}"
    );
    let name = placed["name"].as_str().unwrap_or_default();
    let logs = local.div(&["logs", name, "--follow", "--json"]);
    let ended: serde_json::Value = serde_json::from_slice(&logs.stdout).expect("stdout is JSON");
    assert_eq!(ended["env"], placed["env"], "kept with the run");
}

#[test]
fn a_failed_run_keeps_its_exit_code_and_its_checks_are_still_judged() {
    let local = quickstart();
    std::fs::write(
        local.project().join("half.py"),
        "import json, os, sys\n\
         json.dump({\"metrics\": {\"accuracy\": 0.91}}, open(os.environ[\"DIVERGENT_RESULT_PATH\"], \"w\"))\n\
         sys.exit(3)\n",
    )
    .expect("write");
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "half.py",
        "--check",
        "metrics.accuracy>=0.8",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stdout.contains("check passed: metrics.accuracy >= 0.8 (found 0.91)\n"),
        "{stdout}"
    );
    assert!(
        stderr
            .lines()
            .last()
            .unwrap_or_default()
            .contains(" failed after "),
        "{stderr}"
    );
}

/// Everything under `dir`, as relative paths, sorted (nothing when it does not exist).
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            out.push(
                path.strip_prefix(dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string(),
            );
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// What the control plane holds: its runs, its volumes (the code's among them) and what is
/// on its disk for them.
fn holdings(local: &Local) -> (String, String, Vec<String>, Vec<String>) {
    let runs = text(&local.div(&["runs", "--all", "--json"]).stdout);
    let volumes = text(&local.div(&["storage", "ls", "--json"]).stdout);
    (
        runs,
        volumes,
        tree(&local.home().join("volumes")),
        tree(&local.home().join("runs")),
    )
}

/// Every refusal the control plane can know before the upload comes before it: the control
/// plane holds the same before and after each, and no line says code was shipped. An image
/// named in a form no registry takes and a size past this machine are refused by the
/// validation; an image whose registry cannot be reached, by the pull, which comes first,
/// with what to do instead.
#[test]
fn refusals_the_control_plane_can_know_come_before_anything_is_shipped() {
    let local = quickstart();
    // The control plane is up, and the project's code volume exists, before the refusals.
    let first = local.div(&["run", "--gpu", "cpu", "train.py::main"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    local.wait_let_go();
    let before = holdings(&local);
    // A registry on loopback that nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let unreachable = format!("{closed}/nothing/here:1");
    let cases: [(&[&str], &str); 4] = [
        (
            &["--image", "Python:3.12"],
            "caused by: `Python:3.12` is not an image reference",
        ),
        (&["--cpu", "64"], "the run asks for 64"),
        (&["--memory", "100G"], "the run asks for 100 GiB"),
        (
            &["--image", &unreachable],
            "hint: without `--image`, the run uses the control plane's own system, which needs no registry",
        ),
    ];
    for (flags, says) in cases {
        let mut args = vec!["run", "--gpu", "cpu"];
        args.extend(flags);
        args.push("train.py::main");
        let out = local.div(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(200), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
        assert!(
            !stderr.contains(" → "),
            "{flags:?} said code was shipped: {stderr}"
        );
        assert_eq!(
            holdings(&local),
            before,
            "{flags:?} changed the control plane"
        );
    }
}

/// `div storage put NAME ./empty` makes an empty volume (it was refused with `div run`'s
/// "nothing to ship" hint): `div storage ls` shows it with 0 bytes, and a run sees an empty
/// folder at `/mnt/NAME`.
#[test]
fn an_empty_folder_put_makes_an_empty_volume() {
    let local = quickstart();
    let empty = local.tmp.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let put = local.div(&["storage", "put", "blank", &empty.to_string_lossy()]);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));
    assert_eq!(
        text(&put.stderr),
        "new volume blank\n0 files, 0 B → blank\n"
    );
    // Again: the volume is there, and nothing is sent.
    let again = local.div(&["storage", "put", "blank", &empty.to_string_lossy()]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(text(&again.stderr), "0 files, 0 B → blank\n");

    let ls = local.div(&["storage", "ls"]);
    let table = text(&ls.stdout);
    assert!(
        table.lines().any(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.len() > 2 && cells[0] == "blank" && cells[1] == "0" && cells[2] == "B"
        }),
        "{table}"
    );

    let seen = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--",
        "test -d /mnt/blank && echo \"files: $(find /mnt/blank -type f | wc -l)\" && echo \"in it: $(ls -A /mnt/blank)\"",
    ]);
    let stdout = text(&seen.stdout);
    assert_eq!(seen.status.code(), Some(0), "{}", text(&seen.stderr));
    // No file; only the empty, read-only `code/` every volume has for code snapshots.
    assert!(stdout.contains("files: 0\nin it: code\n"), "{stdout}");
}

/// A `/mnt/<volume>` in an `--env` value names the volume as one in the command does: it is
/// made before the run, and what the run writes there is kept.
#[test]
fn a_volume_an_env_value_names_is_made_and_kept() {
    let local = quickstart();
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--env",
        "CKPT_DIR=/mnt/ckpt-vol/ckpt",
        "--",
        "mkdir -p \"$CKPT_DIR\" && echo saved > \"$CKPT_DIR/step-1\" && cat \"$CKPT_DIR/step-1\"",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("saved\n"), "{stdout}");
    assert!(
        stderr.contains("new volume ckpt-vol, for the /mnt/ckpt-vol that --env CKPT_DIR names\n"),
        "{stderr}"
    );
    let ls = local.div(&["storage", "ls", "ckpt-vol/ckpt"]);
    assert_eq!(ls.status.code(), Some(0), "{}", text(&ls.stderr));
    assert!(text(&ls.stdout).contains("step-1"), "{}", text(&ls.stdout));
}
