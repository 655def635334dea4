//! Arguments after `--` reach the file, the function and an own command exactly; a flag
//! for the script before `--` is refused with the command that works.

use insta::assert_snapshot;

use super::{AWKWARD, awkward_json, quickstart};
use crate::support::{World, text};

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
