//! Told to stop: SIGTERM to the run (through div-init, which tells every process of it and
//! waits for them all), its grace, then SIGKILL to whatever is left (at the ceiling or the
//! time limit, at that very second; for a node of several, at the decision's moment).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use super::launch::Launched;
use super::prepare::Room;
use super::spec::RunSpec;
use super::tree::{tell_init, terminate, tree_rss};
use super::watch::{Stopped, Watch};
use crate::clock::now_ms;
use crate::decision;

/// When whatever is left of a run told to stop is killed, in ms since its start; `None`: it
/// is not told (it exited, or is killed at once).
pub(super) fn kill_at(stopped: &Stopped, spec: &RunSpec, watch: &Watch) -> Option<u64> {
    match stopped {
        Stopped::Canceled | Stopped::Org(_) => Some(
            now_ms()
                .saturating_sub(spec.started_ms)
                .saturating_add(spec.stop_grace_seconds.saturating_mul(1000)),
        ),
        Stopped::Ceiling => watch.ceiling.map(|at| at.limit_ms),
        Stopped::Day => Some(watch.day.limit_ms),
        // The decision's moment is the same on every node: as ms since this run's start.
        Stopped::Decided(d) => Some(d.kill_at_ms.saturating_sub(spec.started_ms)),
        Stopped::Exited
        | Stopped::Memory
        | Stopped::DiskFull
        | Stopped::Gone
        | Stopped::DiskLimit(_) => None,
    }
}

/// Tells the run, says so in its log, and waits for it until `kill_at_ms` (since its start).
/// Returns whether it was killed for its memory meanwhile (polled, where no cgroup holds it:
/// a handler that grows past it is killed now, as the kernel would).
pub(super) fn grace(
    spec: &RunSpec,
    room: &mut Room,
    run: &Launched,
    watch: &mut Watch,
    stopped: &Stopped,
    kill_at_ms: u64,
) -> bool {
    let left = kill_at_ms.saturating_sub(now_ms().saturating_sub(spec.started_ms));
    let _ = writeln!(room.log, "{}", told_line(stopped, spec, left));
    // Each of the run's processes is told once, those it starts during the grace too: a
    // stop that came before the command itself had started reaches it once it does. Under
    // div-init, it is told and it tells them, and the sandbox stays until they have all
    // exited; it is told again now and then, which it takes as the same stop, in case the
    // first came before it was ready to hear it.
    let child = run.child.id();
    let sandboxed = room.sandboxed;
    let init = spec.init.as_deref().map(|host| {
        if sandboxed {
            Path::new(crate::init::IN_SANDBOX)
        } else {
            host
        }
    });
    let mut told = BTreeSet::new();
    let mut told_init = Instant::now();
    match init {
        Some(init) => tell_init(child, sandboxed, init),
        None => terminate(child, sandboxed, &mut told),
    }
    while crate::waiting::child_exited(child).is_ok_and(|exited| !exited)
        && now_ms().saturating_sub(spec.started_ms) < kill_at_ms
    {
        run.exit.wait(Duration::from_millis(20));
        watch.beat(spec, room);
        match init {
            Some(init) if told_init.elapsed() >= Duration::from_millis(100) => {
                told_init = Instant::now();
                tell_init(child, sandboxed, init);
            }
            Some(_) => {}
            None => terminate(child, sandboxed, &mut told),
        }
        if room.cgroups.memory.is_none() && watch.last_poll.elapsed() >= Duration::from_millis(50) {
            watch.last_poll = Instant::now();
            if tree_rss(child) > spec.memory_bytes {
                return true;
            }
        }
    }
    false
}

/// The line the run's log gets as it is told, `left_ms` before the kill.
fn told_line(stopped: &Stopped, spec: &RunSpec, left_ms: u64) -> String {
    match stopped {
        Stopped::Ceiling => decision::told_line(
            &decision::ceiling_words(spec.max_spend_cents.unwrap_or_default(), left_ms),
            left_ms,
        ),
        Stopped::Day => decision::told_line(
            &decision::time_limit_line_words(spec.max_seconds, left_ms),
            left_ms,
        ),
        Stopped::Decided(d) => d.line.clone(),
        _ => decision::told_line(decision::ASKED_WORDS, left_ms),
    }
}
