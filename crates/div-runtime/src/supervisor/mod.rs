//! The per-run supervisor: a small process, in its own session, that owns one run.
//!
//! The server writes `run-dir/spec.json` and launches it; it runs the command, appends its
//! output to `run-dir/log`, holds it to its memory, cores, tasks, disk, ceiling and 24 hours,
//! judges the checks once it exits and writes `run-dir/end.json` last, atomically. Nothing it
//! does depends on the server still running.
//!
//! One run's life, in phases, each a module: [`prepare`] (its log, cores, cgroups and mounts),
//! [`launch`] (bubblewrap under div-init, in its cgroups), [`watch`] (until something ends it),
//! [`stop`] (SIGTERM, its grace, SIGKILL), [`end`] (its outcome, what it left, its places let
//! go). What it is given and leaves is in [`spec`], its lock in [`lock`], its process tree in
//! `tree`, and reading back what the run left without trusting it in `untrusted`.

//!
//! Its modules, lowest first; each uses only those before it: `spec`, `lock`, `tree`,
//! `untrusted`, `prepare`, `launch`, `watch`, `stop`, `end`, and `life`, which takes a run
//! through the phases (`supervise`).

mod end;
mod launch;
mod life;
mod lock;
mod prepare;
mod spec;
mod stop;
mod tree;
mod untrusted;
mod watch;

pub use life::{read_secrets, supervise};
pub use lock::{ABANDONED_FILE, LOCK_FILE, UNSENT_FILE, claim};
pub use spec::{
    DAY_REASON, DISK_FULL_REASON, EndRecord, HEARTBEAT, KeptResult, KeptTelemetry, NodeDuties,
    OOM_REASON, ORG_STOP_FILE, RESULT_MAX_BYTES, RunSpec, STOP_FILE, TELEMETRY_MAX_BYTES,
    write_json_atomic,
};
pub use untrusted::read_telemetry;

#[cfg(test)]
mod tests;
