//! End to end: the real `div` on the local control plane, started on demand.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::DIV;

const TRAIN: &str = r#"import json, os, sys

def main():
    for step in range(3):
        print(f"step {step}")
    json.dump({"metrics": {"accuracy": 0.91, "loss": 0.71}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))

def crash():
    print("about to exit 3")
    sys.exit(3)
"#;

/// A temp home and project; stops the background server it started when dropped.
struct Local {
    tmp: tempfile::TempDir,
}

impl Local {
    fn new() -> Local {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let project = tmp.path().join("quickstart");
        std::fs::create_dir_all(&project).expect("mkdir");
        std::fs::write(project.join("train.py"), TRAIN).expect("write");
        Local { tmp }
    }

    fn project(&self) -> PathBuf {
        self.tmp.path().join("quickstart")
    }

    fn div(&self, args: &[&str]) -> Output {
        command(self.tmp.path(), &self.project(), args)
            .output()
            .expect("div runs")
    }
}

fn command(tmp: &Path, project: &Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(DIV);
    c.args(args)
        .current_dir(project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", tmp.join("home"))
        .env("DIVERGENT_HOME", tmp.join("div-home"))
        .env("DIVERGENT_EMULATE_GPUS", "h100:2")
        .env("NO_COLOR", "1");
    c
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.div(&["server", "stop"]);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_run_with_a_passing_and_a_missed_check() {
    let local = Local::new();
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
    assert!(lines[0].contains(" → quickstart-code/code/"), "{stderr}");
    assert!(
        lines[1].ends_with("  CPU  $0.30/h  $1.00 buys 3h 20m"),
        "{stderr}"
    );
    assert!(
        lines[2].contains(" finished in ") && lines[2].ends_with(" · missed 1 of 2 checks"),
        "{stderr}"
    );
}

#[test]
fn a_run_that_exits_3_makes_div_exit_3() {
    let local = Local::new();
    let out = local.div(&["run", "--gpu", "cpu", "train.py::crash"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(" failed after ") && last.contains("(exit 3): about to exit 3 — $"),
        "{stderr}"
    );
}

#[test]
fn detach_then_follow_then_stop() {
    let local = Local::new();
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
    assert_eq!(logs.status.code(), Some(0));
    assert!(text(&logs.stderr).starts_with(&format!("{name} was canceled after ")));

    let again = local.div(&["stop", &name]);
    assert_eq!(again.status.code(), Some(0));
    assert!(text(&again.stderr).starts_with(&format!("{name} had already ended\n")));
}
