//! The benchmarks of the `div` binary against what a user would otherwise run, each on a
//! local control plane in a temp `DIVERGENT_HOME` that it stops at the end:
//!
//! - `overhead`: `div run --gpu cpu -- true` on a warm server vs a bare `bwrap … true` with
//!   the same binds, and the phases of a run as seen from outside;
//! - `logs`: a run writing N MiB to stdout with `div run` into a pipe vs `cat` of the same
//!   bytes; the time from a line written to the line printed (p50/p99);
//! - `startup`: `div --version` and `div run --help` vs `git --version`;
//! - `store`: `div runs` with N runs stored (inserted straight into the server's SQLite with
//!   the `sqlite3` command), and N runs placed at once on emulated GPUs;
//! - `disk`: bytes on disk after N runs of a project with one file that changes each run (the
//!   code volume and its blobs, each inode once, as `du` counts), against the project's own
//!   bytes and against a copy of it per run.
//!
//! Flags: `--div PATH` (default: build `div` in release), `--runs N`, `--log-mib N`
//! (default 256; the figure is `--log-mib 1024`), `--stored N` (default 100000),
//! `--burst N` (default 200).

mod args;
mod disk;
mod logs;
mod overhead;
mod startup;
mod store;

use anyhow::{Result, bail};

use self::args::parse;
use crate::bench_local::div_binary;

pub(crate) fn run(name: &str, rest: &[String]) -> Result<()> {
    let args = parse(rest)?;
    let div = div_binary(args.div.as_deref())?;
    eprintln!("div: {}", div.display());
    match name {
        "overhead" => overhead::overhead(&div, &args),
        "logs" => logs::logs(&div, &args),
        "startup" => startup::startup(&div, &args),
        "store" => store::store(&div, &args),
        "disk" => disk::disk(&div, &args),
        "all" => {
            startup::startup(&div, &args)?;
            overhead::overhead(&div, &args)?;
            logs::logs(&div, &args)?;
            store::store(&div, &args)?;
            disk::disk(&div, &args)
        }
        other => bail!("unknown benchmark `{other}`"),
    }
}
