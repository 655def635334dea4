//! The user's loop (issue 14): arguments reach the script, mistakes are caught before anything
//! is billed, and coming back to a run later is as good as staying attached. End to end on the
//! local control plane, and against wiremock where only the requests matter.

use insta::assert_snapshot;

use crate::support::{DIV, Local, World, text};

const TRAIN: &str = r#"import json, os, sys

def main():
    print("argv", json.dumps(sys.argv[1:]))
    json.dump({"metrics": {"accuracy": 0.91}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))

def crash():
    print("about to exit 3")
    sys.exit(3)

if __name__ == "__main__":
    print("file argv", json.dumps(sys.argv[1:]))
"#;

/// The project `quickstart` on the local control plane.
fn quickstart() -> Local {
    Local::new("quickstart", &[("train.py", TRAIN)])
}

/// What a shell would make of them, spaces, quotes, `$` and `;` included.
const AWKWARD: &[&str] = &[
    "--epochs",
    "3",
    "a b",
    "it's",
    "say \"hi\"",
    "$HOME",
    "x;y",
    "`id`",
    "*.py",
    "",
];

fn awkward_json() -> String {
    serde_json::to_string(AWKWARD).expect("json")
}

#[test]
fn arguments_after_dashes_reach_the_file_exactly() {
    let local = quickstart();
    let mut args = vec!["run", "--gpu", "cpu", "train.py", "--"];
    args.extend(AWKWARD);
    let out = local.div(&args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Python's json.dumps separates with ", ", as serde_json does not.
    let got = stdout
        .lines()
        .find_map(|l| l.strip_prefix("file argv "))
        .unwrap_or_else(|| panic!("the script printed its arguments: {stdout}"));
    let got: Vec<String> = serde_json::from_str(got).expect("json");
    assert_eq!(got, AWKWARD, "{stdout} {}", awkward_json());

    // The control plane keeps what was typed, arguments included.
    let runs = local.div(&["runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).expect("json");
    let entrypoint = runs[0]["entrypoint"].as_str().unwrap_or_default();
    assert!(
        entrypoint.starts_with("train.py -- --epochs 3 'a b' "),
        "{entrypoint}"
    );
}

#[test]
fn arguments_after_dashes_reach_the_function_as_sys_argv() {
    let local = quickstart();
    let mut args = vec!["run", "--gpu", "cpu", "train.py::main", "--"];
    args.extend(AWKWARD);
    let out = local.div(&args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let got = stdout
        .lines()
        .find_map(|l| l.strip_prefix("argv "))
        .unwrap_or_else(|| panic!("main() printed its arguments: {stdout}"));
    let got: Vec<String> = serde_json::from_str(got).expect("json");
    assert_eq!(got, AWKWARD);
    assert!(
        !stdout.contains("file argv"),
        "the file ran as __main__: {stdout}"
    );
}

#[test]
fn an_own_command_after_dashes_is_unchanged() {
    let local = quickstart();
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--",
        "python",
        "-c",
        "import sys; print(sys.argv[1:])",
        "a b",
        "$HOME",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("['a b', '$HOME']"), "{stdout}");
}

#[tokio::test]
async fn the_own_command_is_sent_as_typed() {
    let world = World::new().await;
    let done = world
        .div(&[
            "run",
            "--dry-run",
            "--json",
            "--",
            "torchrun",
            "--nproc-per-node",
            "8",
            "train.py",
        ])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let request: serde_json::Value = serde_json::from_str(&done.stdout).expect("json");
    assert_eq!(
        request["entrypoint"],
        "torchrun --nproc-per-node 8 train.py"
    );
    assert_eq!(request["command"], "torchrun --nproc-per-node 8 train.py");
}

/// `div run train.py --epochs 3`, without `--`: refused, with the command that works.
#[tokio::test]
async fn a_flag_for_the_script_before_dashes_is_refused_with_the_command_that_works() {
    let world = World::new().await;
    let done = world
        .div(&["run", "--gpu", "cpu", "train.py", "--epochs", "3"])
        .await;
    assert_eq!(done.code, 200);
    assert!(
        done.stderr.contains(
            "tip: to give `--epochs` and what follows to the script, put them after `--`: \
             `div run --gpu cpu train.py -- --epochs 3`"
        ),
        "{}",
        done.stderr
    );
    let done = world.div(&["run", "train.py", "3"]).await;
    assert_eq!(done.code, 200);
    assert_snapshot!(done.stderr, @"error: `train.py 3` runs `train.py` with arguments; arguments for a script go after `--`: `div run train.py -- 3`");
    world.assert_nothing_created().await;
}

async fn refused(world: &World, args: &[&str]) -> String {
    let done = world.div(args).await;
    assert_eq!(done.code, 200, "{args:?}: {}", done.stderr);
    done.stderr
}

/// Each mistake is refused with what was meant, before anything is created or uploaded.
#[tokio::test]
async fn mistakes_are_caught_before_anything_is_billed() {
    let world = World::new().await;
    std::fs::write(
        world.project().join("train.py"),
        "import torch\n\ndef main():\n    pass\n\nasync def serve():\n    pass\n",
    )
    .expect("write");
    std::fs::write(world.project().join("eval.py"), "def run(): pass\n").expect("write");

    assert_snapshot!(refused(&world, &["run", "train.py:main"]).await, @"error: `train.py:main` has one colon; a function in a file is named with two: `train.py::main`");
    assert_snapshot!(refused(&world, &["run", "train.py::mian"]).await, @r"
    error: `train.py` defines no top-level `mian`
    hint: did you mean `main`? (`div run train.py::main`)
    ");
    assert_snapshot!(refused(&world, &["run", "train.py::fit"]).await, @r"
    error: `train.py` defines no top-level `fit`
    hint: it defines `main`, `serve`, `torch`
    ");
    assert_snapshot!(refused(&world, &["run", "trian.py", "--", "--epochs", "3"]).await, @r"
    error: `trian.py` is not in what will be shipped
    hint: did you mean `train.py`?
    ");
    assert_snapshot!(refused(&world, &["run", "--", "train.py", "--epochs", "3"]).await, @r"
    error: `train.py` cannot be run as a command: `sh` looks for `train.py` on PATH, not in the shipped code
    hint: run it with Python: `div run -- python train.py --epochs 3`
    ");
    assert_snapshot!(refused(&world, &["run", "--", "./eval.py", "--fast"]).await, @r"
    error: `./eval.py` cannot be run as a command: `eval.py` is not executable
    hint: run it with Python: `div run -- python eval.py --fast`
    ");
    world.assert_nothing_created().await;
}

/// When the scan cannot tell what the file defines, the run is placed.
#[tokio::test]
async fn a_file_the_scan_cannot_read_is_given_the_benefit_of_the_doubt() {
    let world = World::new().await;
    std::fs::write(world.project().join("train.py"), "from helpers import *\n").expect("write");
    let done = world.div(&["run", "--dry-run", "train.py::main"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(
        done.stdout.contains("nothing was placed"),
        "{}",
        done.stdout
    );
}

/// An executable script with a path is the user's own command, and runs.
#[test]
fn an_executable_script_runs_as_its_own_command() {
    use std::os::unix::fs::PermissionsExt;
    let local = quickstart();
    let script = local.project().join("go.py");
    std::fs::write(
        &script,
        "#!/usr/bin/env python3\nimport sys\nprint('went', sys.argv[1:])\n",
    )
    .expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = local.div(&["run", "--gpu", "cpu", "--", "./go.py", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("went ['x']"),
        "{}",
        text(&out.stdout)
    );
}

/// `div logs RUN --follow` ends as `div run` does: the same last line, the same exit code.
/// Without a name, `div logs`, `div result`, `div telemetry` and `div stop` act on the
/// project's latest run and say which.
#[test]
fn coming_back_is_as_good_as_staying_attached() {
    let local = quickstart();
    let attached = local.div(&["run", "--gpu", "cpu", "train.py::crash"]);
    assert_eq!(
        attached.status.code(),
        Some(3),
        "{}",
        text(&attached.stderr)
    );
    let attached_last = text(&attached.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let name = attached_last
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(name.starts_with("run-"), "{attached_last}");

    let followed = local.div(&["logs", &name, "--follow"]);
    assert_eq!(
        followed.status.code(),
        Some(3),
        "{}",
        text(&followed.stderr)
    );
    assert_eq!(text(&followed.stdout), text(&attached.stdout));
    assert_eq!(
        text(&followed.stderr).lines().last().unwrap_or_default(),
        attached_last
    );

    // No name: the latest run, said on stderr.
    let said = format!("{name}, the latest run of quickstart");
    let logs = local.div(&["logs", "--follow"]);
    assert_eq!(logs.status.code(), Some(3));
    assert_eq!(text(&logs.stderr).lines().next(), Some(said.as_str()));
    assert_eq!(text(&logs.stdout), text(&attached.stdout));

    let result = local.div(&["result"]);
    assert_eq!(text(&result.stderr).lines().next(), Some(said.as_str()));
    let telemetry = local.div(&["telemetry"]);
    assert_eq!(text(&telemetry.stderr).lines().next(), Some(said.as_str()));

    let detached = local.div(&["run", "-d", "--gpu", "cpu", "--", "sleep 30"]);
    let going = text(&detached.stdout).trim().to_string();
    let stop = local.div(&["stop"]);
    let stderr = text(&stop.stderr);
    assert_eq!(stop.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "{going}, the latest run of quickstart\n{going} was canceled after "
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn no_runs_yet_is_said_plainly() {
    let world = World::new().await;
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .and(wiremock::matchers::path("/v1/runs"))
        .respond_with(div_test_support::mock::json_response(
            200,
            &serde_json::json!({"runs": [], "next_cursor": null}),
        ))
        .mount(&world.server)
        .await;
    let done = world.div(&["logs"]).await;
    assert_eq!(done.code, 200);
    assert_snapshot!(done.stderr, @r"
    error: project `very-cool-classifier` has no runs yet, so there is no latest run to act on
    hint: name a run (`div runs --all` lists every project's), or start one with `div run`
    ");
}

/// A run that dies of a missing module ends with a hint: which Python it used, and how to
/// install the module into the run. `div logs --follow` ends the same way.
#[test]
fn a_missing_module_ends_with_how_to_install_it() {
    let local = quickstart();
    std::fs::write(
        local.project().join("fit.py"),
        // Through importlib, so the traceback shows the Python's own files.
        "import importlib\nimportlib.import_module('nosuchmodule_div.sub')\n",
    )
    .expect("write");
    let out = local.div(&["run", "--gpu", "cpu", "fit.py", "--", "--epochs", "3"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("hint: `nosuchmodule_div` is not installed in the run's Python 3."),
        "{stderr}"
    );
    assert!(
        last.contains(
            "install it into the run first: `div run --gpu cpu -- 'python -m pip install \
             nosuchmodule-div && python -u fit.py --epochs 3'`"
        ),
        "{stderr}"
    );
    let name = stderr
        .lines()
        .find(|l| l.contains(" failed after "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_default()
        .to_string();
    let followed = local.div(&["logs", &name, "--follow"]);
    assert_eq!(text(&followed.stderr).lines().last(), Some(last));
}

/// The hint keeps every flag typed (pasted, it places the same CPU run with the same check,
/// not an H100 one), and installs from the requirements.txt shipped beside the entrypoint,
/// which already lists the package. Proven by running the hint's command as a shell would,
/// with a `div` that prints the words it was given.
#[test]
fn a_missing_module_hint_keeps_what_was_typed_and_the_requirements_file() {
    let local = quickstart();
    let project = local.project();
    std::fs::write(project.join("fit.py"), "import nosuchmodule_div\n").expect("write");
    std::fs::write(project.join("requirements.txt"), "nosuchmodule-div==1.0\n").expect("write");
    let typed = [
        "run",
        "--gpu",
        "cpu",
        "--max-spend",
        "0.50",
        "--env",
        "SEED=7 days",
        "fit.py",
        "--check",
        "metrics.accuracy>=0.8",
    ];
    let out = local.div(&typed);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    let command = last
        .split_once("but the command does not install it: `")
        .and_then(|(_, rest)| rest.strip_suffix('`'))
        .unwrap_or_else(|| panic!("the hint installs from requirements.txt:\n{stderr}"));
    // The hint, as a shell runs it, against a `div` that prints each word it gets.
    let bin = project.join("fake-bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let fake = bin.join("div");
    std::fs::write(
        &fake,
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n",
    )
    .expect("write");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let pasted = std::process::Command::new("sh")
        .args(["-c", command])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .expect("sh runs");
    assert_eq!(
        text(&pasted.stdout).lines().collect::<Vec<_>>(),
        [
            "run",
            "--gpu",
            "cpu",
            "--max-spend",
            "$0.50",
            "--env",
            "SEED=7 days",
            "--check",
            "metrics.accuracy >= 0.8",
            "--",
            "python -m pip install -r requirements.txt && python -u fit.py",
        ],
        "{command}"
    );
}

/// A file larger than a piece goes in several requests, each from where the last ended, and
/// arrives whole on the local control plane (which checks its hash).
#[test]
fn a_large_file_is_sent_in_pieces_and_arrives_whole() {
    let local = quickstart();
    let size = 70_000_000usize;
    let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    std::fs::write(local.project().join("big.bin"), &bytes).expect("write");
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--",
        "python3",
        "-c",
        "import zlib; d = open('big.bin', 'rb').read(); print(len(d), zlib.crc32(d))",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let crc = crc32(&bytes);
    assert!(stdout.contains(&format!("{size} {crc}")), "{stdout}");
}

/// CRC-32 (IEEE), as Python's `zlib.crc32`.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// On a terminal, the progress bar moves while one large file is sent, in the shipping
/// line's units (`40.0 MB`, not `38.15 MiB`).
#[tokio::test]
async fn the_progress_bar_moves_within_a_large_file_in_the_shipping_lines_units() {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, ResponseTemplate};
    let world = World::new().await;
    let queued = crate::support::run(div_api::RunStatus::Queued);
    world
        .mount_placing(
            &queued,
            &[],
            &crate::support::run(div_api::RunStatus::Succeeded),
        )
        .await;
    let size = 40_000_000usize;
    let content = vec![7u8; size];
    std::fs::write(world.project().join("weights.bin"), &content).expect("write");
    let hash = blake3::hash(&content).to_hex().to_string();
    Mock::given(method("POST"))
        .and(path_regex("^/v1/volumes/[^/]+/blobs/missing$"))
        .respond_with(div_test_support::mock::json_response(
            200,
            &serde_json::json!({ "missing": [hash] }),
        ))
        .with_priority(1)
        .mount(&world.server)
        .await;
    Mock::given(method("PUT"))
        .and(path_regex("^/v1/volumes/[^/]+/blobs/[0-9a-f]+$"))
        .respond_with(ResponseTemplate::new(204).set_delay(std::time::Duration::from_secs(1)))
        .mount(&world.server)
        .await;

    let mut script = tokio::process::Command::new("script");
    script.env_clear();
    for (key, value) in world.command(&[]).as_std().get_envs() {
        if let Some(value) = value {
            script.env(key, value);
        }
    }
    let on_terminal = script
        .env("TERM", "xterm")
        .args(["-qfec", &format!("{DIV} run -d train.py"), "/dev/null"])
        .current_dir(world.project())
        .output()
        .await
        .expect("script runs div on a pty");
    let transcript = String::from_utf8_lossy(&on_terminal.stdout);
    assert_eq!(on_terminal.status.code(), Some(0), "{transcript}");
    assert!(
        transcript.contains("40.0 MB → very-cool-classifier-code/"),
        "{transcript}"
    );
    assert!(transcript.contains("/40.0 MB"), "{transcript}");
    assert!(!transcript.contains("MiB"), "{transcript}");

    let puts: Vec<String> = world
        .server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.method.as_str() == "PUT")
        .map(|r| r.url.query().unwrap_or_default().to_string())
        .collect();
    let piece = div_core::UPLOAD_PIECE_BYTES;
    assert_eq!(
        puts,
        [
            format!("offset=0&total={size}"),
            format!("offset={piece}&total={size}")
        ]
    );
}

impl Local {
    /// `line` run by `sh` on a 150-column pty (made by `script`), colour on; the transcript.
    fn on_terminal(&self, line: &str) -> String {
        let mut script = std::process::Command::new("script");
        script.env_clear();
        for (key, value) in self
            .command(&[])
            .get_envs()
            .filter(|(k, _)| *k != "NO_COLOR")
        {
            if let Some(value) = value {
                script.env(key, value);
            }
        }
        let out = script
            .env("TERM", "xterm")
            .args([
                "-qfec",
                &format!("stty cols 150 rows 50; {line}"),
                "/dev/null",
            ])
            .current_dir(self.project())
            .output()
            .expect("script runs div on a pty");
        text(&out.stdout)
    }
}

const CHARTED: &str = r#"import json, os
with open(os.environ["DIVERGENT_TELEMETRY_PATH"], "a") as f:
    for step in range(20):
        f.write(json.dumps({"step": step, "loss": 1.0 / (step + 1)}) + "\n")
json.dump({"metrics": {"accuracy": 0.5}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
"#;

/// On a 150-column terminal, charts are 150 columns wide; piped, they keep their 60 cells.
/// A missed check is red on a terminal, in `div result` and on the last line, and plain with
/// `NO_COLOR`.
#[test]
fn charts_fill_the_terminal_and_missed_checks_are_red() {
    let local = quickstart();
    std::fs::write(local.project().join("charted.py"), CHARTED).expect("write");
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "charted.py",
        "--check",
        "metrics.accuracy>=0.8",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).ends_with(" · missed 1 of 1 check\n"));

    let transcript = local.on_terminal(&format!("{DIV} telemetry"));
    let axis = transcript
        .lines()
        .find(|l| l.contains('└'))
        .unwrap_or_else(|| panic!("a chart: {transcript}"));
    assert_eq!(
        axis.trim_end_matches('\r').chars().count(),
        149,
        "{transcript}"
    );
    let piped = local.div(&["telemetry"]);
    let axis = text(&piped.stdout)
        .lines()
        .find(|l| l.contains('└'))
        .map(|l| l.chars().filter(|c| *c == '─').count());
    assert_eq!(axis, Some(60));

    let transcript = local.on_terminal(&format!("{DIV} result"));
    assert!(
        transcript.contains("\x1b[31;1mcheck failed: metrics.accuracy >= 0.8 (found 0.5)\x1b[0m"),
        "{transcript:?}"
    );
    let transcript = local.on_terminal(&format!("{DIV} logs --follow"));
    assert!(
        transcript.contains(" · \x1b[31;1mmissed 1 of 1 check\x1b[0m"),
        "{transcript:?}"
    );
    // The verdict the control plane wrote at the end of the log, too.
    assert!(
        transcript.contains("\x1b[31;1mcheck failed: metrics.accuracy >= 0.8 (found 0.5)\x1b[0m"),
        "{transcript:?}"
    );
    // Attached on a terminal, the same.
    let transcript = local.on_terminal(&format!(
        "{DIV} run --gpu cpu charted.py --check 'metrics.accuracy>=0.8'"
    ));
    assert!(
        transcript.contains("\x1b[31;1mcheck failed: metrics.accuracy >= 0.8 (found 0.5)\x1b[0m"),
        "{transcript:?}"
    );
    let transcript = local.on_terminal(&format!("NO_COLOR=1 {DIV} logs --follow"));
    assert!(!transcript.contains('\x1b'), "{transcript:?}");
    let transcript = local.on_terminal(&format!("NO_COLOR=1 {DIV} result"));
    assert!(!transcript.contains('\x1b'), "{transcript:?}");
}

/// The cpu SKU has no GPUs: `--dry-run --json` and `div runs --json` both say 0.
#[test]
fn the_cpu_sku_has_no_gpus_before_and_after() {
    let local = quickstart();
    let dry = local.div(&["run", "--gpu", "cpu", "--dry-run", "--json", "train.py"]);
    let dry: serde_json::Value = serde_json::from_slice(&dry.stdout).expect("json");
    assert_eq!(dry["gpus"], 0, "{dry}");
    let out = local.div(&["run", "--gpu", "cpu", "train.py"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let runs = local.div(&["runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).expect("json");
    assert_eq!(runs[0]["gpus"], 0, "{runs}");
}

/// A user of the binary has no `docs/` folder: no message points at one (a link to the
/// repository's own page of it is a place they can reach).
#[test]
fn no_message_points_at_a_docs_folder() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut offending = Vec::new();
    for dir in [
        "crates/div-cli/src",
        "crates/div-cli/src/commands",
        "crates/div-core/src",
        "crates/div-spec/src",
    ] {
        let entries = std::fs::read_dir(format!("{root}/{dir}")).expect("a source folder");
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let source = std::fs::read_to_string(&path).expect("read");
            for (n, line) in source.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") || code.contains("include_str!") {
                    continue;
                }
                let reachable =
                    code.contains("https://github.com/divergentlabs/div/blob/main/docs/");
                if code.contains("docs/")
                    && code.contains('"')
                    && !code.contains("lacks the row")
                    && !reachable
                {
                    offending.push(format!("{}:{}: {code}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(offending.is_empty(), "{offending:#?}");
}

/// A big file at the top level: while it hashes, a terminal shows how far hashing got; the
/// large-shipment warning names the file itself, not a placeholder.
#[tokio::test]
async fn a_big_top_level_file_shows_hashing_and_is_named_in_the_hint() {
    let world = World::new().await;
    std::fs::create_dir_all(world.project().join("src")).expect("mkdir");
    std::fs::write(world.project().join("src/model.py"), "x = 1\n").expect("write");
    // Sparse: 2 GB to hash, nothing on disk. Hashing it takes seconds (a debug build reads
    // well under 1 GB/s), past the 0.7 s after which the line shows, as the upload test's
    // 2 s answer is.
    let big = std::fs::File::create(world.project().join("weights.bin")).expect("create");
    big.set_len(2_000_000_000).expect("set_len");

    let mut script = tokio::process::Command::new("script");
    script.env_clear();
    for (key, value) in world.command(&[]).as_std().get_envs() {
        if let Some(value) = value {
            script.env(key, value);
        }
    }
    let on_terminal = script
        .env("TERM", "xterm")
        .args([
            "-qfec",
            &format!("{DIV} run --dry-run train.py"),
            "/dev/null",
        ])
        .current_dir(world.project())
        .output()
        .await
        .expect("script runs div on a pty");
    let transcript = String::from_utf8_lossy(&on_terminal.stdout);
    assert_eq!(on_terminal.status.code(), Some(0), "{transcript}");
    assert!(transcript.contains("hashing what to ship "), "{transcript}");
    assert!(
        transcript.contains("warning: this ships 2.0 GB, 2.0 GB of it in `weights.bin`"),
        "{transcript}"
    );
    assert!(
        transcript.contains("a `.gitignore` that names `weights.bin` leave it out"),
        "{transcript}"
    );
    assert!(!transcript.contains("the data"), "{transcript}");
}
