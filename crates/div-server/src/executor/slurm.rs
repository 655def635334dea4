//! The Slurm executor: each run is one Slurm job that runs div's own supervisor on each of
//! its nodes (docs/slurm.md). Chosen by `home/slurm.toml` ([`crate::slurm_config`]).
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
//! Why over 700 lines: some 280 are its tests; the rest is one executor's seam methods plus
//! what only Slurm needs (the batch script's arguments, `sbatch --test-only`, one `squeue` read
//! shared by every run, the gather of the nodes' ends). The `sinfo` summary and the squeue
//! cache are the next to move out, to a module of their own.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use div_api::RunStatus;
use serde::{Deserialize, Serialize};

use super::{Executor, Handle, Launch, Liveness, Placement};
use crate::SupervisorCommand;
use crate::inventory::{GpuGroup, Inventory};
use crate::rules;
use crate::slurm_config::SlurmConfig;
use div_runtime::clock::now_ms;
use div_runtime::decision::{self, Decision, Why};
use div_runtime::supervisor::{self, EndRecord, RunSpec};

/// The batch script's template: `@RUN_DIR@` and `@SUPERVISE@` are filled in, shell-quoted.
const BATCH_TEMPLATE: &str = include_str!("slurm.sh");
/// The first port torchrun's rendezvous is told (`MASTER_PORT`): 29500 (torchrun's own
/// default) plus the job id modulo 1000, so that jobs sharing a node do not collide.
pub(crate) const MASTER_PORT: u16 = 29500;

fn master_port(job: &str) -> u16 {
    MASTER_PORT + job.parse::<u32>().map_or(0, |j| (j % 1000) as u16)
}
/// Minutes added to the job's `--time` past the ceiling, so div's own stop (which writes the
/// run's end) comes first and Slurm's is the backstop.
const TIME_MARGIN_MINUTES: u64 = 1;
/// How long a reading of `squeue` is trusted for runs it lists.
const SQUEUE_TTL: Duration = Duration::from_millis(500);

/// The run's secrets for its nodes' supervisors (mode 0600), until its end is gathered.
const SECRETS_FILE: &str = "secrets.json";

/// What the run directory keeps about its job: `RUN_DIR/slurm.json`. Its presence also tells
/// the supervisor program, run on `RUN_DIR`, to gather the nodes' ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobFile {
    pub(crate) nodes: u32,
    pub(crate) job: Option<u32>,
}

/// How a run is laid out on the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) partition: String,
    pub(crate) nodes: u32,
    pub(crate) gpus_per_node: u32,
    pub(crate) cpus_per_node: u32,
    pub(crate) memory_gib_per_node: u32,
}

/// `--gpus N`: one node up to a node's GPUs, whole nodes past it; cores and memory split
/// evenly between the nodes (rounded up).
pub(crate) fn shape(config: &SlurmConfig, placement: &Placement<'_>) -> Result<Shape, String> {
    let partition = config
        .partitions
        .get(placement.sku)
        .cloned()
        .ok_or_else(|| {
            let named: Vec<&str> = config.partitions.keys().map(String::as_str).collect();
            format!(
                "this Slurm cluster has no partition for `{}` in slurm.toml; it takes {}",
                placement.sku,
                named.join(", ")
            )
        })?;
    let per = config.gpus_per_node;
    let gpus = placement.gpus;
    let (nodes, gpus_per_node) = if gpus <= per {
        (1, gpus)
    } else if gpus.is_multiple_of(per) {
        (gpus / per, per)
    } else {
        let below = gpus / per * per;
        return Err(format!(
            "`--gpus {gpus}`: past {per} GPUs a run takes whole nodes of {per} GPUs; ask for `--gpus {below}` or `--gpus {}`",
            below + per
        ));
    };
    Ok(Shape {
        partition,
        nodes,
        gpus_per_node,
        cpus_per_node: placement.cores.div_ceil(nodes).max(1),
        memory_gib_per_node: placement.memory_gib.div_ceil(nodes).max(1),
    })
}

/// The job's `--time`, in minutes: what the ceiling buys (or 24 hours), capped at 24 hours,
/// plus a minute so that div's own stop comes first.
pub(crate) fn time_minutes(
    cents_per_hour: i64,
    max_spend_cents: Option<i64>,
    max_seconds: u64,
) -> u64 {
    let mut seconds = max_seconds;
    if let Some(ceiling) = max_spend_cents
        && cents_per_hour > 0
        && ceiling > 0
    {
        let buys = (ceiling as u128 * 3600).div_ceil(cents_per_hour as u128);
        seconds = seconds.min(u64::try_from(buys).unwrap_or(u64::MAX));
    }
    seconds.div_ceil(60).max(1) + TIME_MARGIN_MINUTES
}

/// sbatch's resource options for `shape`.
fn resource_args(config: &SlurmConfig, shape: &Shape) -> Vec<String> {
    let mut args = vec![
        format!("--partition={}", shape.partition),
        format!("--nodes={}", shape.nodes),
        "--ntasks-per-node=1".to_owned(),
        format!("--cpus-per-task={}", shape.cpus_per_node),
        format!("--mem={}G", shape.memory_gib_per_node),
    ];
    if shape.gpus_per_node > 0 {
        args.push(format!("--gres={}:{}", config.gres, shape.gpus_per_node));
    }
    args
}

/// Single-quotes `s` for bash.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// How long one Slurm command may take: Slurm's clients retry an unreachable controller
/// (`MessageTimeout`) or a missing configuration (a minute), and the scheduler waits on them.
const SLURM_DEADLINE: Duration = Duration::from_secs(15);

/// One Slurm command's output; the error says what ran and what it said. Killed past
/// [`SLURM_DEADLINE`].
fn slurm(program: &str, args: &[String]) -> Result<String, String> {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{program}` could not run: {e} (is Slurm installed here?)"))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(SLURM_DEADLINE) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("`{program}` failed: {e}")),
        Err(_) => {
            div_runtime::sys::kill(pid, libc::SIGKILL);
            return Err(format!(
                "`{program}` did not answer within {}s (is slurmctld up, and SLURM_CONF right?)",
                SLURM_DEADLINE.as_secs()
            ));
        }
    };
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        let err = err
            .strip_prefix(&format!("{program}: error: "))
            .unwrap_or(err);
        Err(format!(
            "`{program}` said: {}",
            err.lines().collect::<Vec<_>>().join("; ")
        ))
    }
}

/// A partition as `sinfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionInfo {
    pub(crate) name: String,
    pub(crate) nodes: u32,
    pub(crate) cpus_per_node: u32,
    pub(crate) gres_per_node: u32,
    pub(crate) states: String,
}

/// Parses `sinfo -h -o '%P|%D|%c|%G|%T'` (one line per partition and node state); the GRES
/// count is that of `gres` (`gpu:8`, `gpu:h100:8(S:0-1)`).
pub(crate) fn parse_sinfo(text: &str, gres: &str) -> Vec<PartitionInfo> {
    let mut parts: Vec<PartitionInfo> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.trim().split('|').collect();
        let [name, nodes, cpus, g, state] = f.as_slice() else {
            continue;
        };
        let name = name.trim_end_matches('*').to_owned();
        let nodes: u32 = nodes.trim().parse().unwrap_or(0);
        let cpus: u32 = cpus.trim().trim_end_matches('+').parse().unwrap_or(0);
        let count = g
            .split(',')
            .filter_map(|item| {
                let item = item.split('(').next().unwrap_or("");
                let mut it = item.split(':');
                (it.next() == Some(gres))
                    .then(|| it.next_back().and_then(|n| n.parse::<u32>().ok()))?
            })
            .sum::<u32>();
        match parts.iter_mut().find(|p| p.name == name) {
            Some(p) => {
                p.nodes = p.nodes.saturating_add(nodes);
                p.cpus_per_node = p.cpus_per_node.max(cpus);
                p.gres_per_node = p.gres_per_node.max(count);
                p.states.push_str(&format!(", {nodes} {state}"));
            }
            None => parts.push(PartitionInfo {
                name,
                nodes,
                cpus_per_node: cpus,
                gres_per_node: count,
                states: format!("{nodes} {state}"),
            }),
        }
    }
    parts
}

fn sinfo(gres: &str) -> Result<Vec<PartitionInfo>, String> {
    slurm(
        "sinfo",
        &["-h".into(), "-o".into(), "%P|%D|%c|%G|%T".into()],
    )
    .map(|t| parse_sinfo(&t, gres))
}

fn summary(parts: &[PartitionInfo], gres: &str) -> String {
    parts
        .iter()
        .map(|p| {
            format!(
                "{}: {} nodes × {} cpus, {gres}:{} ({})",
                p.name, p.nodes, p.cpus_per_node, p.gres_per_node, p.states
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A job's state and reason, as `squeue` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobState {
    pub(crate) state: String,
    pub(crate) reason: String,
}

/// Parses `squeue -h -o '%i|%T|%r'`.
pub(crate) fn parse_squeue(text: &str) -> BTreeMap<u32, JobState> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.trim().splitn(3, '|');
            let id = f.next()?.trim().parse().ok()?;
            let state = f.next()?.trim().to_owned();
            let reason = f.next().unwrap_or("").trim().to_owned();
            Some((id, JobState { state, reason }))
        })
        .collect()
}

#[derive(Debug, Default)]
struct Queue {
    read: Option<Instant>,
    jobs: BTreeMap<u32, JobState>,
}

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
    /// [`LOST_AFTER`] of this server's own time is lost (no node's clock is trusted).
    beats: Mutex<BTreeMap<(PathBuf, u32), (String, Instant)>>,
}

/// How long a started node may go without saying it is well before the run takes it for
/// lost: 60 s, twelve of its heartbeats (`supervisor::HEARTBEAT`). The run then ends within
/// this and a tick of the scheduler (docs/slurm.md, "A node lost").
pub(crate) const LOST_AFTER: Duration = Duration::from_secs(60);
/// How long after a decision's kill the nodes' ends are waited for before the run's end is
/// gathered without those that never came (a node that is gone writes none).
const ENDS_AFTER_KILL: Duration = Duration::from_secs(15);
/// A node's heartbeat file, in its directory.
const HEARTBEAT_FILE: &str = "alive";
/// When the job started running (ms since the epoch), written by the batch script.
pub(crate) const STARTED_FILE: &str = "started";

impl SlurmExecutor {
    /// Asks the cluster what it offers; the executor and the inventory the server schedules
    /// against (each SKU's GPUs over its partition, the largest partition's cores).
    pub(crate) fn open(
        config: SlurmConfig,
        supervisor: &SupervisorCommand,
        home: &Path,
    ) -> Result<(SlurmExecutor, Inventory), String> {
        let parts = sinfo(&config.gres).map_err(|e| format!("Slurm does not answer: {e}"))?;
        let mut gpus = Vec::new();
        let mut host_cores = 0;
        for (sku, partition) in &config.partitions {
            let Some(p) = parts.iter().find(|p| &p.name == partition) else {
                let seen: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
                return Err(format!(
                    "slurm.toml puts `{sku}` on the partition `{partition}`, which this cluster does not have; sinfo shows {}",
                    seen.join(", ")
                ));
            };
            host_cores = host_cores.max(p.nodes.saturating_mul(p.cpus_per_node));
            let price = rules::sku(sku).ok_or_else(|| format!("`{sku}` is not a SKU"))?;
            if price.gpu {
                let total = p
                    .nodes
                    .saturating_mul(p.gres_per_node.min(config.gpus_per_node))
                    .min(1024 * 64);
                if total == 0 {
                    return Err(format!(
                        "the partition `{partition}` (for `{sku}`) has no `{}` GRES",
                        config.gres
                    ));
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
    fn job_state(&self, job: u32) -> Result<Option<JobState>, String> {
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

    fn prepare_nodes(&self, launch: &Launch<'_>, shape: &Shape) -> Result<(), String> {
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        let dir = launch.run_dir;
        let spec: RunSpec = fs::read(dir.join("spec.json"))
            .map_err(|e| io("spec.json", e))
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("spec.json: {e}")))?;
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
    fn start(&self, launch: &Launch<'_>) -> Result<Handle, String> {
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
        self.prepare_nodes(launch, &shape)?;
        let dir = launch.run_dir;
        // The nodes' supervisors are started by Slurm, not by us: no pipe reaches them, so
        // the secrets cross in a file only the server's user reads (mode 0600), deleted when
        // the run's end is gathered. docs/slurm.md says so.
        supervisor::write_json_atomic(&dir.join(SECRETS_FILE), &launch.secrets)
            .map_err(|e| format!("{SECRETS_FILE}: {e}"))?;
        let job_file = dir.join("slurm.json");
        supervisor::write_json_atomic(
            &job_file,
            &JobFile {
                nodes: shape.nodes,
                job: None,
            },
        )
        .map_err(|e| format!("slurm.json: {e}"))?;
        let supervise: Vec<String> = self.supervise.iter().map(|a| quote(a)).collect();
        let script = BATCH_TEMPLATE
            .replace("@RUN_DIR@", &quote(&dir.display().to_string()))
            .replace("@SUPERVISE@", &supervise.join(" "));
        let script_path = dir.join("slurm.sh");
        fs::write(&script_path, script).map_err(|e| format!("slurm.sh: {e}"))?;
        let mut args = resource_args(&self.config, &shape);
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
        let out = slurm("sbatch", &args)?;
        let job: u32 = out
            .trim()
            .split(';')
            .next()
            .and_then(|j| j.parse().ok())
            .ok_or_else(|| format!("sbatch answered `{}`, not a job id", out.trim()))?;
        let _ = supervisor::write_json_atomic(
            &job_file,
            &JobFile {
                nodes: shape.nodes,
                job: Some(job),
            },
        );
        Ok(Handle { pid: job })
    }

    fn stop(&self, run_dir: &Path, handle: Option<&Handle>) -> std::io::Result<()> {
        // No handle: the server was killed between `sbatch` and recording the job; the job
        // file written before `sbatch` returned names it, when it got that far.
        let Some(job) = handle.map(|h| h.pid).or_else(|| recorded_job(run_dir)) else {
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
            let org = fs::read_to_string(run_dir.join(crate::org::STOP_FILE))
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
        let Some(job) = handle.map(|h| h.pid).or_else(|| recorded_job(run_dir)) else {
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
        let job = handle?.pid;
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
        let now = Instant::now();
        for k in 0..job.nodes {
            let node = run_dir.join("nodes").join(k.to_string());
            if node.join("end.json").exists() {
                continue;
            }
            // Not a word yet (its task not started, or its supervisor not yet up): waited for
            // as long as one that stopped saying it is well.
            let said = fs::read_to_string(node.join(HEARTBEAT_FILE)).unwrap_or_default();
            let key = (run_dir.to_path_buf(), k);
            let seen = match beats.get(&key) {
                Some((last, at)) if *last == said => *at,
                _ => {
                    beats.insert(key, (said.clone(), now));
                    now
                }
            };
            let quiet = now.saturating_duration_since(seen);
            if quiet >= LOST_AFTER {
                let host = fs::read_to_string(node.join("node.env"))
                    .map(|t| parse_node_env(&t).host)
                    .unwrap_or_default();
                let named = if host.is_empty() {
                    format!("node {k}")
                } else {
                    format!("node {k} ({host})")
                };
                let what = if said.is_empty() {
                    "never said it was running"
                } else {
                    "stopped reporting"
                };
                return Some(format!(
                    "{named} was lost: its supervisor {what} for {} s (Slurm job {})",
                    quiet.as_secs(),
                    job.job.map_or_else(|| "?".to_owned(), |j| j.to_string())
                ));
            }
        }
        None
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

    fn check(&self, placement: &Placement<'_>) -> Result<(), String> {
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
            format!(
                "the Slurm cluster can never place this run ({} node(s) × {} GPU(s), {} cores and {} GiB a node, partition {}): {e}{memory_why}",
                shape.nodes,
                shape.gpus_per_node,
                shape.cpus_per_node,
                shape.memory_gib_per_node,
                shape.partition
            )
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
/// What Slurm last said of an ended job, kept in the run directory for its end.
const JOB_STATE_FILE: &str = "slurm.state";

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

/// What the batch script wrote for one node: `nodes/K/node.env`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeEnv {
    pub(crate) rank: u32,
    pub(crate) nodes: u32,
    pub(crate) addrs: Vec<String>,
    pub(crate) hosts: Vec<String>,
    pub(crate) cuda: Option<String>,
    pub(crate) job: String,
    pub(crate) host: String,
    /// Where the node's slurmd keeps its pid, as Slurm's configuration says.
    pub(crate) slurmd_pid_file: Option<String>,
}

pub(crate) fn parse_node_env(text: &str) -> NodeEnv {
    let mut env = NodeEnv::default();
    let list = |v: &str| -> Vec<String> {
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        match k {
            "rank" => env.rank = v.parse().unwrap_or(0),
            "nodes" => env.nodes = v.parse().unwrap_or(1),
            "addrs" => env.addrs = list(v),
            "hosts" => env.hosts = list(v),
            "cuda" => env.cuda = Some(v.to_owned()).filter(|v| !v.is_empty()),
            "job" => env.job = v.to_owned(),
            "host" => env.host = v.to_owned(),
            "slurmd_pid_file" => env.slurmd_pid_file = Some(v.to_owned()).filter(|v| !v.is_empty()),
            _ => {}
        }
    }
    env
}

/// The environment a node's run gets (docs/slurm.md names each): div's own names, and
/// SkyPilot's, dstack's and torchrun's.
pub(crate) fn node_vars(node: &NodeEnv) -> Vec<(String, String)> {
    let rank = node.rank.to_string();
    let count = node.nodes.max(1).to_string();
    let master = node
        .addrs
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".to_owned());
    let ips_lines = node.addrs.join("\n");
    let gpus_per_node = node
        .cuda
        .as_deref()
        .map_or(0, |c| c.split(',').filter(|s| !s.is_empty()).count());
    let world = (node.nodes.max(1) as usize * gpus_per_node.max(1)).to_string();
    let mut vars: Vec<(&str, String)> = vec![
        ("DIVERGENT_NODE_RANK", rank.clone()),
        ("DIVERGENT_NUM_NODES", count.clone()),
        ("DIVERGENT_NODE_IPS", ips_lines.clone()),
        ("DIVERGENT_MASTER_ADDR", master.clone()),
        ("DIVERGENT_GPUS_PER_NODE", gpus_per_node.to_string()),
        ("SKYPILOT_NODE_RANK", rank.clone()),
        ("SKYPILOT_NUM_NODES", count.clone()),
        ("SKYPILOT_NODE_IPS", ips_lines.clone()),
        ("SKYPILOT_NUM_GPUS_PER_NODE", gpus_per_node.to_string()),
        ("DSTACK_NODE_RANK", rank.clone()),
        ("DSTACK_NODES_NUM", count.clone()),
        ("DSTACK_NODES_IPS", ips_lines),
        ("DSTACK_MASTER_NODE_IP", master.clone()),
        ("DSTACK_GPUS_PER_NODE", gpus_per_node.to_string()),
        ("MASTER_ADDR", master),
        ("MASTER_PORT", master_port(&node.job).to_string()),
        ("NODE_RANK", rank),
        ("NNODES", count),
        ("WORLD_SIZE", world),
    ];
    if let Some(cuda) = &node.cuda {
        vars.push(("CUDA_VISIBLE_DEVICES", cuda.clone()));
    }
    vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The GPU device nodes of this machine, bound into a node's sandbox (the server, on a login
/// node, may have none).
fn node_devices() -> Vec<String> {
    let mut devices: Vec<String> = fs::read_dir("/dev")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|n| n.starts_with("nvidia") || n == "dri")
                .map(|n| format!("/dev/{n}"))
                .collect()
        })
        .unwrap_or_default();
    devices.sort();
    devices
}

/// The node's spec: its rank and addresses in the environment, its GPUs bound, its spend
/// metered from when the job started (the same moment on every node, never from when it was
/// queued), its limits the control plane's to decide, its heartbeat.
fn node_spec(mut spec: RunSpec, node: &NodeEnv, node_dir: &Path) -> RunSpec {
    spec.env.retain(|(k, _)| k != "CUDA_VISIBLE_DEVICES");
    spec.env.extend(node_vars(node));
    let run_dir = node_dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(node_dir)
        .to_path_buf();
    spec.started_ms = started_ms(&run_dir).unwrap_or_else(now_ms);
    spec.node = Some(supervisor::NodeDuties {
        heartbeat: node_dir.join(HEARTBEAT_FILE),
        slurmd_pid_file: node.slurmd_pid_file.as_deref().map(PathBuf::from),
        run_dir,
    });
    spec.first_lines.insert(
        0,
        format!(
            "div: Slurm job {}, node {} of {} ({})",
            node.job,
            node.rank,
            node.nodes.max(1),
            node.host
        ),
    );
    if spec
        .argv
        .first()
        .is_some_and(|p| Path::new(p).file_name().is_some_and(|n| n == "bwrap"))
        && node.cuda.is_some()
    {
        let mut argv = Vec::with_capacity(spec.argv.len() + 8);
        let mut i = 0;
        while i < spec.argv.len() {
            let a = &spec.argv[i];
            if a == "--dev-bind" && i + 2 < spec.argv.len() {
                i += 3;
                continue;
            }
            argv.push(a.clone());
            if a == "--dev" && spec.argv.get(i + 1).is_some_and(|d| d == "/dev") {
                argv.push("/dev".to_owned());
                i += 1;
                for d in node_devices() {
                    argv.extend(["--dev-bind".to_owned(), d.clone(), d]);
                }
            }
            i += 1;
        }
        spec.argv = argv;
    }
    spec
}

/// The last `n` non-empty lines of a file (of its last 64 KiB), as they are.
fn last_lines_raw(path: &Path, n: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 << 10)));
    let mut bytes = Vec::new();
    let _ = file.take(64 << 10).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<String> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .map(|l| l.chars().take(300).collect())
        .collect();
    lines.reverse();
    lines
}

/// The last few non-empty lines of a log, joined, at most 300 characters.
fn last_lines(log: &Path, n: usize) -> String {
    let text = fs::read(log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let mut lines: Vec<&str> = text
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(n)
        .collect();
    lines.reverse();
    let joined = lines.join(" | ");
    let mut cut: String = joined.chars().rev().take(300).collect();
    cut = cut.chars().rev().collect();
    cut
}

/// The run's end from its nodes' ends: a node that failed fails the run (the lowest such
/// rank, with its exit code and last lines); else a ceiling hit, else a stop, else success.
/// Spend is the most any node metered (each is held to the ceiling).
///
/// Under the control plane's `decided` end (a stop, the ceiling, the time limit, a lost node)
/// the run ends as decided, whatever each node said, but for a node that failed on its own
/// before the decision; a node that never wrote its end (gone with its machine) does not
/// change it either.
pub(crate) fn gather_ends(
    ends: &[(u32, Option<EndRecord>, String)],
    fallback: &str,
    decided: Option<&Decision>,
) -> EndRecord {
    let now = now_ms();
    let known: Vec<&EndRecord> = ends.iter().filter_map(|(_, e, _)| e.as_ref()).collect();
    let started = known.iter().map(|e| e.started_ms).min().unwrap_or(now);
    let ended = known.iter().map(|e| e.ended_ms).max().unwrap_or(now);
    let spent = known.iter().map(|e| e.spent_cents).max().unwrap_or(0);
    let duration = known.iter().map(|e| e.duration_seconds).max().unwrap_or(0);
    let multi = ends.len() > 1;
    let verdicts = ends
        .first()
        .and_then(|(_, e, _)| e.as_ref())
        .map(|e| e.verdicts.clone())
        .unwrap_or_default();
    let base = EndRecord {
        status: RunStatus::Succeeded,
        exit_code: Some(0),
        reason: None,
        started_ms: started,
        ended_ms: ended,
        duration_seconds: duration,
        spent_cents: spent,
        verdicts,
    };
    // The node that failed first is the cause: srun stops the others, which then fail too,
    // and one it killed before its supervisor wrote an end has none. So the nodes that wrote
    // an end come first, in the order they ended, and those without one only after.
    let mut order: Vec<&(u32, Option<EndRecord>, String)> = ends.iter().collect();
    order.sort_by_key(|(rank, end, _)| {
        (end.is_none(), end.as_ref().map_or(0, |e| e.ended_ms), *rank)
    });
    for (rank, end, tail) in order {
        match end {
            None if decided.is_some() => {}
            None => {
                return EndRecord {
                    status: RunStatus::Failed,
                    exit_code: None,
                    reason: Some(format!(
                        "node {rank} ended without writing its end ({fallback}){}",
                        if tail.is_empty() {
                            String::new()
                        } else {
                            format!(": {tail}")
                        }
                    )),
                    ..base
                };
            }
            Some(e)
                if e.status == RunStatus::Failed
                    && decided.is_none_or(|d| e.ended_ms < d.decided_ms) =>
            {
                let reason = if multi {
                    Some(format!(
                        "node {rank} failed{}: {}",
                        e.exit_code
                            .map(|c| format!(" with exit code {c}"))
                            .unwrap_or_default(),
                        if tail.is_empty() {
                            e.reason.clone().unwrap_or_default()
                        } else {
                            tail.clone()
                        }
                    ))
                } else {
                    e.reason.clone()
                };
                return EndRecord {
                    status: RunStatus::Failed,
                    exit_code: e.exit_code,
                    reason,
                    ..base
                };
            }
            Some(_) => {}
        }
    }
    if let Some(d) = decided {
        let (status, reason) = d.status();
        return EndRecord {
            status,
            exit_code: None,
            reason,
            ..base
        };
    }
    for status in [RunStatus::HitCeiling, RunStatus::Canceled] {
        if let Some(e) = known.iter().find(|e| e.status == status) {
            return EndRecord {
                status,
                exit_code: e.exit_code,
                reason: e.reason.clone(),
                ..base
            };
        }
    }
    base
}

/// The supervisor program's Slurm duties, before its own: on `RUN_DIR` holding `slurm.json`
/// it gathers the nodes' ends and returns its exit code; on a node directory holding
/// `node.env` it merges that into the node's spec, supervises, and exits non-zero when the
/// node's run did not succeed (so that srun stops the other nodes). `None`: not Slurm's.
pub(crate) fn node_or_gather(dir: &Path) -> Option<i32> {
    if let Ok(bytes) = fs::read(dir.join("slurm.json")) {
        let job: JobFile = serde_json::from_slice(&bytes).ok()?;
        // Gathered once: the server gathers as soon as every node has ended, and the batch
        // script, after srun, then finds it done. The two never gather at the same time.
        let _gathering = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("gather.lock"))
            .and_then(|f| f.lock().map(|()| f));
        if dir.join("end.json").exists() {
            return Some(0);
        }
        let srun = fs::read_to_string(dir.join("slurm.exit"))
            .map(|s| format!("srun exited {}", s.trim()))
            .unwrap_or_else(|_| "srun did not finish".to_owned());
        let ends: Vec<(u32, Option<EndRecord>, String)> = (0..job.nodes)
            .map(|k| {
                let node = dir.join("nodes").join(k.to_string());
                let end = fs::read(node.join("end.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok());
                (k, end, last_lines(&node.join("log"), 3))
            })
            .collect();
        let decided = decision::read(dir);
        let mut end = gather_ends(&ends, &srun, decided.as_ref());
        let _ = fs::remove_file(dir.join(SECRETS_FILE));
        if let Some(d) = &decided {
            // Billed as every node bills itself: from the job's start to the run's end, or to
            // the moment a node was found lost.
            if let (Some(spec), Some(started)) = (spec_of(dir), started_ms(dir)) {
                let until = d.spend_until_ms.unwrap_or(end.ended_ms).min(end.ended_ms);
                end.started_ms = started;
                end.duration_seconds = end.ended_ms.saturating_sub(started) / 1000;
                end.spent_cents = rules::charge(
                    spec.cents_per_hour,
                    until.saturating_sub(started) / 1000,
                    spec.max_spend_cents,
                );
            }
        } else if let Ok(state) = fs::read_to_string(dir.join(JOB_STATE_FILE))
            && state.trim() == "NODE_FAIL"
            && end.status != RunStatus::Succeeded
        {
            // Ended by Slurm for a failed node before div found the node lost itself.
            end.status = RunStatus::Failed;
            end.exit_code = None;
            end.reason = Some(format!(
                "Slurm ended job {} because one of its nodes failed (NODE_FAIL)",
                job.job.map_or_else(|| "?".to_owned(), |j| j.to_string())
            ));
        } else if dir.join("slurm.signaled").exists()
            && !matches!(end.status, RunStatus::Succeeded | RunStatus::HitCeiling)
        {
            // The batch shell was signalled (scancel, or Slurm's time limit): canceled, with
            // its spend, unless the run had already ended on its own terms.
            end.status = RunStatus::Canceled;
            end.exit_code = None;
            end.reason = Some("canceled in Slurm (scancel, or the job's time limit)".to_owned());
        }
        let node0 = dir.join("nodes").join("0");
        for kept in ["result.kept.json", "telemetry.kept.json"] {
            let _ = fs::copy(node0.join(kept), dir.join(kept));
        }
        if let Ok(mut log) = fs::OpenOptions::new().append(true).open(dir.join("log")) {
            let mut said = String::new();
            if (job.nodes > 1 || decided.as_ref().is_some_and(|d| d.why == Why::Lost))
                && end.status == RunStatus::Failed
                && let Some(reason) = &end.reason
            {
                said.push_str(&format!("div: {reason}\n"));
            }
            // What Slurm itself said of the job (a node failure, a cancel, srun's errors),
            // kept in the run's log where `div logs` shows it.
            if end.status != RunStatus::Succeeded {
                let slurm_out = last_lines_raw(&dir.join("slurm.out"), 20);
                if !slurm_out.is_empty() {
                    said.push_str(&format!(
                        "div: Slurm's own output for job {} (slurm.out):\n",
                        job.job.map_or_else(|| "?".to_owned(), |j| j.to_string())
                    ));
                    for line in slurm_out {
                        said.push_str(&format!("  {line}\n"));
                    }
                }
            }
            let _ = std::io::Write::write_all(&mut log, said.as_bytes());
        }
        return Some(
            match supervisor::write_json_atomic(&dir.join("end.json"), &end) {
                Ok(()) => 0,
                Err(_) => 1,
            },
        );
    }
    let text = fs::read_to_string(dir.join("node.env")).ok()?;
    let node = parse_node_env(&text);
    let spec: RunSpec = fs::read(dir.join("spec.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())?;
    let _ = supervisor::write_json_atomic(&dir.join("spec.json"), &node_spec(spec, &node, dir));
    let code = supervisor::supervise(dir);
    // A node that succeeded, or ended as the control plane decided for the whole run, lets
    // the others be (srun ends them all when one exits non-zero).
    let decided = dir
        .parent()
        .and_then(Path::parent)
        .is_some_and(|run_dir| decision::read(run_dir).is_some());
    let ok = decided
        || fs::read(dir.join("end.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<EndRecord>(&b).ok())
            .is_some_and(|e| e.status == RunStatus::Succeeded);
    Some(if code != 0 {
        code
    } else if ok {
        0
    } else {
        1
    })
}

/// Whether every node of the run wrote its end (`nodes/K/end.json`).
fn all_nodes_ended(run_dir: &Path) -> bool {
    fs::read(run_dir.join("slurm.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<JobFile>(&b).ok())
        .is_some_and(|job| {
            job.nodes > 0
                && (0..job.nodes).all(|k| {
                    run_dir
                        .join("nodes")
                        .join(k.to_string())
                        .join("end.json")
                        .exists()
                })
        })
}

/// Whether the job's batch script has run: rank 0 wrote its `node.env`, or srun's exit
/// is recorded.
fn node_started(run_dir: &Path) -> bool {
    run_dir.join("slurm.exit").exists() || run_dir.join("nodes").join("0").join("node.env").exists()
}

/// When the run's job started running, as its batch script wrote it.
fn started_ms(run_dir: &Path) -> Option<u64> {
    fs::read_to_string(run_dir.join(STARTED_FILE))
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// The supervisor's spec the launcher wrote in `run_dir`.
fn spec_of(run_dir: &Path) -> Option<RunSpec> {
    fs::read(run_dir.join("spec.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// The job id `RUN_DIR/slurm.json` names, once `sbatch` answered with one.
fn recorded_job(run_dir: &Path) -> Option<u32> {
    fs::read(run_dir.join("slurm.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<JobFile>(&b).ok())
        .and_then(|j| j.job)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SlurmConfig {
        SlurmConfig {
            shared_dir: PathBuf::from("/shared"),
            gres: "gpu".to_owned(),
            gpus_per_node: 8,
            grace_seconds: 10,
            div: None,
            partitions: BTreeMap::from([("h100".to_owned(), "gpu".to_owned())]),
            prices: BTreeMap::new(),
        }
    }

    fn place(gpus: u32, cores: u32, memory_gib: u32) -> Result<Shape, String> {
        shape(
            &config(),
            &Placement {
                sku: "h100",
                gpus,
                cores,
                memory_gib,
            },
        )
    }

    #[test]
    fn up_to_a_node_is_one_node_and_past_it_whole_nodes() {
        let one = place(3, 3, 24).expect("fits");
        assert_eq!((one.nodes, one.gpus_per_node, one.cpus_per_node), (1, 3, 3));
        let four = place(32, 32, 256).expect("fits");
        assert_eq!(
            (
                four.nodes,
                four.gpus_per_node,
                four.cpus_per_node,
                four.memory_gib_per_node
            ),
            (4, 8, 8, 64)
        );
        assert_eq!(
            resource_args(&config(), &four),
            [
                "--partition=gpu",
                "--nodes=4",
                "--ntasks-per-node=1",
                "--cpus-per-task=8",
                "--mem=64G",
                "--gres=gpu:8"
            ]
        );
        // Cores and memory split evenly, rounded up.
        let odd = place(16, 17, 129).expect("fits");
        assert_eq!((odd.cpus_per_node, odd.memory_gib_per_node), (9, 65));
        let e = place(12, 12, 96).expect_err("not whole nodes");
        assert!(e.contains("ask for `--gpus 8` or `--gpus 16`"), "{e}");
        let e = shape(
            &config(),
            &Placement {
                sku: "h200",
                gpus: 1,
                cores: 1,
                memory_gib: 8,
            },
        )
        .expect_err("no partition");
        assert!(
            e.contains("no partition for `h200`") && e.contains("it takes h100"),
            "{e}"
        );
    }

    #[test]
    fn the_time_limit_is_what_the_ceiling_buys_capped_at_a_day_plus_a_minute() {
        // $0.01 at $4.95/h buys 7.3 s: one minute, plus the margin.
        assert_eq!(time_minutes(495, Some(1), 86_400), 2);
        // $15 at $158.40/h buys 341 s: 6 minutes, plus the margin.
        assert_eq!(time_minutes(15_840, Some(1_500), 86_400), 7);
        // No ceiling, or one past a day: the day.
        assert_eq!(time_minutes(495, None, 86_400), 1_441);
        assert_eq!(time_minutes(495, Some(1_000_000), 86_400), 1_441);
    }

    #[test]
    fn sinfo_and_squeue_are_read_by_their_fields() {
        let parts = parse_sinfo(
            "gpu*|3|16|gpu:8|idle\ngpu*|1|16|gpu:h100:8(S:0-1),shard:4|mixed\ncpu|2|64|(null)|idle\n",
            "gpu",
        );
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (
                parts[0].name.as_str(),
                parts[0].nodes,
                parts[0].gres_per_node
            ),
            ("gpu", 4, 8)
        );
        assert_eq!(parts[0].states, "3 idle, 1 mixed");
        assert_eq!((parts[1].nodes, parts[1].gres_per_node), (2, 0));
        let jobs = parse_squeue("12|PENDING|Resources\n13|RUNNING|None\nnot a job\n");
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[&12].reason, "Resources");
        assert_eq!(jobs[&13].state, "RUNNING");
    }

    #[test]
    fn a_node_gets_its_rank_and_the_addresses_under_every_anchor_name() {
        let node = parse_node_env(
            "rank=2\nnodes=4\naddrs=10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4\nhosts=a,b,c,d\ncuda=0,1,2,3,4,5,6,7\njob=2077\nhost=c\n",
        );
        let vars: BTreeMap<String, String> = node_vars(&node).into_iter().collect();
        for (k, v) in [
            ("DIVERGENT_NODE_RANK", "2"),
            ("SKYPILOT_NODE_RANK", "2"),
            ("DSTACK_NODE_RANK", "2"),
            ("NODE_RANK", "2"),
            ("SKYPILOT_NUM_NODES", "4"),
            ("DSTACK_NODES_NUM", "4"),
            ("NNODES", "4"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("DSTACK_MASTER_NODE_IP", "10.0.0.1"),
            ("MASTER_PORT", "29577"),
            ("WORLD_SIZE", "32"),
            (
                "SKYPILOT_NODE_IPS",
                "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4",
            ),
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"),
        ] {
            assert_eq!(vars.get(k).map(String::as_str), Some(v), "{k}");
        }
    }

    fn end(status: RunStatus, code: Option<i32>, ended_ms: u64, spent: i64) -> EndRecord {
        EndRecord {
            status,
            exit_code: code,
            reason: None,
            started_ms: 1_000,
            ended_ms,
            duration_seconds: (ended_ms - 1_000) / 1000,
            spent_cents: spent,
            verdicts: Vec::new(),
        }
    }

    #[test]
    fn a_run_slurm_killed_before_any_node_wrote_its_end_is_gathered_canceled() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        std::fs::write(run.join("slurm.json"), r#"{"nodes": 1, "job": 9}"#).unwrap();
        std::fs::create_dir_all(run.join("nodes/0")).unwrap();
        std::fs::write(run.join("nodes/0/node.env"), "rank=0\n").unwrap();
        std::fs::write(run.join("slurm.signaled"), "").unwrap();
        assert!(!super::all_nodes_ended(run));
        assert_eq!(super::node_or_gather(run), Some(0));
        let end: EndRecord =
            serde_json::from_slice(&std::fs::read(run.join("end.json")).unwrap()).unwrap();
        assert_eq!(end.status, RunStatus::Canceled);
        assert_eq!(end.exit_code, None);
        assert_eq!(
            end.reason.as_deref(),
            Some("canceled in Slurm (scancel, or the job's time limit)")
        );
    }

    #[test]
    fn a_run_whose_nodes_all_ended_is_gathered_once_whoever_gathers_first() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        std::fs::write(run.join("slurm.json"), r#"{"nodes": 2, "job": 7}"#).unwrap();
        std::fs::write(run.join("log"), "").unwrap();
        for k in 0..2 {
            std::fs::create_dir_all(run.join("nodes").join(k.to_string())).unwrap();
        }
        let write_end = |k: u32, e: &EndRecord| {
            let path = run.join("nodes").join(k.to_string()).join("end.json");
            std::fs::write(path, serde_json::to_vec(e).unwrap()).unwrap();
        };
        // Node 1 failed; node 0 still runs: not over yet.
        write_end(1, &end(RunStatus::Failed, Some(3), 5_000, 2));
        assert!(!super::all_nodes_ended(run));
        write_end(0, &end(RunStatus::Canceled, None, 6_000, 3));
        assert!(super::all_nodes_ended(run));
        // The server gathers first (srun has not exited: no slurm.exit).
        assert_eq!(super::node_or_gather(run), Some(0));
        let gathered: EndRecord =
            serde_json::from_slice(&std::fs::read(run.join("end.json")).unwrap()).unwrap();
        assert_eq!(gathered.status, RunStatus::Failed);
        assert_eq!(gathered.exit_code, Some(3));
        let log = std::fs::read_to_string(run.join("log")).unwrap();
        assert!(log.contains("div: node 1 failed with exit code 3"), "{log}");
        // The batch script's gather, after srun, finds it done: nothing written again.
        std::fs::write(run.join("slurm.exit"), "1\n").unwrap();
        std::fs::write(run.join("slurm.signaled"), "").unwrap();
        assert_eq!(super::node_or_gather(run), Some(0));
        let again: EndRecord =
            serde_json::from_slice(&std::fs::read(run.join("end.json")).unwrap()).unwrap();
        assert_eq!(
            (again.status, again.exit_code, again.reason),
            (gathered.status, gathered.exit_code, gathered.reason)
        );
        assert_eq!(std::fs::read_to_string(run.join("log")).unwrap(), log);
        // A run with no job file is never taken for ended.
        assert!(!super::all_nodes_ended(dir.path().join("nodes").as_path()));
    }

    #[test]
    fn the_first_node_to_fail_is_the_runs_cause() {
        let ends = vec![
            (
                0,
                Some(end(RunStatus::Failed, Some(143), 9_000, 5)),
                "Terminated".to_owned(),
            ),
            (
                1,
                Some(end(RunStatus::Failed, Some(7), 8_000, 4)),
                "boom".to_owned(),
            ),
            (
                2,
                Some(end(RunStatus::Succeeded, Some(0), 9_500, 6)),
                String::new(),
            ),
        ];
        let e = gather_ends(&ends, "srun exited 1", None);
        assert_eq!(e.status, RunStatus::Failed);
        assert_eq!(e.exit_code, Some(7));
        assert_eq!(
            e.reason.as_deref(),
            Some("node 1 failed with exit code 7: boom")
        );
        assert_eq!((e.spent_cents, e.ended_ms), (6, 9_500));
    }

    /// srun stops the other nodes when one fails; one killed before its supervisor wrote its
    /// end (seen once in the suite under load: `srun exited 143`) is not the cause.
    #[test]
    fn a_node_that_failed_is_the_cause_over_one_srun_killed_before_its_end() {
        let ends = vec![
            (0, None, String::new()),
            (
                1,
                Some(end(RunStatus::Failed, Some(7), 8_000, 4)),
                "boom".to_owned(),
            ),
        ];
        let e = gather_ends(&ends, "srun exited 143", None);
        assert_eq!(e.status, RunStatus::Failed);
        assert_eq!(e.exit_code, Some(7));
        assert_eq!(
            e.reason.as_deref(),
            Some("node 1 failed with exit code 7: boom")
        );
    }

    /// Under the control plane's decision the run ends as decided: a node that another's
    /// end killed (failed, after the decision) or one that is gone (no end) does not change
    /// it; a node that failed on its own before the decision still fails the run.
    #[test]
    fn a_decided_end_holds_over_the_nodes_it_ended_but_not_over_a_failure_before_it() {
        let decided = Decision {
            why: Why::Ceiling,
            reason: None,
            line: "div: ceiling".to_owned(),
            decided_ms: 5_000,
            kill_at_ms: 7_000,
            spend_until_ms: None,
        };
        let ends = vec![
            (
                0,
                Some(end(RunStatus::HitCeiling, None, 6_000, 3)),
                String::new(),
            ),
            (
                1,
                Some(end(RunStatus::Failed, Some(143), 6_500, 3)),
                "Terminated".to_owned(),
            ),
            (2, None, String::new()),
        ];
        let e = gather_ends(&ends, "srun exited 143", Some(&decided));
        assert_eq!((e.status, e.exit_code), (RunStatus::HitCeiling, None));
        let mut before = ends.clone();
        before[1].1 = Some(end(RunStatus::Failed, Some(3), 4_000, 2));
        let e = gather_ends(&before, "srun exited 1", Some(&decided));
        assert_eq!((e.status, e.exit_code), (RunStatus::Failed, Some(3)));
        let lost = Decision {
            why: Why::Lost,
            reason: Some(
                "node 2 (n3) was lost: its supervisor stopped reporting for 60 s".to_owned(),
            ),
            ..decided
        };
        let e = gather_ends(&ends, "srun did not finish", Some(&lost));
        assert_eq!(e.status, RunStatus::Failed);
        assert_eq!(e.reason, lost.reason);
    }

    #[test]
    fn a_node_without_an_end_fails_the_run_and_all_well_is_success() {
        let ends = vec![
            (
                0,
                Some(end(RunStatus::Succeeded, Some(0), 2_000, 1)),
                String::new(),
            ),
            (1, None, String::new()),
        ];
        let e = gather_ends(&ends, "srun exited 1", None);
        assert_eq!(e.status, RunStatus::Failed);
        assert_eq!(
            e.reason.as_deref(),
            Some("node 1 ended without writing its end (srun exited 1)")
        );
        let ok = vec![
            (
                0,
                Some(end(RunStatus::Succeeded, Some(0), 2_000, 1)),
                String::new(),
            ),
            (
                1,
                Some(end(RunStatus::Succeeded, Some(0), 2_100, 1)),
                String::new(),
            ),
        ];
        assert_eq!(gather_ends(&ok, "", None).status, RunStatus::Succeeded);
        let cap = vec![
            (
                0,
                Some(end(RunStatus::HitCeiling, None, 2_000, 3)),
                String::new(),
            ),
            (
                1,
                Some(end(RunStatus::Canceled, None, 2_100, 3)),
                String::new(),
            ),
        ];
        assert_eq!(gather_ends(&cap, "", None).status, RunStatus::HitCeiling);
    }

    #[test]
    fn a_node_spec_binds_the_nodes_own_gpus_and_meters_from_its_start() {
        let spec = RunSpec {
            run_id: "r_x-n0".to_owned(),
            run_name: "x".to_owned(),
            argv: [
                "bwrap",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--dev-bind",
                "/dev/nvidia9",
                "/dev/nvidia9",
                "--chdir",
                "/",
                "sh",
                "-lc",
                "true",
            ]
            .map(str::to_owned)
            .to_vec(),
            cwd: PathBuf::from("/"),
            env: vec![("CUDA_VISIBLE_DEVICES".to_owned(), "5".to_owned())],
            secrets_at: None,
            secrets_file: None,
            first_lines: Vec::new(),
            cores: Vec::new(),
            memory_bytes: 1 << 30,
            cgroups: Default::default(),
            cents_per_hour: 495,
            max_spend_cents: None,
            max_seconds: 60,
            stop_grace_seconds: 0,
            started_ms: 0,
            checks: Vec::new(),
            result_path: PathBuf::from("/r"),
            telemetry_path: PathBuf::from("/t"),
            mnt_dir: None,
            volumes: Vec::new(),
            workspace: PathBuf::from("/w"),
            overlay: None,
            init: None,
            node: None,
            tasks: None,
            disk: None,
            python_shim: None,
        };
        let node = parse_node_env("rank=0\nnodes=1\naddrs=127.0.0.1\ncuda=0,1\njob=5\nhost=n1\n");
        let out = node_spec(spec, &node, Path::new("/runs/r_x/nodes/0"));
        assert!(out.started_ms > 0);
        assert!(
            !out.argv.iter().any(|a| a == "/dev/nvidia9"),
            "{:?}",
            out.argv
        );
        assert_eq!(out.argv.iter().filter(|a| *a == "/dev").count(), 1);
        let cuda: Vec<&String> = out
            .env
            .iter()
            .filter(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(cuda, ["0,1"]);
        assert_eq!(out.first_lines[0], "div: Slurm job 5, node 0 of 1 (n1)");
    }
}
