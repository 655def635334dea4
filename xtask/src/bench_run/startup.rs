//! `startup`: `div --version` and `div run --help` against `git --version`.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use super::args::Args;
use crate::bench_local::quiet;
use crate::timing::{median, ms, ratio, verdict};

pub(crate) fn startup(div: &Path, args: &Args) -> Result<()> {
    let runs = args.runs.max(21);
    let (git, _) = median(runs, || quiet(Command::new("git").arg("--version")))?;
    let (version, _) = median(runs, || quiet(Command::new(div).arg("--version")))?;
    let (help, _) = median(runs, || quiet(Command::new(div).args(["run", "--help"])))?;
    println!("startup (median of {runs}):");
    println!("  git --version      {:8.2} ms", ms(git));
    for (what, t) in [("div --version", version), ("div run --help", help)] {
        let r = ratio(t, git);
        println!(
            "  {what:<18} {:8.2} ms  {r:5.2}× git  (goal ≤ 2×: {})",
            ms(t),
            verdict(r <= 2.0)
        );
    }
    Ok(())
}
