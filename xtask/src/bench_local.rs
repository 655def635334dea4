//! What every benchmark of the `div` binary stands on: the binary itself (built in release
//! when none is given), a local control plane on a temp home ([`Local`]) whose runs are
//! stopped when it goes, and commands run quietly, piped, or measured with `du`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

/// The `div` binary: the one given, or a release build of this tree.
pub(crate) fn div_binary(div: Option<&Path>) -> Result<PathBuf> {
    if let Some(div) = div {
        return div
            .canonicalize()
            .with_context(|| format!("`{}`", div.display()));
    }
    crate::run(crate::cargo().args(["build", "--release", "--quiet", "-p", "div-cli"]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    let div = target.join("release/div");
    ensure!(div.exists(), "no `div` at `{}`", div.display());
    Ok(div)
}

/// A local control plane on a temp home, with a project folder beside it (holding a
/// `train.py`), stopped when dropped.
pub(crate) struct Local {
    div: PathBuf,
    pub(crate) home: PathBuf,
    pub(crate) project: PathBuf,
    gpus: String,
    _tmp: tempfile::TempDir,
}

impl Local {
    /// Starts one with `gpus` emulated (`""`: none).
    pub(crate) fn start(div: &Path, gpus: &str) -> Result<Local> {
        let tmp = tempfile::tempdir().context("creating a temporary folder")?;
        let project = tmp.path().join("bench");
        fs::create_dir_all(&project)?;
        fs::write(project.join("train.py"), "print('hi')\n")?;
        let local = Local {
            div: div.to_path_buf(),
            home: tmp.path().join("home"),
            project,
            gpus: gpus.to_owned(),
            _tmp: tmp,
        };
        local.ok(&["server", "start"])?;
        Ok(local)
    }

    /// `div args…` as this control plane's `div` runs: its home, no remote, no colour.
    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.div);
        cmd.args(args)
            .current_dir(&self.project)
            .env("DIVERGENT_HOME", &self.home)
            .env_remove("DIVERGENT_API_URL")
            .env_remove("DIVERGENT_TOKEN")
            .env("NO_COLOR", "1");
        if self.gpus.is_empty() {
            cmd.env_remove("DIVERGENT_EMULATE_GPUS");
        } else {
            cmd.env("DIVERGENT_EMULATE_GPUS", &self.gpus);
        }
        cmd
    }

    /// Runs `div args…`, quietly; fails unless it exits 0. Returns stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> Result<Vec<u8>> {
        let out = self
            .cmd(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running div {args:?}"))?;
        ensure!(
            out.status.success(),
            "div {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(out.stdout)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        stop_runs(|args| self.cmd(args));
        let _ = self.cmd(&["server", "stop"]).output();
    }
}

/// Stops every run of a local control plane that is queued or running (`div runs --all
/// --json`, then `div stop` each, all at once, for a minute at most), as a test's harness does
/// when it ends: a benchmark that failed half way leaves no run going in a home about to be
/// removed. `div` gives the command `div` is run with (its home and environment).
pub(crate) fn stop_runs(div: impl Fn(&[&str]) -> Command) {
    let listed = div(&["runs", "--all", "--limit", "1000", "--json"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let runs: Vec<serde_json::Value> = listed
        .ok()
        .and_then(|out| serde_json::from_slice(&out.stdout).ok())
        .unwrap_or_default();
    let mut stops: Vec<std::process::Child> = runs
        .iter()
        .filter(|r| matches!(r["status"].as_str(), Some("queued" | "running")))
        .filter_map(|r| r["id"].as_str())
        .filter_map(|id| {
            div(&["stop", id])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stops.is_empty() && Instant::now() < deadline {
        stops.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        std::thread::sleep(Duration::from_millis(50));
    }
    for mut stop in stops {
        let _ = stop.kill();
        let _ = stop.wait();
    }
}

pub(crate) fn quiet(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("starting {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(())
}

/// Starts `cmd` with no stdin and its stdout and stderr piped.
pub(crate) fn spawn_piped(cmd: &mut Command) -> Result<std::process::Child> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))
}

/// Bytes `dirs` take on disk together, each inode counted once (`du`'s count): blocks,
/// folders included.
pub(crate) fn du(dirs: &[&Path]) -> Result<u64> {
    use std::collections::HashSet;
    use std::os::unix::fs::MetadataExt as _;
    fn walk(p: &Path, seen: &mut HashSet<(u64, u64)>, total: &mut u64) -> std::io::Result<()> {
        let m = fs::symlink_metadata(p)?;
        if seen.insert((m.dev(), m.ino())) {
            *total += m.blocks() * 512;
        }
        if m.is_dir() {
            for entry in fs::read_dir(p)? {
                walk(&entry?.path(), seen, total)?;
            }
        }
        Ok(())
    }
    let (mut seen, mut total) = (HashSet::new(), 0);
    for dir in dirs {
        match walk(dir, &mut seen, &mut total) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.with_context(|| format!("measuring `{}`", dir.display()))?,
        }
    }
    Ok(total)
}
