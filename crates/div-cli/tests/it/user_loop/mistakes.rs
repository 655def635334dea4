//! Mistakes caught before anything is billed (and the benefit of the doubt), and the hints
//! a run's end gives: a missing module, no docs folder pointed at, the cpu SKU's GPUs.

use insta::assert_snapshot;

use super::{quickstart, refused};
use crate::support::{World, text};

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
