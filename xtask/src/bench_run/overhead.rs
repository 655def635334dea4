//! What `startup` times a run against, and how: a bare `bwrap … sh -lc COMMAND` with the binds
//! the local control plane gives a run, and a command timed line by line as its output comes.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};

use crate::bench_local::spawn_piped;

/// bwrap with the binds the local control plane gives a run: each top-level folder read-only,
/// the top-level links, `/proc`, `/dev`, and writable `/tmp`, `/mnt` and `/workspace`.
pub(super) fn bare_bwrap(dir: &Path, command: &str) -> Result<Command> {
    let mut cmd = Command::new("bwrap");
    cmd.args([
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--share-net",
    ]);
    let mut entries: Vec<_> = fs::read_dir("/")?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name();
        if ["proc", "dev", "sys", "tmp", "mnt", "workspace"]
            .iter()
            .any(|s| name == *s)
        {
            continue;
        }
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            cmd.arg("--symlink").arg(fs::read_link(&path)?).arg(&path);
        } else if meta.is_dir() || meta.is_file() {
            cmd.arg("--ro-bind").arg(&path).arg(&path);
        }
    }
    cmd.args(["--proc", "/proc", "--dev", "/dev"]);
    for (sub, at) in [("tmp", "/tmp"), ("mnt", "/mnt"), ("ws", "/workspace")] {
        let d = dir.join(sub);
        fs::create_dir_all(&d)?;
        cmd.arg("--bind").arg(&d).arg(at);
    }
    cmd.args(["--chdir", "/workspace", "sh", "-lc", command]);
    Ok(cmd)
}

/// Each line's arrival on stdout and stderr, timed from the moment the command was started.
pub(super) struct Timed {
    /// When it was started, in microseconds since the Unix epoch.
    pub(super) spawned_us: u64,
    /// Each line: when it came, whether on stdout, the line.
    pub(super) lines: Vec<(Duration, bool, String)>,
    /// When its process was seen to exit.
    pub(super) exit: Duration,
}

/// Runs `cmd` with no stdin, its output piped and read line by line as it comes; fails unless
/// it exits 0.
pub(super) fn timed(mut cmd: Command) -> Result<Timed> {
    let spawned_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let started = Instant::now();
    let mut child = spawn_piped(&mut cmd)?;
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().context("a piped stdout")?;
    let err = child.stderr.take().context("a piped stderr")?;
    let tx2 = tx.clone();
    let a = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((started.elapsed(), true, line));
        }
    });
    let b = std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send((started.elapsed(), false, line));
        }
    });
    let status = child.wait()?;
    let exit = started.elapsed();
    let _ = (a.join(), b.join());
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(Timed {
        spawned_us,
        lines: rx.try_iter().collect(),
        exit,
    })
}
