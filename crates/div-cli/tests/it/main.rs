//! `div` itself, run as a process: against a wiremock control plane, and end to end against
//! the local control plane.

#![allow(clippy::disallowed_methods)] // tests pass PATH on to the div they start

mod attached;
mod cli_reference;
mod commands;
mod crash;
mod dashboard;
mod eval;
mod hostile_client;
mod https;
mod image;
mod json_nulls;
mod local;
mod pipes;
mod run;
mod server_loop;
mod slurm;
mod support;
mod team;
mod terminal;
mod user_loop;
