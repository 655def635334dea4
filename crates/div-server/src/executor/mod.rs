//! The executor: the seam between the server and where runs run.
//!
//! The invariant: **an executor decides only where a run runs.** The server decides what
//! runs and when (validation, the queue, GPUs and cores); the supervisor next to the run
//! (`div __supervise <run-dir>`) runs it and writes the truth on disk: `end.json` with its
//! status, spend and verdicts, the log, the kept result and telemetry. An executor starts
//! that supervisor somewhere, asks it to stop, and says whether it is still there; it never
//! writes a run's status, and the server never reads a run's end from anywhere but its run
//! directory.
//!
//! There are two: `local::LocalExecutor`, a supervisor process on this machine, and
//! `slurm::SlurmExecutor`, one Slurm job a run with a supervisor on each node, whose runs'
//! ends the control plane decides once for the whole run (`div_runtime::decision`).

//!
//! Its modules: `seam` (the trait and what crosses it), `local`, `slurm` (each an executor,
//! using only `seam`), and `choice` (which one a server uses, from its settings). A third
//! executor is a folder beside `local` and `slurm`, an arm of `Choice` and, where its handle
//! is neither a pid nor a job id, an arm of `Handle`.

mod choice;
pub(crate) mod local;
mod seam;
pub(crate) mod slurm;

pub(crate) use choice::Choice;
pub(crate) use seam::{Executor, Handle, Launch, Liveness, Placement, StartError, Unplaceable};
