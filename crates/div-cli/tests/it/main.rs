//! `div` itself, run as a process: against a wiremock control plane, and end to end against
//! the local control plane.

mod cli_reference;
mod local;
mod run;
mod support;
