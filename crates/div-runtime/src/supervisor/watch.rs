//! While the run goes: the supervisor looks, every 20 ms (at once when the run exits), for
//! what ends it: its exit, a stop asked (by the server, the org, or for a node of several the
//! control plane's decision), its ceiling or time limit near, its memory or disk past, a full
//! disk, its run directory gone.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use super::launch::Launched;
use super::prepare::{Room, dir_identity};
use super::spec::HEARTBEAT;
use super::spec::{ORG_STOP_FILE, RunSpec, STOP_FILE};
use super::tree::tree_rss;
use crate::clock::now_ms;
use crate::decision::{self, Decision, Limit};
use crate::{scratch, sys};

/// How the watching loop ended.
pub(super) enum Stopped {
    Exited,
    Canceled,
    /// Stopped by the org (its usage limit), with the reason the server gave.
    Org(String),
    Ceiling,
    Day,
    Memory,
    DiskFull,
    /// The control plane's decision for the whole run (a node of several).
    Decided(Decision),
    /// Its run directory is gone, or is not the one it started in.
    Gone,
    /// Its writable places passed its disk (measured: no filesystem of its own).
    DiskLimit(u64),
}

/// How often a disk without a filesystem of its own is measured.
const DISK_MEASURED_EVERY: Duration = Duration::from_secs(3);

/// Whether `dir` is still the directory `own` identified.
fn same_dir(dir: &Path, own: Option<(u64, u64)>) -> bool {
    own.is_none() || dir_identity(dir) == own
}

/// What the supervisor keeps while it watches: the run's limits, and when it last looked at
/// what it looks at less often.
#[derive(Debug)]
pub(super) struct Watch {
    pub(super) ceiling: Option<Limit>,
    pub(super) day: Limit,
    pub(super) last_poll: Instant,
    last_measured: Instant,
    /// A disk that is not a filesystem of its own is measured against this, every few seconds.
    measured: Option<u64>,
    last_beat: Instant,
    slurmd_gone_said: bool,
}

impl Watch {
    /// The run's limits from its spec; a node of several says it is well from the first.
    pub(super) fn new(spec: &RunSpec, room: &mut Room) -> Watch {
        let grace = spec.stop_grace_seconds;
        let mut watch = Watch {
            ceiling: Limit::ceiling(spec.cents_per_hour, spec.max_spend_cents, grace),
            day: Limit::new(spec.max_seconds, grace),
            last_poll: Instant::now(),
            last_measured: Instant::now(),
            measured: room
                .disk
                .as_ref()
                .filter(|d| !d.own_filesystem)
                .map(|d| d.bytes),
            last_beat: Instant::now(),
            slurmd_gone_said: false,
        };
        if let Some(node) = &spec.node {
            node.beat(&mut room.log, &mut watch.slurmd_gone_said);
        }
        watch
    }

    /// A node of several says it is well, every [`HEARTBEAT`].
    pub(super) fn beat(&mut self, spec: &RunSpec, room: &mut Room) {
        if let Some(node) = &spec.node
            && self.last_beat.elapsed() >= HEARTBEAT
        {
            self.last_beat = Instant::now();
            node.beat(&mut room.log, &mut self.slurmd_gone_said);
        }
    }

    /// Watches the run until something ends it.
    pub(super) fn until_stopped(
        &mut self,
        run_dir: &Path,
        spec: &RunSpec,
        room: &mut Room,
        run: &Launched,
    ) -> Stopped {
        let stop_file = run_dir.join(STOP_FILE);
        loop {
            // Not reaped here: see `crate::waiting::child_exited`.
            match crate::waiting::child_exited(run.child.id()) {
                Ok(true) => return Stopped::Exited,
                Ok(false) => {}
                Err(_) => return Stopped::Canceled,
            }
            if let Some(stopped) = self.asked(run_dir, spec, room, &stop_file) {
                return stopped;
            }
            if let Some(stopped) = self.limits(spec) {
                return stopped;
            }
            if let Some(stopped) = self.resources(run_dir, spec, room, run) {
                return stopped;
            }
            // Woken at once when the run exits.
            run.exit.wait(Duration::from_millis(20));
        }
    }

    /// A stop asked: by the org (the server wrote why before asking; an empty file is still
    /// being written by an older server, and the next look reads it), by the control plane's
    /// decision for a node of several, by the server.
    fn asked(
        &mut self,
        run_dir: &Path,
        spec: &RunSpec,
        room: &mut Room,
        stop_file: &Path,
    ) -> Option<Stopped> {
        if let Ok(reason) = fs::read_to_string(run_dir.join(ORG_STOP_FILE))
            && !reason.trim().is_empty()
        {
            return Some(Stopped::Org(reason.trim().chars().take(200).collect()));
        }
        if let Some(node) = &spec.node {
            if let Some(decided) = decision::read(&node.run_dir) {
                return Some(Stopped::Decided(decided));
            }
            self.beat(spec, room);
        }
        (sys::stop_requested() || stop_file.exists()).then_some(Stopped::Canceled)
    }

    /// Near the ceiling or the time limit: told while what is left still buys the grace. (A
    /// node of several is told by the control plane's decision instead.)
    fn limits(&self, spec: &RunSpec) -> Option<Stopped> {
        if spec.node.is_some() {
            return None;
        }
        let elapsed = now_ms().saturating_sub(spec.started_ms);
        if self.ceiling.is_some_and(|at| elapsed >= at.told_ms) {
            return Some(Stopped::Ceiling);
        }
        (elapsed >= self.day.told_ms).then_some(Stopped::Day)
    }

    /// Its memory past (polled, where no cgroup holds it), the disk under its log full, its
    /// run directory gone, its places past its disk (measured, where it has no filesystem of
    /// its own).
    fn resources(
        &mut self,
        run_dir: &Path,
        spec: &RunSpec,
        room: &Room,
        run: &Launched,
    ) -> Option<Stopped> {
        if self.last_poll.elapsed() >= Duration::from_millis(50) {
            self.last_poll = Instant::now();
            if room.cgroups.memory.is_none() && tree_rss(run.child.id()) > spec.memory_bytes {
                return Some(Stopped::Memory);
            }
            // A full disk: the run's output is being lost, so it is stopped and says why.
            if sys::disk_full(&room.log_path) {
                return Some(Stopped::DiskFull);
            }
            // Its run directory gone (its state directory removed) or another in its place:
            // nothing of the run can be written any more, so it is ended at once.
            if !same_dir(run_dir, room.own_dir) {
                return Some(Stopped::Gone);
            }
        }
        if let Some(bytes) = self.measured
            && self.last_measured.elapsed() >= DISK_MEASURED_EVERY
        {
            self.last_measured = Instant::now();
            if scratch::used(&room.places) > bytes {
                return Some(Stopped::DiskLimit(bytes));
            }
        }
        None
    }
}
