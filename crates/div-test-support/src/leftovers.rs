//! Nothing left behind: what a test harness that made a control plane does when it ends,
//! pass or panic (its `Drop`): every run it placed that is still queued or running is
//! stopped, within [`STOP_WITHIN`], before its server is stopped and its temp dir removed. A
//! run left going there keeps running with its state directory deleted under it.
//!
//! - [`processes_under`]: the processes whose command line names a path under a folder, or
//!   whose working directory is under it (a run's supervisor names its run directory, its
//!   `bwrap` the binds; an unsandboxed run works in its `/workspace`);
//! - [`stop_runs_with_div`]: the runs stopped the way a user would, `div runs --all --json`
//!   and `div stop` each, for harnesses that drive the real `div`.
//!
//! `.ci/leftovers` asks the same question of the whole machine after the suite.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a harness waits, in all, for the runs it stops to end (a run told to stop has its
/// grace, 10 s unless it set another, then is killed).
pub const STOP_WITHIN: Duration = Duration::from_secs(60);

/// A process of this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// Its arguments, joined by spaces.
    pub command: String,
    /// Its working directory, where it can be read.
    pub cwd: Option<PathBuf>,
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}`", self.pid, self.command)?;
        if let Some(cwd) = &self.cwd {
            write!(f, " in {}", cwd.display())?;
        }
        Ok(())
    }
}

/// Every process (but this one) one of whose arguments is `dir` or a path under it, or whose
/// working directory is under it.
pub fn processes_under(dir: &Path) -> Vec<Process> {
    let dir = dir.to_string_lossy().trim_end_matches('/').to_owned();
    if dir.is_empty() {
        return Vec::new();
    }
    let beneath = format!("{dir}/");
    let names = |text: &str| text == dir || text.contains(&beneath);
    let me = std::process::id();
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in proc.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let cwd = std::fs::read_link(entry.path().join("cwd")).ok();
        let in_dir = cwd.as_ref().is_some_and(|c| names(&c.to_string_lossy()));
        if in_dir || args.iter().any(|a| names(a)) {
            found.push(Process {
                pid,
                command: args.join(" "),
                cwd,
            });
        }
    }
    found
}

/// Stops every run of the local control plane in `home` that is queued or running, through
/// `div` (`div runs --all --json`, then `div stop` for each, all at once), waiting at most
/// [`STOP_WITHIN`]. `div` gives the command a test runs `div` with (its environment, its
/// user); `scope` is the test's temp dir. Nothing is asked when no server is listening there
/// and no process of `scope` is left (so a test that never started a server starts none
/// here). What is still going after the wait is said on stderr, for `.ci/leftovers` to fail
/// on. The caller stops the server after.
pub fn stop_runs_with_div(div: &dyn Fn(&[&str]) -> Command, home: &Path, scope: &Path) {
    if !home.join("server.sock").exists() && processes_under(scope).is_empty() {
        return;
    }
    let deadline = Instant::now() + STOP_WITHIN;
    let listed = div(&["runs", "--all", "--limit", "1000", "--json"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let runs: Vec<serde_json::Value> = listed
        .ok()
        .and_then(|out| serde_json::from_slice(&out.stdout).ok())
        .unwrap_or_default();
    let going: Vec<String> = runs
        .iter()
        .filter(|r| matches!(r["status"].as_str(), Some("queued" | "running")))
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect();
    let mut stops: Vec<(String, std::process::Child)> = going
        .into_iter()
        .filter_map(|id| {
            let child = div(&["stop", &id])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()?;
            Some((id, child))
        })
        .collect();
    while !stops.is_empty() && Instant::now() < deadline {
        stops.retain_mut(|(_, child)| matches!(child.try_wait(), Ok(None)));
        std::thread::sleep(Duration::from_millis(50));
    }
    for (id, mut child) in stops {
        let _ = child.kill();
        let _ = child.wait();
        say(&format!(
            "`div stop {id}` did not end within {}s",
            STOP_WITHIN.as_secs()
        ));
    }
}

/// Says on stderr what a harness could not clean up.
pub fn say(what: &str) {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("leftovers: {what}");
    }
}
