//! End to end on a real Slurm cluster: the real `div`, its local control plane with
//! `home/slurm.toml`, and the loopback cluster `.ci/slurm-up` brings up (4 nodes × 8 fake
//! GPUs). Each test skips, loudly, when no cluster answers (`sinfo` fails).
//!
//! `runs.rs`: runs placed on the cluster (one GPU, 32 GPUs on four nodes, an image, a failing
//! node, a refusal, a wait, a node's log); `ends.rs`: how they end (a ceiling, the job's time
//! limit, `div stop`, `scancel`, a server killed mid-job); `team.rs`: a member's Slurm account
//! and the job's comment naming them; here, the cluster they share.

mod ends;
mod runs;
mod team;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use div_test_support::wait_until;

use crate::support::DIV;

/// How long a test waits for the cluster (at most 3 minutes: it may be busy with the other
/// tests).
const PATIENCE: Duration = Duration::from_secs(180);

/// Whether a Slurm cluster answers here (asked once, within 10 s: `sinfo` retries a missing
/// configuration for a minute); says so loudly when not.
fn cluster() -> bool {
    static ANSWERS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ANSWERS.get_or_init(|| {
        Command::new("timeout")
            .args(["10", "sinfo", "-h"])
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
    });
    if !ok {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "\n!!!!! SKIPPED: no Slurm cluster answers here (`sinfo -h` failed); `.ci/slurm-up` brings one up (as root) !!!!!\n"
            );
        }
    }
    ok
}

/// A temp shared directory holding the state directory (with its `slurm.toml`) and a project.
struct Cluster {
    tmp: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Cluster {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let home = tmp.path().join("div-home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(tmp.path().join("project")).expect("project");
        std::fs::write(tmp.path().join("project/README"), "a project\n").expect("a file to ship");
        std::fs::write(
            home.join("slurm.toml"),
            format!(
                "shared_dir = \"{}\"\ngres = \"gpu\"\ngpus_per_node = 8\ngrace_seconds = 2\n[partitions]\nh100 = \"gpu\"\n",
                tmp.path().display()
            ),
        )
        .expect("slurm.toml");
        Cluster { tmp }
    }

    fn home(&self) -> PathBuf {
        self.tmp.path().join("div-home")
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.tmp.path().join("project").join(name), text).expect("write");
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(DIV);
        c.args(args)
            .current_dir(self.tmp.path().join("project"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path().join("home"))
            .env("DIVERGENT_HOME", self.home())
            .env("NO_COLOR", "1");
        if let Some(conf) = std::env::var_os("SLURM_CONF") {
            c.env("SLURM_CONF", conf);
        }
        c
    }

    fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
    }

    /// The run's record, as `div runs --json` has it.
    fn run_json(&self, name: &str) -> serde_json::Value {
        let out = self.div(&["runs", "--json"]);
        let runs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runs as JSON");
        runs.as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == name))
            .cloned()
            .unwrap_or(serde_json::Value::Null)
    }

    /// Waits (at most [`PATIENCE`]) until `check` holds of the run.
    fn wait_for(&self, name: &str, what: &str, check: impl Fn(&serde_json::Value) -> bool) {
        wait_until(format!("{name} {what}"), PATIENCE, || {
            let run = self.run_json(name);
            if check(&run) { Ok(()) } else { Err(run) }
        });
    }

    fn run_dir(&self, name: &str) -> PathBuf {
        let id = self.run_json(name)["id"]
            .as_str()
            .expect("the run has an id")
            .to_owned();
        self.home().join("runs").join(id)
    }

    /// The run's Slurm job, once its batch script wrote a node's env.
    fn job(&self, name: &str) -> String {
        let dir = self.run_dir(name);
        wait_until(format!("{name}'s job started"), PATIENCE, || {
            let text = std::fs::read_to_string(dir.join("nodes/0/node.env")).unwrap_or_default();
            match text.lines().find_map(|l| l.strip_prefix("job=")) {
                Some(job) => Ok(job.to_owned()),
                None => Err(text),
            }
        })
    }
}

/// Its runs stopped (their jobs with them), then its server, when the test ends.
impl Drop for Cluster {
    fn drop(&mut self) {
        div_test_support::leftovers::stop_runs_with_div(
            &|args| self.command(args),
            &self.home(),
            self.tmp.path(),
        );
        let _ = self.div(&["server", "stop"]);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn detach(c: &Cluster, args: &[&str]) -> String {
    let mut all = vec!["run", "--detach"];
    all.extend(args);
    let out = c.div(&all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

/// Cancels a Slurm job when dropped, so a failing test leaves nothing holding the cluster.
struct Scancel(String);

impl Drop for Scancel {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).status();
    }
}
