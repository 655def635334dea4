//! The benchmarks of the `div` binary against what a user would otherwise run, each on a
//! local control plane in a temp `DIVERGENT_HOME` that it stops at the end:
//!
//! - `logs`: a run writing N MiB to stdout with `div run` into a pipe vs `cat` of the same
//!   bytes; the time from a line written to the line printed (p50/p99);
//! - `startup` (also by its old name, `overhead`): `div --version` vs `git --version`, a warm
//!   `div run --gpu cpu -- true` vs a bare `bwrap … sh -lc true` with the same binds, the same
//!   run in an unchanged big repository vs in a one-file one, each taken in turns; and where
//!   the warm run's time goes, the client's steps and the server's marks on one timeline;
//! - `store`: `div runs` with N runs stored (inserted straight into the server's SQLite with
//!   the `sqlite3` command), and N runs placed at once on emulated GPUs;
//! - `disk`: bytes on disk after N runs of a project with one file that changes each run (the
//!   code volume and its blobs, each inode once, as `du` counts), against the project's own
//!   bytes and against a copy of it per run.
//!
//! Flags: `--div PATH` (default: build `div` in release), `--runs N` (default 21 pairs for
//! `startup`, 15 for the others), `--log-mib N` (default 256; the figure is
//! `--log-mib 1024`), `--stored N` (default 100000), `--burst N` (default 200),
//! `--tree-files N` (`startup`'s big repository, default 40000).

mod args;
mod disk;
mod logs;
mod overhead;
mod startup;
mod store;
mod timeline;

use anyhow::{Result, bail};

use self::args::parse;
use crate::bench_local::div_binary;

pub(crate) fn run(name: &str, rest: &[String]) -> Result<()> {
    let args = parse(rest)?;
    let div = div_binary(args.div.as_deref())?;
    eprintln!("div: {}", div.display());
    match name {
        "logs" => logs::logs(&div, &args),
        "startup" | "overhead" => startup::startup(&div, &args),
        "store" => store::store(&div, &args),
        "disk" => disk::disk(&div, &args),
        "all" => {
            startup::startup(&div, &args)?;
            logs::logs(&div, &args)?;
            store::store(&div, &args)?;
            disk::disk(&div, &args)
        }
        other => bail!("unknown benchmark `{other}`"),
    }
}
