//! What a Slurm run keeps in its run directory beside the supervisor's files: the job's file,
//! the secrets for its nodes, each node's heartbeat and end, when the job started and what
//! Slurm last said of it. Read by the executor and by each node's side.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use div_runtime::supervisor::RunSpec;

/// The run's secrets for its nodes' supervisors (mode 0600), until its end is gathered.
pub(crate) const SECRETS_FILE: &str = "secrets.json";

/// What the run directory keeps about its job: `RUN_DIR/slurm.json`. Its presence also tells
/// the supervisor program, run on `RUN_DIR`, to gather the nodes' ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobFile {
    pub(crate) nodes: u32,
    pub(crate) job: Option<u32>,
}

/// A node's heartbeat file, in its directory.
pub(crate) const HEARTBEAT_FILE: &str = "alive";
/// When the job started running (ms since the epoch), written by the batch script.
pub(crate) const STARTED_FILE: &str = "started";
/// What Slurm last said of an ended job, kept in the run directory for its end.
pub(crate) const JOB_STATE_FILE: &str = "slurm.state";

/// Whether every node of the run wrote its end (`nodes/K/end.json`).
pub(crate) fn all_nodes_ended(run_dir: &Path) -> bool {
    fs::read(run_dir.join("slurm.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<JobFile>(&b).ok())
        .is_some_and(|job| {
            job.nodes > 0
                && (0..job.nodes).all(|k| {
                    run_dir
                        .join("nodes")
                        .join(k.to_string())
                        .join("end.json")
                        .exists()
                })
        })
}

/// Whether the job's batch script has run: rank 0 wrote its `node.env`, or srun's exit
/// is recorded.
pub(crate) fn node_started(run_dir: &Path) -> bool {
    run_dir.join("slurm.exit").exists() || run_dir.join("nodes").join("0").join("node.env").exists()
}

/// When the run's job started running, as its batch script wrote it.
pub(crate) fn started_ms(run_dir: &Path) -> Option<u64> {
    fs::read_to_string(run_dir.join(STARTED_FILE))
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// The supervisor's spec the launcher wrote in `run_dir`.
pub(crate) fn spec_of(run_dir: &Path) -> Option<RunSpec> {
    fs::read(run_dir.join("spec.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// The job id `RUN_DIR/slurm.json` names, once `sbatch` answered with one.
pub(crate) fn recorded_job(run_dir: &Path) -> Option<u32> {
    fs::read(run_dir.join("slurm.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<JobFile>(&b).ok())
        .and_then(|j| j.job)
}
