//! What happens next to a run, on whichever machine it lands: the local control plane's
//! machine or a Slurm node. Its input is a run's spec (`run-dir/spec.json`, [`supervisor::RunSpec`]),
//! its output the run's end record ([`supervisor::EndRecord`], `run-dir/end.json`) and files
//! beside it (the log, the kept result and telemetry). It knows no HTTP and no database.
//!
//! - [`supervisor`]: the per-run supervisor process, `div __supervise <run-dir>`: prepares the
//!   run's root and mounts, starts it under [`init`] in its cgroups and sandbox, meters and
//!   enforces its limits, collects what it left, writes its end;
//! - [`sandbox`]: bubblewrap's command line ([`image_tree`]: paths looked up in an image's tree;
//!   [`gpu`]: a GPU run's devices and driver); [`cgroup`]: memory, cores, tasks; [`scratch`]: the
//!   run's own disk; [`workspace`]: its `/workspace` overlay; [`init`]: div-init, its first
//!   process;
//! - [`decision`]: how a run is told to end, and the one decision of a run of several nodes;
//! - [`rules`]: its charge, checks and limits; [`sys`], [`clock`], [`disk`]: the system below.
//!
//! ```no_run
//! // The body of `div __supervise <run-dir>`: exits with what it returns.
//! let code = div_runtime::supervisor::supervise(std::path::Path::new("/state/runs/r_1"));
//! std::process::exit(code);
//! ```

pub mod cgroup;
pub mod clock;
pub mod decision;
pub mod disk;
pub mod gpu;
pub mod image_tree;
pub mod init;
pub mod phases;
pub mod rules;
pub mod sandbox;
pub mod scratch;
pub mod supervisor;
pub mod sys;
pub mod waiting;
pub mod workspace;
