//! `cargo xtask bench image [--rounds N] [--div PATH]`: the image benchmarks of issues 16
//! and 30 (docs/performance.md, Images), against Debian's `docker-registry` on loopback.
//!
//! - **The image** is built here from Debian's packages, as ML images are built: three
//!   layers, each the packages `apt-get` would install for it that the layers below lack
//!   ([`LAYERS`]: a base system, Python with numpy and pip, then pandas, sympy and gcc),
//!   fetched with `apt-get --download-only` into `target/bench-image/debs/` (kept between
//!   runs), unpacked with `dpkg -x`, each a gzip layer made with GNU `tar` and `gzip -n`. It
//!   unpacks to about 450 MB in about 11,000 files (Debian 12). A second image shares its
//!   base and Python layers and adds a small layer of its own ([`SECOND_TOP`]).
//! - **Cold pull and unpack**: each round times div-image's `ImageStore::ensure` into an
//!   empty cache against `skopeo copy docker://… oci:…` followed by `umoci raw unpack
//!   --rootless` into an empty directory, and against `tar -xzf` of the same layer blobs, one
//!   after the other, into an empty directory (no download, no checks: the floor of a
//!   sequential unpack). Goal: ≤ 0.6× skopeo + umoci.
//! - **A second image on the same base**: after each cold pull, the second image is pulled
//!   into the same cache; the bytes it added (the cache's blocks, each inode once, as `du`
//!   counts them) and its time are printed beside what its tree alone holds.
//! - **A run in a cached image**: `div run --gpu cpu --image X -- true` (X a busybox-static
//!   image, pulled once before the rounds) against `div run --gpu cpu -- true` on this
//!   machine's own system, on one warm local control plane. Goal: ≤ 1.2×.
//!
//! Rounds are interleaved (one of each, in turn, the order reversed every other round, each
//! after a `sync`); each part prints every round, the medians,
//! the median of the per-round ratios and the machine's load. It needs `docker-registry`,
//! `skopeo`, `umoci`, a static `busybox` and `apt-get` with Debian's package lists
//! (`apt-get update; apt-get install -y docker-registry skopeo umoci busybox-static`), and is
//! never part of `cargo test`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use div_image::{Credentials, ImageRef, ImageStore, NoProgress, Platform, StoreOptions};

use crate::timing::{percentile, verdict};

mod build;

use build::{Images, Registry, Tools, build_and_push, debian_layers, disk, quiet};

pub(crate) fn run(rest: &[String]) -> Result<()> {
    // div-image is timed in this process: a debug build of it would be measured, not the
    // release build the server runs. `cargo xtask` builds debug, so it runs itself again in
    // release.
    if cfg!(debug_assertions) {
        return crate::run(
            crate::cargo()
                .args([
                    "run",
                    "--release",
                    "--quiet",
                    "-p",
                    "xtask",
                    "--",
                    "bench",
                    "image",
                ])
                .args(rest),
        );
    }
    let mut rounds: usize = 5;
    let mut div: Option<PathBuf> = None;
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{arg}` needs a value"));
        match arg.as_str() {
            "--rounds" => rounds = value()?.parse().context("--rounds is a count")?,
            "--div" => div = Some(PathBuf::from(value()?)),
            other => bail!("unknown argument `{other}`; expected --rounds N or --div PATH"),
        }
    }
    ensure!(rounds > 0, "--rounds must be at least 1");
    let tools = Tools::find()?;
    let div = crate::bench_local::div_binary(div.as_deref())?;
    eprintln!("div: {}", div.display());
    let tmp = tempfile::tempdir().context("creating a temporary folder")?;
    let trees = debian_layers(&bench_dir().join("debs"), tmp.path())?;
    let registry = Registry::start(&tools.registry, tmp.path())?;
    let images = build_and_push(&tools, &registry.addr, tmp.path(), &trees)?;
    cold_pull(&tools, &images, tmp.path(), rounds)?;
    cached_run(&div, &images.busybox, tmp.path(), rounds)?;
    Ok(())
}

/// `target/bench-image` (or under `CARGO_TARGET_DIR`): what the benchmark keeps between runs.
fn bench_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
            PathBuf::from,
        )
        .join("bench-image")
}

/// Medians of both, the median of the per-round ratios, and the goal line.
fn summary(what: &str, ours: &mut [Duration], theirs: &mut [Duration], goal: f64) {
    let mut ratios: Vec<f64> = ours
        .iter()
        .zip(theirs.iter())
        .map(|(o, t)| o.as_secs_f64() / t.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median_ratio = ratios[ratios.len() / 2];
    let (o, t) = (percentile(ours, 50), percentile(theirs, 50));
    println!(
        "{what}: medians {:.3} s against {:.3} s; median of the per-round ratios {median_ratio:.2}× (goal ≤ {goal:.1}×: {}); load average {}",
        o.as_secs_f64(),
        t.as_secs_f64(),
        verdict(median_ratio <= goal),
        fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// One cold pull by div-image into an empty cache under `tmp`, then the second image into
/// the same cache: the first's time, the second's time, the bytes the second added to the
/// cache (blocks, each inode once), and what the second's tree holds.
fn div_image_round(
    rt: &tokio::runtime::Runtime,
    images: &Images,
    tmp: &Path,
    keep: &mut Vec<tempfile::TempDir>,
) -> Result<(Duration, Duration, u64, u64)> {
    let platform = Platform::host();
    let reference = |image: &str| -> Result<ImageRef> {
        image
            .parse()
            .map_err(|e| anyhow!("`{image}` is not a reference: {e}"))
    };
    let (first, second) = (reference(&images.first)?, reference(&images.second)?);
    let cache = tempfile::tempdir_in(tmp)?;
    let t = Instant::now();
    let store = ImageStore::open_with(cache.path(), StoreOptions::default())
        .context("opening the image cache")?;
    rt.block_on(store.ensure(&first, &platform, &Credentials::none(), &NoProgress))
        .with_context(|| format!("div-image could not pull {first}"))?;
    let cold = t.elapsed();
    let before = disk(&[cache.path().to_path_buf()]);
    let t = Instant::now();
    let image = rt
        .block_on(store.ensure(&second, &platform, &Credentials::none(), &NoProgress))
        .with_context(|| format!("div-image could not pull {second}"))?;
    let on_base = t.elapsed();
    let added = disk(&[cache.path().to_path_buf()]).saturating_sub(before);
    let alone = disk(&[image.rootfs]);
    keep.push(cache);
    Ok((cold, on_base, added, alone))
}

/// `skopeo copy` then `umoci raw unpack --rootless` of `image` into an empty folder: the
/// copy's time and the whole.
fn skopeo_umoci(
    tools: &Tools,
    image: &str,
    tmp: &Path,
    keep: &mut Vec<tempfile::TempDir>,
) -> Result<(Duration, Duration)> {
    let dir = tempfile::tempdir_in(tmp)?;
    let oci = dir.path().join("oci");
    let t = Instant::now();
    quiet(
        Command::new(&tools.skopeo)
            .args(["copy", "-q", "--src-tls-verify=false"])
            .arg(format!("docker://{image}"))
            .arg(format!("oci:{}:1", oci.display())),
    )?;
    let copied = t.elapsed();
    quiet(
        Command::new(&tools.umoci)
            .args(["raw", "unpack", "--rootless", "--image"])
            .arg(format!("{}:1", oci.display()))
            .arg(dir.path().join("rootfs")),
    )?;
    let whole = t.elapsed();
    keep.push(dir);
    Ok((copied, whole))
}

/// `tar -xzf` of each blob, in order, into one empty folder.
fn tar_xzf(blobs: &[PathBuf], tmp: &Path, keep: &mut Vec<tempfile::TempDir>) -> Result<Duration> {
    let dir = tempfile::tempdir_in(tmp)?;
    let t = Instant::now();
    for blob in blobs {
        quiet(
            Command::new("tar")
                .arg("-xzf")
                .arg(blob)
                .arg("-C")
                .arg(dir.path()),
        )?;
    }
    let took = t.elapsed();
    keep.push(dir);
    Ok(took)
}

/// `sync`: the page cache written back, so that a timing does not pay for the writes of
/// the one before it (each writes the image's 450 MB).
fn settle() -> Result<()> {
    quiet(&mut Command::new("sync"))
}

fn mib(n: u64) -> f64 {
    n as f64 / 1_048_576.0
}

/// div-image's cold `ensure` against `skopeo copy` + `umoci raw unpack` and against `tar
/// -xzf` of the same layers, interleaved; and the second image on the same base.
fn cold_pull(tools: &Tools, images: &Images, tmp: &Path, rounds: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    let (mut ours, mut theirs, mut tars) = (Vec::new(), Vec::new(), Vec::new());
    let (mut second, mut added, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    let mut keep = Vec::new();
    for round in 1..=rounds {
        // Each starts with nothing left to write back from the one before; every other
        // round the order is reversed, so that neither side always follows the other.
        // The trees each part made are removed only at the end: removing gigabytes on a
        // filesystem mounted with `discard` was seen slowing the parts that followed 5×.
        let ours_first = round % 2 == 1;
        let theirs_part = |keep: &mut Vec<tempfile::TempDir>| -> Result<_> {
            settle()?;
            let (copied, s) = skopeo_umoci(tools, &images.first, tmp, keep)?;
            settle()?;
            Ok((copied, s, tar_xzf(&images.blobs, tmp, keep)?))
        };
        let before = if ours_first {
            None
        } else {
            Some(theirs_part(&mut keep)?)
        };
        settle()?;
        let (o, on_base, add, own) = div_image_round(&rt, images, tmp, &mut keep)?;
        let (copied, s, x) = match before {
            Some(done) => done,
            None => theirs_part(&mut keep)?,
        };
        println!(
            "round {round}: div-image {:.3} s; skopeo copy {:.3} s + umoci raw unpack {:.3} s = {:.3} s; ratio {:.2}; tar -xzf of the layers {:.3} s (div-image {:.2}× it); second image on the base {:.3} s, +{:.1} MiB on disk (its tree {:.0} MiB)",
            o.as_secs_f64(),
            copied.as_secs_f64(),
            (s - copied).as_secs_f64(),
            s.as_secs_f64(),
            o.as_secs_f64() / s.as_secs_f64(),
            x.as_secs_f64(),
            o.as_secs_f64() / x.as_secs_f64(),
            on_base.as_secs_f64(),
            mib(add),
            mib(own),
        );
        ours.push(o);
        theirs.push(s);
        tars.push(x);
        second.push(on_base);
        added.push(add);
        alone.push(own);
    }
    summary(
        "cold pull + unpack, div-image against skopeo copy + umoci raw unpack",
        &mut ours.clone(),
        &mut theirs,
        0.6,
    );
    let mut tar_ratios: Vec<f64> = ours
        .iter()
        .zip(&tars)
        .map(|(o, x)| o.as_secs_f64() / x.as_secs_f64())
        .collect();
    tar_ratios.sort_by(f64::total_cmp);
    println!(
        "cold pull + unpack, div-image against tar -xzf of the same layers in sequence (no download, no checks): medians {:.3} s against {:.3} s; median of the per-round ratios {:.2}×",
        percentile(&mut ours, 50).as_secs_f64(),
        percentile(&mut tars, 50).as_secs_f64(),
        tar_ratios[tar_ratios.len() / 2]
    );
    added.sort_unstable();
    alone.sort_unstable();
    println!(
        "a second image on the same base: +{:.1} MiB on disk (median), its tree {:.0} MiB; pulled in {:.3} s (median)",
        mib(added[added.len() / 2]),
        mib(alone[alone.len() / 2]),
        percentile(&mut second, 50).as_secs_f64()
    );
    Ok(())
}

/// `div run --image X -- true` with X cached against `div run -- true`, interleaved, on one
/// warm local control plane in a temp state directory (stopped at the end).
fn cached_run(div: &Path, busybox: &str, tmp: &Path, rounds: usize) -> Result<()> {
    let home = tmp.join("div-home");
    let project = tmp.join("project");
    fs::create_dir_all(&project)?;
    fs::write(project.join("README"), "x\n")?;
    let command = |args: &[&str]| -> Command {
        let mut c = Command::new(div);
        c.args(args)
            .current_dir(&project)
            .env("DIVERGENT_HOME", &home)
            .env("HOME", tmp)
            .env("NO_COLOR", "1")
            .env_remove("DIVERGENT_API_URL")
            .env_remove("DIVERGENT_TOKEN")
            .env_remove("DIVERGENT_EMULATE_GPUS")
            .env_remove("DIVERGENT_DEFAULT_IMAGE");
        c
    };
    let div_cmd = |args: &[&str]| -> Result<Duration> {
        let t = Instant::now();
        quiet(&mut command(args))?;
        Ok(t.elapsed())
    };
    /// Its runs, then the server, stopped however the benchmark ends.
    struct Stop<'a>(&'a dyn Fn(&[&str]) -> Command);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            crate::bench_local::stop_runs(self.0);
            let _ = (self.0)(&["server", "stop"]).output();
        }
    }
    div_cmd(&["server", "start"])?;
    let _stop = Stop(&command);
    let in_image = ["run", "--gpu", "cpu", "--image", busybox, "--", "true"];
    let on_host = ["run", "--gpu", "cpu", "--", "true"];
    // The pull, the first shipment and the first launch out of the way.
    div_cmd(&in_image)?;
    div_cmd(&on_host)?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let i = div_cmd(&in_image)?;
        let h = div_cmd(&on_host)?;
        println!(
            "round {round}: div run --image (cached) {:.3} s, div run on the host {:.3} s; ratio {:.2}",
            i.as_secs_f64(),
            h.as_secs_f64(),
            i.as_secs_f64() / h.as_secs_f64()
        );
        ours.push(i);
        theirs.push(h);
    }
    summary(
        "div run --image X -- true (X cached) against div run -- true",
        &mut ours,
        &mut theirs,
        1.2,
    );
    Ok(())
}
