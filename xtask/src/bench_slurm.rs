//! `cargo xtask bench slurm [--rounds N] [--div PATH]`: placement overhead on Slurm
//! (docs/slurm.md). `div run --gpu h100 -- true` through a warm local control plane with the
//! Slurm executor (ship, place, `sbatch`, `squeue`, the supervisor on the node, the end
//! gathered and streamed back) against `sbatch --wait --wrap true`, in interleaved rounds, on
//! the cluster `.ci/slurm-up` brought up (`SLURM_CONF`, default `/tmp/div-slurm/slurm.conf`).
//! Prints each round, the medians, their ratio (goal ≤ 1.0×) and the machine's load.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::timing::{percentile, ratio, verdict};

pub(crate) fn run(rest: &[String]) -> Result<()> {
    let mut rounds: usize = 5;
    let mut div: Option<PathBuf> = None;
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--rounds" => rounds = value()?.parse().context("--rounds is a count")?,
            "--div" => div = Some(PathBuf::from(value()?)),
            other => bail!("unknown flag `{other}`; expected --rounds or --div"),
        }
    }
    ensure!(rounds > 0, "--rounds must be at least 1");
    let conf = std::env::var_os("SLURM_CONF")
        .map_or_else(|| PathBuf::from("/tmp/div-slurm/slurm.conf"), PathBuf::from);
    let sinfo = Command::new("timeout")
        .args(["10", "sinfo", "-h"])
        .env("SLURM_CONF", &conf)
        .output()
        .context("running sinfo")?;
    ensure!(
        sinfo.status.success() && !sinfo.stdout.is_empty(),
        "no Slurm cluster answers (`sinfo -h` with SLURM_CONF={}); `.ci/slurm-up` brings one up (as root)",
        conf.display()
    );
    let div = crate::bench_local::div_binary(div.as_deref())?;
    eprintln!("div: {}", div.display());
    let tmp = tempfile::tempdir().context("creating a temporary folder")?;
    let c = OnSlurm::new(&div, tmp.path(), &conf)?;
    c.div(&["server", "start"])?;
    // Warm: the first shipment.
    c.div(&["run", "--gpu", "h100", "--", "true"])?;
    let (mut d, mut s) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let t0 = Instant::now();
        c.div(&["run", "--gpu", "h100", "--", "true"])?;
        let t1 = Instant::now();
        let mut sbatch = Command::new("sbatch");
        sbatch
            .args(["--wait", "--wrap", "true", "--output=/dev/null"])
            .env("SLURM_CONF", &conf)
            .current_dir(tmp.path());
        quiet(&mut sbatch)?;
        let t2 = Instant::now();
        d.push(t1 - t0);
        s.push(t2 - t1);
        eprintln!(
            "round {round}: div run {:.2} s, sbatch --wait {:.2} s",
            (t1 - t0).as_secs_f64(),
            (t2 - t1).as_secs_f64()
        );
    }
    let range = |v: &[Duration]| {
        let lo = v.iter().min().copied().unwrap_or_default();
        let hi = v.iter().max().copied().unwrap_or_default();
        format!("{:.2}–{:.2}", lo.as_secs_f64(), hi.as_secs_f64())
    };
    let (dr, sr) = (range(&d), range(&s));
    let dm = percentile(&mut d, 50);
    let sm = percentile(&mut s, 50);
    let r = ratio(dm, sm);
    println!(
        "div run --gpu h100 -- true on Slurm: median {:.2} s ({dr})",
        dm.as_secs_f64()
    );
    println!(
        "sbatch --wait --wrap true:           median {:.2} s ({sr})",
        sm.as_secs_f64()
    );
    println!(
        "ratio {r:.2}× (goal ≤ 1.0×: {}); {rounds} rounds; load average {}",
        verdict(r <= 1.0),
        fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}

/// A state directory with a `slurm.toml` in a temp shared directory, and a project; its
/// control plane is stopped when dropped.
struct OnSlurm {
    div: PathBuf,
    home: PathBuf,
    project: PathBuf,
    conf: PathBuf,
}

impl OnSlurm {
    fn new(div: &Path, shared: &Path, conf: &Path) -> Result<OnSlurm> {
        let home = shared.join("home");
        let project = shared.join("project");
        fs::create_dir_all(&home)?;
        fs::create_dir_all(&project)?;
        fs::write(project.join("README"), "x\n")?;
        fs::write(
            home.join("slurm.toml"),
            format!(
                "shared_dir = \"{}\"\n[partitions]\nh100 = \"gpu\"\n",
                shared.display()
            ),
        )?;
        Ok(OnSlurm {
            div: div.to_path_buf(),
            home,
            project,
            conf: conf.to_path_buf(),
        })
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.div);
        cmd.args(args)
            .current_dir(&self.project)
            .env("DIVERGENT_HOME", &self.home)
            .env("SLURM_CONF", &self.conf)
            .env_remove("DIVERGENT_API_URL")
            .env_remove("DIVERGENT_TOKEN")
            .env("NO_COLOR", "1");
        cmd
    }

    fn div(&self, args: &[&str]) -> Result<()> {
        quiet(&mut self.cmd(args))
    }
}

impl Drop for OnSlurm {
    fn drop(&mut self) {
        crate::bench_local::stop_runs(|args| self.cmd(args));
        let _ = self.div(&["server", "stop"]);
    }
}

fn quiet(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
