//! div-init as a process, run as a subreaper (no pid namespace here): what it starts has no
//! signal blocked, a stop reaches every process beneath it, those a shell started in the
//! background and those that left the tree included, and it waits for them all.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const INIT: &str = env!("CARGO_BIN_EXE_div-init");

/// Reads the child's stdout until it holds `needle` (or the deadline, a wait for a state).
fn read_until(out: &mut impl Read, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 256];
    while !seen.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "never saw {needle:?} in {seen:?}"
        );
        let n = out.read(&mut buf).expect("read");
        assert!(n > 0, "ended before {needle:?}: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[test]
fn the_command_starts_with_no_signal_blocked_and_its_code_is_inits() {
    let out = Command::new(INIT)
        .args(["/bin/sh", "-c", "grep SigBlk /proc/self/status; exit 3"])
        .output()
        .expect("div-init runs");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "SigBlk:\t0000000000000000\n"
    );
}

#[test]
fn a_stop_reaches_background_and_daemonized_processes_and_is_waited_for() {
    // Two handlers that take a while, one backgrounded by the shell and one that left the
    // tree (setsid, as a daemon does); the shell itself has no trap and dies at once.
    let handler = "import signal, sys, time\n\
                   def on(*_):\n    time.sleep(1)\n    print(sys.argv[1] + ' saved', flush=True)\n    sys.exit(0)\n\
                   signal.signal(signal.SIGTERM, on)\n\
                   print(sys.argv[1] + ' ready', flush=True)\n\
                   while True: time.sleep(0.05)\n";
    let script = "python3 -c \"$0\" background & setsid -f python3 -c \"$0\" daemon; wait";
    let mut child = Command::new(INIT)
        .args(["/bin/sh", "-c", script, handler])
        .stdout(Stdio::piped())
        .spawn()
        .expect("div-init runs");
    let mut out = child.stdout.take().expect("stdout");
    let mut seen = String::new();
    read_until(&mut out, &mut seen, "background ready");
    read_until(&mut out, &mut seen, "daemon ready");
    // SIGTERM to div-init alone, as the supervisor sends it.
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let status = child.wait().expect("div-init ends");
    out.read_to_string(&mut seen).expect("the rest");
    assert!(seen.contains("background saved"), "{seen}");
    assert!(seen.contains("daemon saved"), "{seen}");
    // The shell was ended by the signal: its code, as a shell says it.
    assert_eq!(status.code(), Some(143), "{seen}");
}
