//! `div-init COMMAND [ARG…]`: the first process of every run's sandbox.
//!
//! In a sandbox it is pid 1 of the run's pid namespace (bubblewrap's `--as-pid-1`); without
//! one it is a child subreaper above the command. Either way every process of the run is
//! beneath it, and every orphan of the run comes to it. It:
//!
//! - starts `COMMAND` (the run's `/bin/sh -lc …`) as its one child, with no signal blocked;
//! - reaps every process that ends beneath it, so no zombie piles up;
//! - on SIGTERM (the supervisor's stop: `div stop`, the ceiling, the time limit), tells every
//!   live process beneath it SIGTERM, once each, and each process that starts later too, and
//!   then waits until none is left, however the shell above them ended; then exits with
//!   `COMMAND`'s own code. The supervisor's SIGKILL at the end of the grace is what ends a
//!   process that does not exit;
//! - without a stop, exits as soon as `COMMAND` does, with its code (as pid 1, the kernel then
//!   ends whatever it left behind, as bubblewrap's own first process did);
//! - passes SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 on to `COMMAND`.
//!
//! Why not bubblewrap's own first process, tini or dumb-init: each of them exits when its
//! child does, and Debian's `sh -lc 'python train.py'` shell dies at the first SIGTERM while
//! Python is still in its handler, so the namespace went with it and the handler was killed
//! (docs/reliability.md, "Stops").
//!
//! It has no dependencies: div-server's build script compiles this file alone, with a
//! statically linked C library, so that the same binary runs inside any image.

// The few C calls std does not wrap (signal masks, waiting for signals, reaping any child,
// becoming a subreaper), each used as its manual page says. No other `unsafe` is here.
#![allow(unsafe_code)]
// Its only words are the two it says on stderr, which is the run's log, when it cannot start.
#![allow(clippy::print_stderr)]

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Signals as Linux numbers them on every architecture div builds for (x86_64, aarch64).
const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGQUIT: i32 = 3;
const SIGUSR1: i32 = 10;
const SIGUSR2: i32 = 12;
const SIGTERM: i32 = 15;
const SIGCHLD: i32 = 17;
/// Passed on to the command as they come.
const PASSED_ON: [i32; 5] = [SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2];
const SIG_BLOCK: i32 = 0;
const SIG_SETMASK: i32 = 2;
const WNOHANG: i32 = 1;
const ECHILD: i32 = 10;
const PR_SET_CHILD_SUBREAPER: i32 = 36;

/// glibc's and musl's `sigset_t`: 1,024 bits.
#[repr(C)]
struct SigSet([u64; 16]);

/// `struct timespec` on 64-bit Linux.
#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// `siginfo_t`: 128 bytes; only the signal's number is read, from the return value.
#[repr(C)]
struct SigInfo([u64; 16]);

unsafe extern "C" {
    fn sigemptyset(set: *mut SigSet) -> i32;
    fn sigaddset(set: *mut SigSet, signal: i32) -> i32;
    fn sigprocmask(how: i32, set: *const SigSet, old: *mut SigSet) -> i32;
    fn sigtimedwait(set: *const SigSet, info: *mut SigInfo, timeout: *const Timespec) -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn kill(pid: i32, signal: i32) -> i32;
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
}

/// The signals this process waits for rather than letting them act: blocked from its first
/// moment (a blocked signal is kept pending even for a pid 1 with no handler, which the
/// kernel would otherwise drop), and unblocked again in the command before it starts.
fn waited_for() -> SigSet {
    let mut set = SigSet([0; 16]);
    // SAFETY: `set` is a valid, writable sigset_t-sized buffer for both calls.
    unsafe {
        sigemptyset(&mut set);
        for signal in PASSED_ON.iter().chain(&[SIGTERM, SIGCHLD]) {
            sigaddset(&mut set, *signal);
        }
    }
    set
}

/// The next of [`waited_for`]'s signals, or `None` after `ms` milliseconds without one.
fn next_signal(set: &SigSet, ms: i64) -> Option<i32> {
    let timeout = Timespec {
        tv_sec: ms / 1000,
        tv_nsec: (ms % 1000) * 1_000_000,
    };
    let mut info = SigInfo([0; 16]);
    // SAFETY: all three pointers are to live values of the C types the call takes.
    let signal = unsafe { sigtimedwait(set, &mut info, &timeout) };
    (signal > 0).then_some(signal)
}

/// What a finished child's wait status says as an exit code: its own, or 128 and the signal
/// that ended it, as a shell says it.
fn exit_code(status: i32) -> i32 {
    let signal = status & 0x7f;
    if signal == 0 {
        (status >> 8) & 0xff
    } else {
        128 + signal
    }
}

/// What reaping every finished child found.
#[derive(Debug, PartialEq, Eq)]
enum Reaped {
    /// Some children are still going.
    Going,
    /// No child is left at all.
    None,
}

/// Reaps every child that has ended; the command's own code goes into `command_code`.
fn reap(command: i32, command_code: &mut Option<i32>) -> Reaped {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid place for the wait status.
        let pid = unsafe { waitpid(-1, &mut status, WNOHANG) };
        if pid > 0 {
            if pid == command {
                *command_code = Some(exit_code(status));
            }
            continue;
        }
        if pid == 0 {
            return Reaped::Going;
        }
        let errno = std::io::Error::last_os_error().raw_os_error();
        return if errno == Some(ECHILD) {
            Reaped::None
        } else {
            Reaped::Going
        };
    }
}

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proc {
    pid: u32,
    ppid: u32,
    /// When it started, in clock ticks since boot: with the pid, one process for good (a pid
    /// used again is another process).
    start: u64,
    zombie: bool,
}

/// Reads one `/proc/PID/stat` line. The command's name is in parentheses and may hold
/// anything, spaces and parentheses included: the fields are read after the last `)`.
fn parse_stat(pid: u32, line: &str) -> Option<Proc> {
    let (_, rest) = line.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?;
    Some(Proc {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
        zombie: *state == "Z" || *state == "X",
    })
}

fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            parse_stat(
                pid,
                &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
            )
        })
        .collect()
}

/// The live processes beneath `root` (not `root` itself).
fn beneath(root: u32, table: &[Proc]) -> Vec<Proc> {
    let mut tree = BTreeSet::from([root]);
    loop {
        let before = tree.len();
        for p in table {
            if tree.contains(&p.ppid) {
                tree.insert(p.pid);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    table
        .iter()
        .filter(|p| p.pid != root && tree.contains(&p.pid) && !p.zombie)
        .copied()
        .collect()
}

/// Tells SIGTERM to every live process beneath this one that was not told before (a
/// handler that saves a checkpoint runs once), and records them in `told`.
fn tell(told: &mut BTreeSet<(u32, u64)>) {
    let me = std::process::id();
    for p in beneath(me, &processes()) {
        if told.insert((p.pid, p.start)) {
            // SAFETY: a plain kill(2) of a pid; a process gone meanwhile gives ESRCH.
            unsafe { kill(p.pid as i32, SIGTERM) };
        }
    }
}

fn main() {
    let set = waited_for();
    // SAFETY: `set` is a valid sigset_t; the old mask is not asked for.
    unsafe { sigprocmask(SIG_BLOCK, &set, std::ptr::null_mut()) };
    // Orphans of the run come here even without a pid namespace (where this is pid 1, they
    // come anyway). SAFETY: prctl with integer arguments only.
    unsafe { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("div-init: no command given (usage: div-init COMMAND [ARG…])");
        std::process::exit(2);
    };
    let mut command = Command::new(&program);
    command.args(args);
    // The command starts with no signal blocked: std keeps the mask of the process that
    // spawns (this one blocks what it waits for), and a shell passes its mask on to the
    // commands it starts in the background, which then never heard a SIGTERM.
    // SAFETY: between fork and exec only sigprocmask is called, which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            let none = SigSet([0; 16]);
            if sigprocmask(SIG_SETMASK, &none, std::ptr::null_mut()) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!(
                "div-init: `{}` could not start: {e}",
                program.to_string_lossy()
            );
            std::process::exit(127);
        }
    };
    let command = child.id() as i32;
    let mut command_code: Option<i32> = None;
    let mut stopping = false;
    let mut told = BTreeSet::new();
    loop {
        let reaped = reap(command, &mut command_code);
        match (command_code, stopping, reaped) {
            // Ended on its own: so does the run.
            (Some(code), false, _) => std::process::exit(code),
            // Stopping: once every process of the run is gone.
            (Some(code), true, Reaped::None) => std::process::exit(code),
            (None, _, Reaped::None) => std::process::exit(1),
            _ => {}
        }
        if stopping {
            tell(&mut told);
        }
        // While stopping, looked at often: a process started during the grace is told too.
        match next_signal(&set, if stopping { 50 } else { 1000 }) {
            Some(SIGTERM) => {
                stopping = true;
                tell(&mut told);
            }
            Some(signal) if PASSED_ON.contains(&signal) && command_code.is_none() => {
                // SAFETY: a plain kill(2) of the command, not yet reaped, so its pid is its own.
                unsafe { kill(command, signal) };
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_after_the_last_parenthesis() {
        let line = "42 (a (b) c) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10";
        assert_eq!(
            parse_stat(42, line),
            Some(Proc {
                pid: 42,
                ppid: 7,
                start: 12345,
                zombie: false
            })
        );
        let zombie = "9 (sh) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0";
        assert!(parse_stat(9, zombie).expect("a zombie").zombie);
        assert_eq!(parse_stat(1, "1 (init"), None);
        assert_eq!(parse_stat(1, "1 (x) S nope"), None);
    }

    #[test]
    fn beneath_a_process_are_its_live_descendants_at_any_depth() {
        let p = |pid, ppid, zombie| Proc {
            pid,
            ppid,
            start: 0,
            zombie,
        };
        let table = [
            p(1, 0, false),
            p(2, 1, false),
            p(5, 2, false),
            p(6, 5, false),
            p(7, 5, true),
            p(9, 3, false),
        ];
        let pids: Vec<u32> = beneath(1, &table).iter().map(|p| p.pid).collect();
        assert_eq!(pids, [2, 5, 6]);
        assert!(beneath(6, &table).is_empty());
    }

    #[test]
    fn a_wait_status_reads_as_a_shell_says_it() {
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(3 << 8), 3);
        assert_eq!(exit_code(15), 143);
        assert_eq!(exit_code(9), 137);
    }
}
