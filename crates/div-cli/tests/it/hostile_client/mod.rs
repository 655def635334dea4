//! The client's side of issue 13, each test performing the attack or the mistake it is about:
//! storage that stays inside its lines, refusals that leave the control plane as it was,
//! checks that compare exactly, and run-provided text that never drives the terminal. Against
//! the real local control plane where one is needed, else against wiremock.
//!
//! By what is attacked: `refusals.rs` (what `div run` and `div secrets` refuse, leaving the
//! control plane as it was), `storage.rs` (gets and puts that stay inside their lines),
//! `checks.rs` (checks that compare exactly), `terminal.rs` (run-provided text escaped),
//! `uploads.rs` (uploads cut, damaged or at once); here, what they share.

mod checks;
mod refusals;
mod storage;
mod terminal;
mod uploads;

use std::path::PathBuf;
use std::process::{Output, Stdio};

use crate::support::DIV;

/// A temp home and project on the local control plane; stops the server when dropped.
struct Local {
    tmp: tempfile::TempDir,
}

impl Local {
    fn new() -> Local {
        let tmp = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir_all(tmp.path().join("proj")).expect("mkdir");
        std::fs::write(tmp.path().join("proj/train.py"), "print('hi')\n").expect("write");
        Local { tmp }
    }

    fn project(&self) -> PathBuf {
        self.tmp.path().join("proj")
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(DIV);
        c.args(args)
            .current_dir(self.project())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path().join("home"))
            .env("DIVERGENT_HOME", self.tmp.path().join("div-home"))
            .env("DIVERGENT_EMULATE_GPUS", "h100:2")
            .env("NO_COLOR", "1");
        c
    }

    fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
    }

    /// `div args…`, killed if it has not ended after a (generous) while: for commands that
    /// used to hang. A kill fails the test; the time is a guard, not a measurement.
    fn div_or_hang(&self, args: &[&str]) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("div starts");
        let patience = std::time::Duration::from_secs(120);
        let ended =
            div_test_support::poll_until(patience, || match child.try_wait().expect("wait") {
                Some(_) => Ok(()),
                None => Err(()),
            });
        if ended.is_err() {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("`div {}` hung: {}", args.join(" "), text(&out.stderr));
        }
        child.wait_with_output().expect("output")
    }

    /// What the control plane holds, as `div` lists it: the volumes, everything in each,
    /// and the runs.
    fn state(&self) -> String {
        let volumes = text(&self.div(&["storage", "ls", "--json"]).stdout);
        let mut state = format!("volumes: {volumes}\n");
        let names: Vec<String> = serde_json::from_str::<serde_json::Value>(&volumes)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect();
        for name in names {
            let inside = self.div(&["storage", "ls", "-r", &name]);
            state.push_str(&format!("{name}: {}\n", text(&inside.stdout)));
        }
        let runs = self.div(&["runs", "--all", "--json"]);
        state.push_str(&format!("runs: {}\n", text(&runs.stdout)));
        state
    }
}

/// Its runs stopped, then its server, when the test ends (as `support::Local`'s).
impl Drop for Local {
    fn drop(&mut self) {
        div_test_support::leftovers::stop_runs_with_div(
            &|args| self.command(args),
            &self.tmp.path().join("div-home"),
            self.tmp.path(),
        );
        let _ = self.div(&["server", "stop"]);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether `s` holds a character a terminal acts on: ESC, C1 controls (CSI is U+009B), BEL,
/// a carriage return, or a bidi override.
fn drives_a_terminal(s: &str) -> bool {
    s.chars()
        .any(|c| matches!(c, '\u{1b}' | '\u{7}' | '\r' | '\u{9b}' | '\u{202e}'))
}

/// Every non-empty partial upload under `root` (the server's `blobs/<volume>/partial/`), with
/// its size.
fn partial_uploads(root: &std::path::Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file()
                && meta.len() > 0
                && dir.file_name().is_some_and(|n| n == "partial")
            {
                found.push((path, meta.len()));
            }
        }
    }
    found
}

/// Whether `div storage ls`'s output `ls` has a line of `size` and `name`, however the
/// columns are padded.
fn listed_as(ls: &str, size: &str, name: &str) -> bool {
    ls.lines().any(|l| {
        l.strip_prefix(size)
            .is_some_and(|rest| rest.starts_with(' ') && rest.trim_start() == name)
    })
}
