//! div-server's integration tests: a real server in-process, real supervisors
//! (`div-supervise`), real sandboxes.

mod api;
mod conformance;
mod diskfull;
mod env_bounds;
mod escape;
mod example;
mod faults;
mod graceful;
mod harness;
mod hostile;
mod hostile_env;
mod hostile_files;
mod image;
mod limits;
mod names;
mod races;
mod retention;
mod runs;
mod slurm;
mod stages;
mod state;
mod unprivileged;
mod workspace;
