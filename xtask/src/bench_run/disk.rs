//! `disk`: bytes on disk after N runs of a project with one file that changes each run,
//! against the project's own bytes and against a copy of it per run.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::args::Args;
use crate::bench_local::{Local, du};

/// `runs` runs of a 20 MiB project (1,000 files of 4 KiB and a 16 MiB `weights.bin`) whose
/// `train.py` changes before each: what its code volume and blobs take on disk afterwards,
/// with the server's retention (`keep_code_snapshots`, 10 by default).
pub(crate) fn disk(div: &Path, args: &Args) -> Result<()> {
    let runs = args.runs(15);
    let local = Local::start(div, "")?;
    let data = local.project.join("data");
    fs::create_dir_all(&data)?;
    for i in 0..1000u32 {
        let mut bytes = vec![0u8; 4096];
        bytes[..4].copy_from_slice(&i.to_le_bytes());
        fs::write(data.join(format!("{i:04}.bin")), bytes)?;
    }
    fs::write(local.project.join("weights.bin"), vec![7u8; 16 << 20])?;
    let project_bytes = du(&[&local.project])?;
    let volume = local.home.join("volumes/bench-code");
    let blobs = local.home.join("blobs/bench-code");
    let started = Instant::now();
    for i in 0..runs {
        fs::write(
            local.project.join("train.py"),
            format!("print('run {i}')\n"),
        )?;
        local.ok(&["run", "--gpu", "cpu", "--", "true"])?;
    }
    let took = started.elapsed();
    // The last commit's retention pass runs after its answer: wait until the count settles.
    let snapshots = || fs::read_dir(volume.join("code")).map_or(0, |d| d.count());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = (snapshots(), du(&[&volume, &blobs])?);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = (snapshots(), du(&[&volume, &blobs])?);
        if now == last || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let (kept, on_disk) = last;
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    println!(
        "disk ({} runs of a {:.1} MiB project, train.py changed before each, in {:.1?}):",
        runs,
        mib(project_bytes),
        took
    );
    println!(
        "  code volume and blobs   {:8.1} MiB  ({:.2}× the project; {} snapshots kept)",
        mib(on_disk),
        on_disk as f64 / project_bytes as f64,
        kept
    );
    println!(
        "  a copy per run          {:8.1} MiB  ({} × the project)",
        mib(project_bytes * runs as u64),
        runs
    );
    Ok(())
}
