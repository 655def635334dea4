//! The user's loop on the server side (issue 14): Python's output unbuffered, a download cache
//! every run shares, the queue saying why a run waits, emulated GPUs that behave, the org
//! usage limit. End to end: the real `div` on the local control plane, started on demand.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::DIV;

/// A temp home and a project `loop` on the local control plane; stops the server it started
/// when dropped.
struct Local {
    tmp: tempfile::TempDir,
}

impl Local {
    fn new() -> Local {
        let tmp = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir_all(tmp.path().join("loop")).expect("mkdir");
        std::fs::write(tmp.path().join("loop/hello.py"), "print('hello')\n").expect("write");
        Local { tmp }
    }

    fn project(&self) -> PathBuf {
        self.tmp.path().join("loop")
    }

    fn home(&self) -> PathBuf {
        self.tmp.path().join("div-home")
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        command(self.tmp.path(), &self.project(), args)
    }

    fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
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

/// Every run gets `PYTHONUNBUFFERED=1`, which `--env` overrides; pip's and uv's caches point
/// at one directory every run shares, so what one run downloads the next finds.
#[test]
fn python_is_unbuffered_and_every_run_shares_one_download_cache() {
    let local = Local::new();
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--",
        "echo unbuffered=$PYTHONUNBUFFERED; echo pip=$PIP_CACHE_DIR uv=$UV_CACHE_DIR; \
         echo downloaded > \"$PIP_CACHE_DIR/wheel\"",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("unbuffered=1\n"), "{stdout}");
    assert!(
        stdout.contains("pip=/cache/pip uv=/cache/uv\n")
            || stdout.contains(&format!(
                "pip={0}/cache/pip uv={0}/cache/uv\n",
                local.home().display()
            )),
        "{stdout}"
    );
    // The cache is the state directory's, on the host, where the next run finds it.
    assert_eq!(
        std::fs::read_to_string(local.home().join("cache/pip/wheel"))
            .expect("the cache on the host"),
        "downloaded\n"
    );

    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--env",
        "PYTHONUNBUFFERED=0",
        "--",
        "echo unbuffered=$PYTHONUNBUFFERED; cat \"$PIP_CACHE_DIR/wheel\"",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("unbuffered=0\ndownloaded\n"), "{stdout}");
}
