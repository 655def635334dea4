//! The Slurm executor on a real cluster: a server in the test's process with `home/slurm.toml`,
//! placing its runs on the loopback cluster `.ci/slurm-up` brings up (4 nodes × 8 fake GPUs in
//! partition `gpu`), whose nodes run the `div-supervise` this crate builds (the server's
//! supervisor command, which `slurm.toml` leaves as it is). Each test skips, loudly, when no
//! cluster answers (`sinfo` fails).
//!
//! `runs.rs`: runs placed on the cluster (one GPU, 32 GPUs on four nodes, an image, a failing
//! node, a refusal, a wait, a node's log); `ends.rs`: how they end (a ceiling, the job's time
//! limit, a stop with the run's grace, `scancel`, a server killed mid-job); `team.rs`: a
//! member's Slurm account and the job's comment naming them; here, the cluster they share.

mod ends;
mod runs;
mod team;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use div_server::{SandboxMode, ServerOptions};
use serde_json::Value;

use crate::harness::{Server, options};

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

/// The `slurm.toml` of a state directory in `shared`: h100 runs on partition `gpu`, a 2 s
/// grace before `scancel`, and `more` after it (a `[prices]` table…).
fn slurm_toml(shared: &Path, more: &str) -> String {
    format!(
        "shared_dir = \"{}\"\ngres = \"gpu\"\ngpus_per_node = 8\ngrace_seconds = 2\n[partitions]\nh100 = \"gpu\"\n{more}",
        shared.display()
    )
}

/// A server on a state directory inside a temp shared directory the nodes see (this machine's
/// `/tmp`), with its `slurm.toml`. When it is dropped, pass or panic, every job of its runs is
/// cancelled and gone from `squeue` before the server is stopped and the directory removed.
pub(super) struct Cluster {
    server: Option<Server>,
    options: ServerOptions,
    // Removed last, once nothing runs in it.
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// A server as `div server` starts one: this machine's own system for the default image,
    /// and the sandbox when there is one.
    async fn start() -> Cluster {
        Cluster::start_changed("", |_| {}).await
    }

    /// As [`Cluster::start`], with `more` appended to `slurm.toml` and `change` made to the
    /// server's options.
    async fn start_changed(more: &str, change: impl FnOnce(&mut ServerOptions)) -> Cluster {
        let dir = tempfile::tempdir().expect("a temp dir");
        let home = dir.path().join("div-home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::write(home.join("slurm.toml"), slurm_toml(dir.path(), more)).expect("slurm.toml");
        let mut options = options(&home, None, SandboxMode::Auto);
        change(&mut options);
        let server = Server::at(options.clone()).await;
        Cluster {
            server: Some(server),
            options,
            _dir: dir,
        }
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("a server")
    }

    fn home(&self) -> PathBuf {
        self.options.home.clone()
    }

    /// Kills the server as a crash would (its runs and their jobs go on), and starts another
    /// on the same home.
    async fn kill_and_restart(&mut self) {
        let server = self.server.take().expect("a server");
        let _ = server.kill().await;
        self.server = Some(Server::at(self.options.clone()).await);
    }

    /// Places a run of `command` on the cluster (`h100`, one GPU, unless `extra` says
    /// otherwise), expecting it created; its id.
    async fn place(&self, command: &str, extra: Value) -> String {
        let mut body = serde_json::json!({"sku": "h100", "gpus": 1});
        merge(&mut body, extra);
        let (status, run) = self.server().create_run(command, body).await;
        assert_eq!(status, 201, "{run}");
        run["id"].as_str().expect("an id").to_owned()
    }

    /// The run, as `GET /v1/runs/{id}` has it.
    async fn run(&self, id: &str) -> Value {
        let (status, run) = self
            .server()
            .request("GET", &format!("/v1/runs/{id}"), None)
            .await;
        assert_eq!(status, 200, "{run}");
        run
    }

    /// Waits (at most [`PATIENCE`]) until `check` holds of the run; the run then.
    async fn wait_for(&self, id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let run = self.run(id).await;
            if check(&run) {
                return run;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{id} never {what} within {} s: {run}",
                PATIENCE.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most [`PATIENCE`]) until the run has ended; the run then.
    async fn wait_end(&self, id: &str) -> Value {
        self.wait_for(id, "ended", |r| {
            !matches!(r["status"].as_str(), Some("queued" | "running"))
        })
        .await
    }

    /// Waits (at most [`PATIENCE`]) until the file `rel` of the run's directory holds `needle`;
    /// its text then.
    async fn wait_file(&self, id: &str, rel: &str, needle: &str) -> String {
        self.wait_file_within(id, rel, needle, PATIENCE).await
    }

    /// As [`Cluster::wait_file`], waiting at most `patience`.
    async fn wait_file_within(
        &self,
        id: &str,
        rel: &str,
        needle: &str,
        patience: Duration,
    ) -> String {
        let path = self.run_dir(id).join(rel);
        let deadline = std::time::Instant::now() + patience;
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains(needle) {
                return text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} never said {needle:?}: {text}",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `POST /v1/runs/{id}/stop`, expecting it taken.
    async fn stop(&self, id: &str) {
        let (status, stopped) = self
            .server()
            .request("POST", &format!("/v1/runs/{id}/stop"), None)
            .await;
        assert_eq!(status, 200, "{stopped}");
    }

    fn run_dir(&self, id: &str) -> PathBuf {
        self.home().join("runs").join(id)
    }

    /// The run's Slurm job, once its batch script wrote a node's env.
    async fn job(&self, id: &str) -> String {
        let text = self.wait_file(id, "nodes/0/node.env", "job=").await;
        text.lines()
            .find_map(|l| l.strip_prefix("job="))
            .expect("a job line")
            .to_owned()
    }

    /// The Slurm jobs of this server's runs that `squeue` lists (`div-RUN_ID`).
    fn jobs_listed(&self) -> Vec<String> {
        let runs: Vec<String> = std::fs::read_dir(self.home().join("runs"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| format!("div-{}", e.file_name().to_string_lossy()))
            .collect();
        let listed = Command::new("squeue")
            .args(["-h", "-o", "%i %j"])
            .output()
            .map(|o| text(&o.stdout))
            .unwrap_or_default();
        listed
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, name)| runs.iter().any(|r| r == name.trim()))
            .map(|(job, _)| job.trim().to_owned())
            .collect()
    }

    /// Cancels every job of this server's runs, and waits (at most [`PATIENCE`]) until
    /// `squeue` lists none of them.
    fn cancel_jobs(&self) {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let jobs = self.jobs_listed();
            if jobs.is_empty() {
                return;
            }
            for job in &jobs {
                let _ = Command::new("scancel").arg(job).status();
            }
            if std::time::Instant::now() > deadline {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("still in Slurm's queue after scancel: {jobs:?}");
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Its runs' jobs cancelled and gone, then its server stopped (and any run it placed
/// meanwhile cancelled too), then its directory removed.
impl Drop for Cluster {
    fn drop(&mut self) {
        self.cancel_jobs();
        drop(self.server.take());
        self.cancel_jobs();
    }
}

/// `body` with `extra`'s fields added (or replaced).
fn merge(body: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The error message of a refusal.
fn refusal(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Cancels a Slurm job when dropped, so a failing test leaves nothing holding the cluster.
struct Scancel(String);

impl Drop for Scancel {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).status();
    }
}
