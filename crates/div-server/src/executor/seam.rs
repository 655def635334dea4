//! The seam itself: [`Executor`], what it is handed ([`Launch`], [`Placement`]), what it
//! gives back ([`Handle`], [`Liveness`]) and how it refuses ([`Unplaceable`], [`StartError`]).
//! The store keeps a run's [`Handle`]; nothing here knows an executor.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What the launcher hands an executor: a run directory already holding the supervisor's
/// `spec.json`, with no `end.json` and no `stop`.
#[derive(Debug)]
pub(crate) struct Launch<'a> {
    pub(crate) run_dir: &'a Path,
    /// The run as placed: its SKU, size, price and ceiling (an executor that asks another
    /// scheduler for room needs them).
    pub(crate) run: &'a div_api::Run,
    /// The run's secrets, in order, for the supervisor (never in `spec.json`): given to it
    /// the executor's way, through a pipe where it can be.
    pub(crate) secrets: &'a [(String, String)],
    /// Woken when the supervisor exits, where the executor can tell (the scheduler then
    /// gathers the run's end at once rather than at its next tick).
    pub(crate) exited: &'a Arc<tokio::sync::Notify>,
    /// The member who placed it (`owner` for the server's own user).
    pub(crate) member: &'a str,
    /// The account that member is charged to on a cluster with accounts (Slurm's
    /// `--account`), where one is set (docs/team.md).
    pub(crate) account: Option<&'a str>,
}

/// What a run asks for, as validated: what an executor checks before the run is created.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement<'a> {
    pub(crate) sku: &'a str,
    pub(crate) gpus: u32,
    pub(crate) cores: u32,
    pub(crate) memory_gib: u32,
}

/// Where a started run's supervisor is, as its executor recorded it; kept in the run's
/// record (as `pid`, the field older state directories have). A third executor adds its arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Handle {
    /// The local supervisor's process id: a bare number, as every state directory has it.
    Process(u32),
    /// The run's Slurm job.
    SlurmJob {
        /// Its id.
        slurm_job: u32,
    },
}

impl Handle {
    /// The local supervisor's pid; `None` for another executor's handle.
    pub(crate) fn process(&self) -> Option<u32> {
        match self {
            Handle::Process(pid) => Some(*pid),
            Handle::SlurmJob { .. } => None,
        }
    }

    /// The Slurm job's id. A bare number is one too where a server of before handles had
    /// kinds wrote it for a Slurm run.
    pub(crate) fn slurm_job(&self) -> u32 {
        match self {
            Handle::SlurmJob { slurm_job } => *slurm_job,
            Handle::Process(job) => *job,
        }
    }
}

/// Whether a run's supervisor is still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// It runs: its end is still to come.
    Alive,
    /// It is gone: either it wrote `end.json`, or it was lost.
    Gone,
}

/// Why an executor can never place a run as it is sized ([`Executor::check`], and
/// [`Executor::start`] for one that got past the check): a refusal for the person who asked,
/// saying what was asked and what would be placed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unplaceable(pub(crate) String);

/// Why an executor could not start a run's supervisor ([`Executor::start`]). Nothing of the
/// run was started; the launcher puts it back in the queue.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The run is one this executor can never place.
    #[error(transparent)]
    Unplaceable(#[from] Unplaceable),
    /// The supervisor's program could not be started.
    #[error("the supervisor `{program}` could not start: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// A file the run's start needs could not be read or written.
    #[error("{file}: {source}")]
    File {
        file: String,
        source: std::io::Error,
    },
    /// The run's places on the nodes could not be made ready.
    #[error("{0}")]
    Nodes(String),
    /// The scheduler it submits to (`sbatch`) refused the job or answered otherwise.
    #[error("{0}")]
    Submit(String),
}

/// Where runs run. See the module's invariant.
pub(crate) trait Executor: std::fmt::Debug + Send + Sync {
    /// Starts the supervisor of the run prepared in `launch.run_dir`.
    fn start(&self, launch: &Launch<'_>) -> Result<Handle, StartError>;
    /// Asks the run's supervisor to stop the run. It ends the run itself (with its grace
    /// for the command, then a kill of its whole tree) and writes its end as usual.
    fn stop(&self, run_dir: &Path, handle: Option<&Handle>) -> std::io::Result<()>;
    /// Whether the run's supervisor is still there.
    fn liveness(&self, run_dir: &Path, handle: Option<&Handle>) -> Liveness;
    /// Kills and removes whatever a lost run (its supervisor gone without an end) left where
    /// it ran, so no orphan survives it.
    fn reclaim(&self, run_id: &str);
    /// One line for people: where this executor runs runs.
    fn describe(&self) -> String;
    /// Refuses, before anything is created, a run this executor can never place (the local
    /// executor has nothing to add to the server's own checks).
    fn check(&self, _placement: &Placement<'_>) -> Result<(), Unplaceable> {
        Ok(())
    }
    /// Whether a run started here first waits in another scheduler's queue (Slurm's): it is
    /// then shown queued, and billed nothing, until [`Executor::started_ms`] says it runs.
    fn queues(&self) -> bool {
        false
    }
    /// When a run that [`queues`](Executor::queues) started running; `None` while it waits.
    fn started_ms(&self, _run_dir: &Path) -> Option<u64> {
        None
    }
    /// Why a started run still waits, in its executor's own words.
    fn waiting(&self, _run_dir: &Path, _handle: Option<&Handle>) -> Option<String> {
        None
    }
    /// Whether the control plane decides when this executor's runs reach their ceiling and
    /// time limit, once for the whole run (`div_runtime::decision`), rather than each supervisor
    /// for its own part: a run on several nodes.
    fn decides_limits(&self) -> bool {
        false
    }
    /// A part of a running run that stopped reporting, said as the run's reason; `None`
    /// while every part is well.
    fn lost(&self, _run_dir: &Path) -> Option<String> {
        None
    }
}
