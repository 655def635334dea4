//! The Slurm executor: each run is one Slurm job that runs div's own supervisor on each of
//! its nodes (docs/slurm.md). Chosen by `home/slurm.toml` ([`config`]).
//!
//! - **Start**: the launcher's run directory (on the shared directory every node sees) gets
//!   one directory per node, `nodes/K`, each with its own copy of the workspace, `/tmp`,
//!   `/mnt` and a `spec.json` derived from the run's; `log` is a hard link to `nodes/0/log`
//!   (the run's log is rank 0's). `slurm.sh` (the batch script) is submitted with `sbatch`,
//!   and the job id is the run's [`Handle`].
//! - **On each node**, the batch script writes `nodes/K/node.env` (rank, addresses, the GPUs
//!   Slurm gave) and runs `<supervisor> nodes/K`; [`node_or_gather`] merges that into the
//!   node's spec and the supervisor runs the run exactly as locally.
//! - **End**: the batch script then runs `<supervisor> RUN_DIR`, which gathers the nodes'
//!   `end.json` into the run's (a failing node fails the run with its exit code and last
//!   lines). The server reads the end from the run directory as for any executor.
//! - **Liveness** is `squeue -h -o '%i|%T|%r'`; while a job waits, its reason is written to
//!   the run's log. **Stop** asks each node's supervisor (a `stop` file), then `scancel`s
//!   the job after the grace period.
//!
//! Its room: [`config`] (`slurm.toml`), [`submit`] (the job's shape, time and script),
//! [`cluster`] (Slurm's commands, `sinfo` and `squeue`), [`node`] (a node's side and the
//! gather of their ends), [`lost`] (a node gone quiet), and here the executor itself:
//! starting, stopping and watching runs.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Executor, Handle, Launch, Liveness, Placement, StartError, Unplaceable};
use crate::SupervisorCommand;
use crate::inventory::{GpuGroup, Inventory};
use crate::rules;
use div_runtime::clock::now_ms;
use div_runtime::decision::{self, Decision, Why};
use div_runtime::supervisor::{self, RunSpec};

mod cluster;
pub(crate) mod config;
mod lost;
mod node;
mod run_dir;
mod submit;
#[cfg(test)]
mod tests;

use cluster::{JobState, Queue, SQUEUE_TTL, SlurmError, parse_squeue, sinfo, slurm, summary};
use config::SlurmConfig;
use lost::lost_node;
pub(crate) use node::node_or_gather;
pub(crate) use run_dir::STARTED_FILE;
use run_dir::{
    JOB_STATE_FILE, JobFile, SECRETS_FILE, all_nodes_ended, node_started, recorded_job, spec_of,
    started_ms,
};
use submit::{BATCH_TEMPLATE, Shape, accounting_args, quote, resource_args, shape, time_minutes};

/// Places runs as Slurm jobs. See the module's documentation.
#[derive(Debug)]
pub(crate) struct SlurmExecutor {
    config: SlurmConfig,
    /// What each node runs: `program args… <dir>`.
    supervise: Vec<String>,
    runs_dir: PathBuf,
    cluster: Arc<Mutex<String>>,
    queue: Mutex<Queue>,
    /// The last wait reason written to each pending job's log.
    shown: Mutex<BTreeMap<u32, String>>,
    /// What each node of each running run last said it is well (its heartbeat file's text),
    /// and when this server saw that change: a node whose word has not changed for
    /// [`lost::LOST_AFTER`] of this server's own time is lost (no node's clock is trusted).
    beats: Mutex<BTreeMap<(PathBuf, u32), (String, Instant)>>,
}

/// How long after a decision's kill the nodes' ends are waited for before the run's end is
/// gathered without those that never came (a node that is gone writes none).
const ENDS_AFTER_KILL: Duration = Duration::from_secs(15);

/// The error returned by [`SlurmExecutor::open`]: the cluster does not answer, or does not
/// offer what `slurm.toml` says.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("Slurm does not answer: {0}")]
    NoAnswer(SlurmError),
    #[error(
        "slurm.toml puts `{sku}` on the partition `{partition}`, which this cluster does not have; sinfo shows {seen}"
    )]
    NoPartition {
        sku: String,
        partition: String,
        seen: String,
    },
    #[error("`{0}` is not a SKU")]
    NotASku(String),
    #[error("the partition `{partition}` (for `{sku}`) has no `{gres}` GRES")]
    NoGres {
        partition: String,
        sku: String,
        gres: String,
    },
}

/// Why a run's places on its nodes could not be made ready: the file or folder, and why.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodesError {
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("spec.json: {0}")]
    Spec(serde_json::Error),
}

impl SlurmExecutor {
    /// Asks the cluster what it offers; the executor and the inventory the server schedules
    /// against (each SKU's GPUs over its partition, the largest partition's cores).
    pub(crate) fn open(
        config: SlurmConfig,
        supervisor: &SupervisorCommand,
        home: &Path,
    ) -> Result<(SlurmExecutor, Inventory), OpenError> {
        // A controller slow at this moment (a loaded cluster) is asked again, not taken for
        // a cluster that is not there: the server is still opening, and `div` waits for it.
        let parts = cluster::patiently(cluster::OPEN_PATIENCE, || sinfo(&config.gres))
            .map_err(OpenError::NoAnswer)?;
        let mut gpus = Vec::new();
        let mut host_cores = 0;
        for (sku, partition) in &config.partitions {
            let Some(p) = parts.iter().find(|p| &p.name == partition) else {
                let seen: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
                return Err(OpenError::NoPartition {
                    sku: sku.clone(),
                    partition: partition.clone(),
                    seen: seen.join(", "),
                });
            };
            host_cores = host_cores.max(p.nodes.saturating_mul(p.cpus_per_node));
            let price = rules::sku(sku).ok_or_else(|| OpenError::NotASku(sku.clone()))?;
            if price.gpu {
                let total = p
                    .nodes
                    .saturating_mul(p.gres_per_node.min(config.gpus_per_node))
                    .min(1024 * 64);
                if total == 0 {
                    return Err(OpenError::NoGres {
                        partition: partition.clone(),
                        sku: sku.clone(),
                        gres: config.gres.clone(),
                    });
                }
                gpus.push(GpuGroup {
                    sku: price,
                    indices: (0..total).collect(),
                });
            }
        }
        let mut supervise = vec![
            config
                .div
                .clone()
                .unwrap_or_else(|| supervisor.program.clone())
                .display()
                .to_string(),
        ];
        supervise.extend(supervisor.args.iter().cloned());
        let cluster = Arc::new(Mutex::new(summary(&parts, &config.gres)));
        // What the cluster offers, for `/v1/health`, kept fresh off the request path.
        let fresh = Arc::downgrade(&cluster);
        let gres = config.gres.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(15));
                let Some(cluster) = fresh.upgrade() else {
                    break;
                };
                let line = match sinfo(&gres) {
                    Ok(parts) => summary(&parts, &gres),
                    Err(e) => format!("not answering ({e})"),
                };
                *cluster.lock().unwrap_or_else(|e| e.into_inner()) = line;
            }
        });
        let mut inventory = Inventory {
            host_cores: host_cores.max(1),
            // The nodes' memory is the cluster's to hold a run to, not this machine's.
            host_memory_gib: u32::MAX,
            gpus,
            emulated: false,
            prices: config.prices.clone(),
        };
        for group in &mut inventory.gpus {
            if let Some(cents) = config.prices.get(group.sku.name) {
                group.sku.cents_per_hour = *cents;
            }
        }
        Ok((
            SlurmExecutor {
                config,
                supervise,
                runs_dir: home.join("runs"),
                cluster,
                queue: Mutex::new(Queue::default()),
                shown: Mutex::new(BTreeMap::new()),
                beats: Mutex::new(BTreeMap::new()),
            },
            inventory,
        ))
    }

    /// The job's state, `None` when Slurm no longer lists it, `Err` when it cannot be asked.
    fn job_state(&self, job: u32) -> Result<Option<JobState>, SlurmError> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = queue.read.is_some_and(|t| t.elapsed() < SQUEUE_TTL);
        if fresh && let Some(s) = queue.jobs.get(&job) {
            return Ok(Some(s.clone()));
        }
        // Everything at once, so that many runs cost one call a tick.
        let text = slurm("squeue", &["-h".into(), "-o".into(), "%i|%T|%r".into()])?;
        queue.jobs = parse_squeue(&text);
        queue.read = Some(Instant::now());
        Ok(queue.jobs.get(&job).cloned())
    }

    fn prepare_nodes(&self, launch: &Launch<'_>, shape: &Shape) -> Result<(), NodesError> {
        let io = |what: &'static str, source: std::io::Error| NodesError::Io { what, source };
        let dir = launch.run_dir;
        let spec: RunSpec = fs::read(dir.join("spec.json"))
            .map_err(|e| io("spec.json", e))
            .and_then(|b| serde_json::from_slice(&b).map_err(NodesError::Spec))?;
        let nodes_dir = dir.join("nodes");
        let _ = fs::remove_dir_all(&nodes_dir);
        let (tmp0, mnt0) = (dir.join("tmp"), dir.join("mnt"));
        for k in (0..shape.nodes).rev() {
            let node = nodes_dir.join(k.to_string());
            fs::create_dir_all(&node).map_err(|e| io("nodes", e))?;
            let (workspace, tmp, mnt) =
                (node.join("workspace"), node.join("tmp"), node.join("mnt"));
            // Rank 0 (made last) takes the launcher's copy; the others get their own.
            if k == 0 {
                fs::rename(&spec.workspace, &workspace).map_err(|e| io("workspace", e))?;
            } else {
                div_runtime::workspace::copy_tree(&spec.workspace, &workspace)
                    .map_err(|e| io("workspace", e))?;
            }
            fs::create_dir_all(tmp.join("divergent")).map_err(|e| io("tmp", e))?;
            fs::create_dir_all(&mnt).map_err(|e| io("mnt", e))?;
            for v in &spec.volumes {
                fs::create_dir_all(mnt.join(v)).map_err(|e| io("mnt", e))?;
            }
            let swap = |p: &Path| -> PathBuf {
                for (from, to) in [(&spec.workspace, &workspace), (&tmp0, &tmp), (&mnt0, &mnt)] {
                    if let Ok(rest) = p.strip_prefix(from) {
                        return if rest.as_os_str().is_empty() {
                            to.clone()
                        } else {
                            to.join(rest)
                        };
                    }
                }
                p.to_path_buf()
            };
            let mut node_spec = spec.clone();
            node_spec.run_id = format!("{}-n{k}", spec.run_id);
            node_spec.argv = spec
                .argv
                .iter()
                .map(|a| {
                    if a.starts_with('/') {
                        swap(Path::new(a)).display().to_string()
                    } else {
                        a.clone()
                    }
                })
                .collect();
            node_spec.cwd = swap(&spec.cwd);
            node_spec.result_path = swap(&spec.result_path);
            node_spec.telemetry_path = swap(&spec.telemetry_path);
            node_spec.mnt_dir = spec.mnt_dir.as_deref().map(swap);
            node_spec.workspace = workspace;
            // Slurm places the run on its cores; the node's GPUs come from Slurm (node.env).
            node_spec.cores = Vec::new();
            node_spec.memory_bytes = u64::from(shape.memory_gib_per_node) << 30;
            node_spec.env.retain(|(k, _)| k != "CUDA_VISIBLE_DEVICES");
            if node_spec.secrets_at.is_some() {
                node_spec.secrets_file = Some(dir.join(SECRETS_FILE));
            }
            supervisor::write_json_atomic(&node.join("spec.json"), &node_spec)
                .map_err(|e| io("a node's spec.json", e))?;
        }
        // The run's log is rank 0's: one file, two names.
        let log = dir.join("log");
        let log0 = nodes_dir.join("0").join("log");
        fs::File::create(&log0).map_err(|e| io("the log", e))?;
        let _ = fs::remove_file(&log);
        fs::hard_link(&log0, &log).map_err(|e| io("the log", e))?;
        Ok(())
    }
}

impl Executor for SlurmExecutor {
    fn start(&self, launch: &Launch<'_>) -> Result<Handle, StartError> {
        let run = launch.run;
        let shape = shape(
            &self.config,
            &Placement {
                sku: &run.sku,
                gpus: run.gpus,
                cores: run.cores,
                memory_gib: run.memory_gib,
            },
        )?;
        self.prepare_nodes(launch, &shape)
            .map_err(|e| StartError::Nodes(e.to_string()))?;
        let file = |file: &str| {
            let file = file.to_owned();
            move |source| StartError::File { file, source }
        };
        let dir = launch.run_dir;
        // The nodes' supervisors are started by Slurm, not by us: no pipe reaches them, so
        // the secrets cross in a file only the server's user reads (mode 0600), deleted when
        // the run's end is gathered. docs/slurm.md says so.
        supervisor::write_json_atomic(&dir.join(SECRETS_FILE), &launch.secrets)
            .map_err(file(SECRETS_FILE))?;
        let job_file = dir.join("slurm.json");
        supervisor::write_json_atomic(
            &job_file,
            &JobFile {
                nodes: shape.nodes,
                job: None,
            },
        )
        .map_err(file("slurm.json"))?;
        let supervise: Vec<String> = self.supervise.iter().map(|a| quote(a)).collect();
        let script = BATCH_TEMPLATE
            .replace("@RUN_DIR@", &quote(&dir.display().to_string()))
            .replace("@SUPERVISE@", &supervise.join(" "));
        let script_path = dir.join("slurm.sh");
        fs::write(&script_path, script).map_err(file("slurm.sh"))?;
        let mut args = resource_args(&self.config, &shape);
        args.extend(accounting_args(run, launch.member, launch.account));
        args.extend([
            "--parsable".to_owned(),
            format!("--job-name=div-{}", run.id),
            format!(
                "--time={}",
                time_minutes(
                    run.cents_per_hour,
                    run.max_spend_cents,
                    spec_of(dir).map_or(rules::MAX_RUN_SECONDS, |s| s.max_seconds)
                )
            ),
            format!("--chdir={}", dir.display()),
            format!("--output={}", dir.join("slurm.out").display()),
            "--export=NONE".to_owned(),
            // A job whose node fails is not run again from its start: a run runs once.
            "--no-requeue".to_owned(),
            script_path.display().to_string(),
        ]);
        let out = slurm("sbatch", &args).map_err(|e| StartError::Submit(e.to_string()))?;
        let job: u32 = out
            .trim()
            .split(';')
            .next()
            .and_then(|j| j.parse().ok())
            .ok_or_else(|| {
                StartError::Submit(format!("sbatch answered `{}`, not a job id", out.trim()))
            })?;
        let _ = supervisor::write_json_atomic(
            &job_file,
            &JobFile {
                nodes: shape.nodes,
                job: Some(job),
            },
        );
        Ok(Handle::SlurmJob { slurm_job: job })
    }

    fn stop(&self, run_dir: &Path, handle: Option<&Handle>) -> std::io::Result<()> {
        // No handle: the server was killed between `sbatch` and recording the job; the job
        // file written before `sbatch` returned names it, when it got that far.
        let Some(job) = handle
            .map(Handle::slurm_job)
            .or_else(|| recorded_job(run_dir))
        else {
            return Ok(());
        };
        // Already decided (asked again: the org's stop is asked on every pass): stopping.
        if decision::read(run_dir).is_some() {
            return Ok(());
        }
        // Pending, nothing of it runs yet: cancel it now. Running: the one decision for the
        // whole run, which every node's supervisor obeys at once (SIGTERM, its grace, then
        // SIGKILL at the same moment everywhere); `scancel` comes the configured grace after
        // that, for whatever is left. A node that wrote its `node.env` has started, whatever
        // a `squeue` read up to half a second ago still says: cancelling it now would have
        // Slurm signal the sandbox itself and end the run with no grace (seen once in CI).
        let started = node_started(run_dir);
        let pending =
            !started && matches!(self.job_state(job), Ok(Some(s)) if s.state == "PENDING");
        let grace = if pending {
            Duration::ZERO
        } else {
            let run_grace = spec_of(run_dir).map_or(0, |s| s.stop_grace_seconds);
            let now = now_ms();
            // Stopped by the org: the server wrote why beside the run first.
            let org = fs::read_to_string(run_dir.join(div_runtime::supervisor::ORG_STOP_FILE))
                .ok()
                .map(|r| r.trim().chars().take(200).collect::<String>())
                .filter(|r| !r.is_empty());
            let left = run_grace.saturating_mul(1000);
            let asked = decision::told_line(decision::ASKED_WORDS, left);
            let decided = Decision {
                why: if org.is_some() {
                    Why::Org
                } else {
                    Why::Canceled
                },
                line: match &org {
                    Some(why) => format!("{asked}\ndiv: stopped by the org: {why}"),
                    None => asked,
                },
                reason: org,
                decided_ms: now,
                kill_at_ms: now.saturating_add(left),
                spend_until_ms: None,
            };
            decision::decide(run_dir, &decided)?;
            Duration::from_secs(run_grace.saturating_add(self.config.grace_seconds))
        };
        std::thread::spawn(move || {
            std::thread::sleep(grace);
            let _ = slurm("scancel", &[job.to_string()]);
        });
        Ok(())
    }

    fn liveness(&self, run_dir: &Path, handle: Option<&Handle>) -> Liveness {
        // No handle: the server was killed between `sbatch` and recording the job.
        let Some(job) = handle
            .map(Handle::slurm_job)
            .or_else(|| recorded_job(run_dir))
        else {
            return Liveness::Gone;
        };
        // Every node wrote its end: the run is over, however long srun and the batch script
        // still take to wind down (under load, srun has taken three minutes to exit after its
        // tasks had all ended, with the nodes held all that time). Its end is gathered here,
        // as the batch script would, and the job is cancelled so its nodes are free at once.
        if all_nodes_ended(run_dir) {
            let _ = node_or_gather(run_dir);
            if run_dir.join("end.json").exists() {
                self.shown
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&job);
                let _ = slurm("scancel", &[job.to_string()]);
                return Liveness::Gone;
            }
        }
        // Decided, and the kill is long past: a node that has not written its end by now
        // never will (it is gone). The run's end is gathered without it, and whatever is left
        // of the job is cancelled.
        if let Some(decided) = decision::read(run_dir)
            && now_ms()
                >= decided
                    .kill_at_ms
                    .saturating_add(ENDS_AFTER_KILL.as_millis() as u64)
        {
            let _ = node_or_gather(run_dir);
            if run_dir.join("end.json").exists() {
                let _ = slurm("scancel", &[job.to_string()]);
                return Liveness::Gone;
            }
        }
        match self.job_state(job) {
            // Slurm cannot be asked: the job is not taken for lost.
            Err(_) => Liveness::Alive,
            // Ended in Slurm (squeue lists an ended job for a while): as gone as one no longer
            // listed, with what Slurm said of it kept for the end.
            Ok(Some(s)) if ENDED_STATES.contains(&s.state.as_str()) => {
                let _ = fs::write(run_dir.join(JOB_STATE_FILE), &s.state);
                self.gone(run_dir, job)
            }
            Ok(None) => self.gone(run_dir, job),
            Ok(Some(s)) => {
                if s.state == "PENDING" && !s.reason.is_empty() && s.reason != "None" {
                    let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
                    if shown.get(&job) != Some(&s.reason) {
                        let line =
                            format!("div: waiting in Slurm's queue (job {job}): {}\n", s.reason);
                        if let Ok(mut log) = fs::OpenOptions::new()
                            .append(true)
                            .open(run_dir.join("log"))
                        {
                            let _ = std::io::Write::write_all(&mut log, line.as_bytes());
                        }
                        shown.insert(job, s.reason);
                    }
                }
                Liveness::Alive
            }
        }
    }

    fn queues(&self) -> bool {
        true
    }

    fn started_ms(&self, run_dir: &Path) -> Option<u64> {
        started_ms(run_dir)
    }

    fn waiting(&self, _run_dir: &Path, handle: Option<&Handle>) -> Option<String> {
        let job = handle?.slurm_job();
        let reason = self
            .shown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&job)
            .cloned();
        Some(match reason {
            Some(reason) => format!("waiting in Slurm's queue (job {job}): {reason}"),
            None => format!("waiting in Slurm's queue (job {job})"),
        })
    }

    fn decides_limits(&self) -> bool {
        true
    }

    fn lost(&self, run_dir: &Path) -> Option<String> {
        let job: JobFile = fs::read(run_dir.join("slurm.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())?;
        started_ms(run_dir)?;
        let mut beats = self.beats.lock().unwrap_or_else(|e| e.into_inner());
        lost_node(&mut beats, run_dir, &job, Instant::now())
    }

    fn reclaim(&self, run_id: &str) {
        if let Some(job) = recorded_job(&self.runs_dir.join(run_id)) {
            let _ = slurm("scancel", &[job.to_string()]);
        }
    }

    fn describe(&self) -> String {
        let partitions: Vec<String> = self
            .config
            .partitions
            .iter()
            .map(|(sku, p)| format!("{sku}→{p}"))
            .collect();
        format!(
            "slurm: partitions {}, gres {} ({} a node), shared directory {}; cluster: {}",
            partitions.join(" "),
            self.config.gres,
            self.config.gpus_per_node,
            self.config.shared_dir.display(),
            self.cluster.lock().unwrap_or_else(|e| e.into_inner())
        )
    }

    fn check(&self, placement: &Placement<'_>) -> Result<(), Unplaceable> {
        let shape = shape(&self.config, placement)?;
        let mut args = resource_args(&self.config, &shape);
        args.extend([
            "--test-only".to_owned(),
            "--time=1".to_owned(),
            "--output=/dev/null".to_owned(),
            "--wrap=true".to_owned(),
        ]);
        slurm("sbatch", &args).map(|_| ()).map_err(|e| {
            // What is asked of each node, and why that much memory: a GPU run is given at
            // least what comes with its GPUs, whatever `--memory` says (docs/slurm.md).
            let memory_why = match rules::sku(placement.sku) {
                Some(sku) if sku.gpu && shape.gpus_per_node > 0 => format!(
                    "; the {} GiB a node is the most of `--memory` and what comes with the node's {} GPU(s) ({} GiB each): a GPU run is never given less than its GPUs' share, so a smaller `--memory` does not lower it, and a node with less than {} GiB a GPU cannot take the run",
                    shape.memory_gib_per_node,
                    shape.gpus_per_node,
                    sku.memory_gib_per_unit,
                    sku.memory_gib_per_unit
                ),
                _ => String::new(),
            };
            Unplaceable(format!(
                "the Slurm cluster can never place this run ({} node(s) × {} GPU(s), {} cores and {} GiB a node, partition {}): {e}{memory_why}",
                shape.nodes,
                shape.gpus_per_node,
                shape.cpus_per_node,
                shape.memory_gib_per_node,
                shape.partition
            ))
        })
    }
}

/// The job states in which `squeue` still lists a job that has ended.
const ENDED_STATES: [&str; 11] = [
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
    "SPECIAL_EXIT",
];

impl SlurmExecutor {
    /// A job Slurm no longer runs: its end is gathered where nothing else will gather it.
    fn gone(&self, run_dir: &Path, job: u32) -> Liveness {
        {
            let mut beats = self.beats.lock().unwrap_or_else(|e| e.into_inner());
            beats.retain(|(dir, _), _| dir != run_dir);
        }
        self.shown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&job);
        // Gone before its batch script ran (scancel while it waited): nothing of it ran and
        // nothing will gather it, so its end is gathered here, the same way: canceled,
        // nothing spent.
        let started = node_started(run_dir);
        if !started && !run_dir.join("end.json").exists() {
            let _ = fs::write(run_dir.join("slurm.signaled"), b"");
            let _ = node_or_gather(run_dir);
        }
        // Stopped by Slurm from outside (the batch script marked its signal), or ended by it
        // (a node failure), and killed whole before anything gathered it: a node's supervisor
        // still in its grace when Slurm's `KillWait` ran out writes no end, and neither does
        // the batch script. Gathered here, the same way: never "lost".
        if !run_dir.join("end.json").exists()
            && (run_dir.join("slurm.signaled").exists()
                || run_dir.join(JOB_STATE_FILE).exists()
                || decision::read(run_dir).is_some())
        {
            let _ = node_or_gather(run_dir);
        }
        Liveness::Gone
    }
}
