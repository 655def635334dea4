//! The user's loop on the server side (issue 14): Python's output unbuffered, a download cache
//! every run shares, the queue saying why a run waits, emulated GPUs that behave, the org
//! usage limit. End to end: the real `div` on the local control plane, started on demand.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{Local, text};

/// The project `loop` on the local control plane.
fn project() -> Local {
    Local::new("loop", &[("hello.py", "print('hello')\n")])
}

/// Every run gets `PYTHONUNBUFFERED=1`, which `--env` overrides; pip's and uv's caches point
/// at one directory every run shares, so what one run downloads the next finds.
#[test]
fn python_is_unbuffered_and_every_run_shares_one_download_cache() {
    let local = project();
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

/// The run's name: the first word of the last line of `div run`'s stderr.
fn name_of(out: &Output) -> String {
    text(&out.stdout).trim().to_owned()
}

/// Reads `child`'s stderr up to the first line starting with `prefix`; returns the lines read.
fn lines_until(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    prefix: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("stderr is text");
        let done = line.starts_with(prefix);
        seen.push(line);
        if done {
            return seen;
        }
    }
    panic!("no line starting with `{prefix}` in {seen:?}");
}

/// A run that waits says why, `div run` and `div logs --follow` alike, and says when it
/// starts.
#[test]
fn a_queued_run_says_why_it_waits_and_when_it_starts() {
    use std::io::BufRead;
    let local = project();
    let div = |args: &[&str]| {
        local
            .command(args)
            .env("DIVERGENT_EMULATE_GPUS", "h100:1")
            .output()
            .expect("div runs")
    };
    let spawn = |args: &[&str]| {
        local
            .command(args)
            .env("DIVERGENT_EMULATE_GPUS", "h100:1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("div starts")
    };
    let holder = div(&["run", "-d", "--gpu", "h100", "--", "sleep 300"]);
    assert_eq!(holder.status.code(), Some(0), "{}", text(&holder.stderr));
    let holder = name_of(&holder);

    let mut attached = spawn(&["run", "--gpu", "h100", "--", "echo b-ran"]);
    let mut attached_err = std::io::BufReader::new(attached.stderr.take().expect("stderr")).lines();
    let before = lines_until(&mut attached_err, "queued: ");
    assert_eq!(
        before.last().map(String::as_str),
        Some("queued: waiting for 1 H100")
    );

    let behind = div(&["run", "-d", "--gpu", "h100", "--", "echo c-ran"]);
    let behind = name_of(&behind);
    let mut follower = spawn(&["logs", &behind, "--follow"]);
    let mut follower_err = std::io::BufReader::new(follower.stderr.take().expect("stderr")).lines();
    let said = lines_until(&mut follower_err, "queued: ");
    assert_eq!(
        said.last().map(String::as_str),
        Some("queued: waiting for 1 H100, 1 run ahead")
    );

    let stop = div(&["stop", &holder]);
    assert_eq!(stop.status.code(), Some(0), "{}", text(&stop.stderr));

    let rest: Vec<String> = attached_err.map(|l| l.expect("text")).collect();
    let out = attached.wait_with_output().expect("div run ends");
    assert_eq!(out.status.code(), Some(0), "{rest:?}");
    assert!(text(&out.stdout).contains("b-ran"), "{}", text(&out.stdout));
    assert!(rest[0].ends_with(" started"), "{rest:?}");
    assert!(rest[0].starts_with("run-"), "{rest:?}");

    let rest: Vec<String> = follower_err.map(|l| l.expect("text")).collect();
    let out = follower.wait_with_output().expect("div logs ends");
    assert_eq!(out.status.code(), Some(0), "{rest:?}");
    assert!(text(&out.stdout).contains("c-ran"), "{}", text(&out.stdout));
    let started = format!("{behind} started");
    let at = rest
        .iter()
        .position(|l| *l == started)
        .expect("it says it started");
    // Until then, only how it waits: once the first run has the GPU, nothing is ahead.
    assert!(
        rest[..at].iter().all(|l| l == "queued: waiting for 1 H100"),
        "{rest:?}"
    );
}

/// The org usage limit, set in the local control plane's `settings.json`: a run going when it
/// is reached is stopped by the org (exit 207, runtime.md's last line), and while it stays
/// reached a new run is refused before anything is uploaded or placed, with the limit and
/// the month's spend. On an emulated H100, with a limit of one cent.
#[test]
fn the_org_usage_limit_stops_runs_going_and_refuses_new_ones() {
    let local = project();
    let div = |args: &[&str]| {
        local
            .command(args)
            .env("DIVERGENT_EMULATE_GPUS", "h100:1")
            .output()
            .expect("div runs")
    };
    std::fs::create_dir_all(local.home()).expect("home");
    std::fs::write(
        local.home().join("settings.json"),
        r#"{"org_usage_limit_cents": 1}"#,
    )
    .expect("settings");

    let out = div(&["run", "--gpu", "h100", "--", "echo going; sleep 300"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(207), "{stderr}");
    assert!(
        text(&out.stdout).contains("going\n"),
        "{}",
        text(&out.stdout)
    );
    let last = stderr.lines().last().unwrap_or_default();
    let name = last.split(' ').next().unwrap_or_default();
    assert!(name.starts_with("run-"), "{stderr}");
    let (head, tail) = last
        .split_once(": org usage limit of $0.01 reached — $")
        .unwrap_or_else(|| panic!("the org's reason: {last}"));
    assert!(
        head.starts_with(&format!("{name} was stopped by the org after ")),
        "{last}"
    );
    assert!(tail.ends_with(" spent"), "{last}");
    let logs = div(&["logs", name]);
    assert!(
        text(&logs.stdout).contains("div: stopped by the org: org usage limit of $0.01 reached\n"),
        "{}",
        text(&logs.stdout)
    );

    let runs_before = text(&div(&["runs", "--json"]).stdout);
    let tree = |dir: &Path| walk(dir);
    let volumes_before = tree(&local.home().join("volumes"));
    std::fs::write(local.project().join("new.py"), "print('new')\n").expect("write");
    let refused = div(&["run", "--gpu", "h100", "new.py"]);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains("error: the org usage limit of $0.01 is reached: $0.0"),
        "{stderr}"
    );
    assert!(stderr.contains(" spent in 20"), "{stderr}");
    assert!(
        stderr.contains("nothing was uploaded or placed"),
        "{stderr}"
    );
    // Nothing was created: no run, and not a byte more in any volume.
    assert_eq!(text(&div(&["runs", "--json"]).stdout), runs_before);
    assert_eq!(tree(&local.home().join("volumes")), volumes_before);

    // Raised, runs go again.
    std::fs::write(
        local.home().join("settings.json"),
        r#"{"org_usage_limit_cents": 100000}"#,
    )
    .expect("settings");
    let out = div(&["run", "--gpu", "h100", "new.py"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("new\n"));
}

/// Every path under `dir`, with its size, sorted.
fn walk(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        if meta.is_dir() {
            found.extend(walk(&path));
        }
        found.push((path, meta.len()));
    }
    found.sort();
    found
}

/// This machine's memory in whole GiB, as the server reads it.
fn host_memory_gib() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let line = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .expect("MemTotal");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a count");
    kib >> 20
}

/// Under emulation, div-run.md's own examples run whatever this machine's size: their cores
/// and memory are emulated and shared, and the first log line says so. Without emulation,
/// memory past the machine is refused, as cores are.
#[test]
fn emulated_containers_past_the_machine_run_and_say_so_and_real_ones_are_refused() {
    let local = project();
    let host_cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let host_gib = host_memory_gib();
    let div = |args: &[&str]| {
        local
            .command(args)
            .env("DIVERGENT_EMULATE_GPUS", "h100:8")
            .output()
            .expect("div runs")
    };
    let out = div(&[
        "run", "--gpu", "h100", "--cpu", "8", "--memory", "64G", "hello.py",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("H100 · 8 cores · 64 GiB  $7.82/h")),
        "{stderr}"
    );
    let stdout = text(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    if host_cores < 8 || host_gib < 64 {
        assert_eq!(
            first,
            format!(
                "div: emulated H100 ×1 (DIVERGENT_EMULATE_GPUS): this run has no GPU; its 8 cores and 64 GiB are emulated too: it shares this machine's {host_cores} cores and {host_gib} GiB with every other run"
            ),
            "{stdout}"
        );
    }
    assert!(stdout.contains("hello\n"), "{stdout}");

    let out = div(&["run", "--gpu", "h100", "--gpus", "8", "hello.py"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("hello\n"));

    // Emulated GPUs do not make the cpu SKU's cores or memory emulated: past the machine,
    // refused.
    if host_gib < 336 {
        let out = div(&["run", "--gpu", "cpu", "--memory", "336G", "hello.py"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(200), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "this machine has {host_gib} GiB of memory; the run asks for 336 GiB"
            )),
            "{stderr}"
        );
        // Without emulation, refused before anything is shipped, from the catalogue.
        let real = project();
        let out = real.div(&["run", "--gpu", "cpu", "--memory", "336G", "hello.py"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(200), "{stderr}");
        assert!(
            stderr.contains(&format!("the most is {host_gib} GiB")),
            "{stderr}"
        );
        assert!(!stderr.contains("shipping"), "{stderr}");
    }
}

/// With the server already running on another inventory, `DIVERGENT_EMULATE_GPUS=h100:8 div
/// run --gpu h100` restarts it with the one asked for when no run is going, and says exactly
/// why not when one is.
#[test]
fn a_server_on_another_inventory_is_restarted_when_no_run_is_going() {
    let local = project();
    let with = |gpus: &str, args: &[&str]| {
        local
            .command(args)
            .env("DIVERGENT_EMULATE_GPUS", gpus)
            .output()
            .expect("div runs")
    };
    // `div config` says which inventory is really in effect: none before a server runs,
    // then the running server's, whatever this `div` asks for.
    let inventory = |out: Output| -> String {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .find(|l| l.starts_with("inventory "))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(
        inventory(with("h100:8", &["config"])),
        "inventory none running (no local control plane answers; the next one starts with emulate_gpus)"
    );
    let going = with("h100:2", &["run", "-d", "--gpu", "cpu", "--", "sleep 300"]);
    assert_eq!(going.status.code(), Some(0), "{}", text(&going.stderr));
    let going = name_of(&going);
    assert_eq!(
        inventory(with("h100:8", &["config"])),
        "inventory emulated GPUs `h100:2` (the local control plane running now)"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&local.div(&["config", "--json"]).stdout).expect("JSON");
    let last = json.as_array().and_then(|a| a.last()).cloned();
    assert_eq!(
        last,
        Some(
            serde_json::json!({"name": "inventory", "value": "emulated GPUs `h100:2`", "from": "the local control plane running now"})
        )
    );

    let refused = with(
        "h100:8",
        &["run", "--gpu", "h100", "--gpus", "8", "hello.py"],
    );
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains(
            "error: the local control plane is running with emulated GPUs `h100:2`, not the emulated GPUs `h100:8` asked for, and 1 run is going on it, so it cannot be restarted with them now"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("`DIVERGENT_EMULATE_GPUS=h100:2`"),
        "{stderr}"
    );

    let stop = with("h100:2", &["stop", &going]);
    assert_eq!(stop.status.code(), Some(0), "{}", text(&stop.stderr));
    let out = with(
        "H100:8",
        &["run", "--gpu", "h100", "--gpus", "8", "hello.py"],
    );
    ran_on_eight_h100(&out);
}

/// A server on another inventory that is too slow for `div`'s first look (a loaded machine;
/// here it is stopped with SIGSTOP until `div` has tried to start another) is still found,
/// and restarted with the inventory asked for when no run is going: `div` does not run on the
/// old one because it answered late.
#[test]
fn a_server_on_another_inventory_too_slow_for_the_first_look_is_still_restarted() {
    let local = project();
    let with = |gpus: &str, args: &[&str]| {
        local
            .command(args)
            .env("DIVERGENT_EMULATE_GPUS", gpus)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("div starts")
    };
    let first = with("h100:2", &["runs"])
        .wait_with_output()
        .expect("div ends");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let log = local.home().join("server.log");
    let starts = |log: &Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .matches("div server: serving ")
            .count()
    };
    assert_eq!(starts(&log), 1);
    let held = Held::server_of(&local);
    let asking = with(
        "h100:8",
        &["run", "--gpu", "h100", "--gpus", "8", "hello.py"],
    );
    // `div` found none answering and started another, which found the home taken. Two `div`
    // processes begin one after the other before that line: beside the fault suite's bombs
    // (`.ci/stress`) that once took longer than 60 s. The bound is as long as `div` itself
    // waits for a server still opening.
    div_test_support::wait_until(
        "`div` starting a second server",
        div_server::local::START_DEADLINE * div_server::local::OPENING_FACTOR,
        || match starts(&log) {
            2.. => Ok(()),
            n => Err(n),
        },
    );
    drop(held);
    let out = asking.wait_with_output().expect("div ends");
    ran_on_eight_h100(&out);
}

/// `div server stop` stops a server too slow to answer its look (here held with SIGSTOP):
/// it holds its home, so it is running, not "not running", and it is told to stop and
/// waited for.
#[test]
fn div_server_stop_stops_a_server_too_slow_to_answer() {
    let local = project();
    let first = local.div(&["runs"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let held = Held::server_of(&local);
    let pid = held.pid;
    let stopping = local
        .command(&["server", "stop"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("div starts");
    // SIGTERM waits, pending, until the server goes on.
    let pending = |pid: i32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .filter(|l| l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
            .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
            .any(|mask| mask & (1 << 14) != 0)
    };
    div_test_support::wait_until(
        "SIGTERM pending for the held server",
        std::time::Duration::from_secs(60),
        || {
            if pending(pid) { Ok(()) } else { Err("not yet") }
        },
    );
    drop(held);
    let out = stopping.wait_with_output().expect("div ends");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("stopped the local control plane (pid {pid})")),
        "{stderr}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists() || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.split_whitespace().nth(2) == Some("Z")
        }
    );
}

/// The running local control plane, held with SIGSTOP (as a machine loaded far past its cores
/// holds it: too slow for any look), and let go on when dropped, however the test ends.
struct Held {
    pid: i32,
}

impl Held {
    fn server_of(local: &Local) -> Held {
        let pid: i32 = std::fs::read_to_string(local.home().join("server.pid"))
            .expect("server.pid")
            .trim()
            .parse()
            .expect("a pid");
        let held = Held { pid };
        rustix::process::kill_process(held.server(), rustix::process::Signal::STOP)
            .expect("the server stopped");
        held
    }

    fn server(&self) -> rustix::process::Pid {
        rustix::process::Pid::from_raw(self.pid).expect("a positive pid")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(self.server(), rustix::process::Signal::CONT);
    }
}

/// `out` is a `div run` that passed on the inventory asked for, eight emulated H100s.
fn ran_on_eight_h100(out: &std::process::Output) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        text(&out.stdout).contains("div: emulated H100 ×8"),
        "{}",
        text(&out.stdout)
    );
}
