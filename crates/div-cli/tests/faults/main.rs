//! The fault suite: stops and faults performed for real against the real `div` and its local
//! control plane, here and on the loopback Slurm cluster (`.ci/slurm-up`), each test waiting
//! for states, never for times. `.ci/run` runs it on its own (`cargo test -p div-cli --test
//! faults`) once the cluster is up; the Slurm tests skip, loudly, where no cluster answers.
//! docs/reliability.md names the test behind each fault it lists.

#![allow(clippy::disallowed_methods)] // tests pass PATH and SLURM_CONF on to the div they start

mod local;
mod resources;
mod shapes;
mod slurm;
mod stops;
mod world;
