//! A node's side: what the batch script wrote for it (`nodes/K/node.env`), the environment and
//! spec its supervisor runs with, and the gather of every node's end into the run's.

use std::fs;
use std::path::{Path, PathBuf};

use div_api::RunStatus;
use div_runtime::clock::now_ms;
use div_runtime::decision::{self, Decision, Why};
use div_runtime::supervisor::{self, EndRecord, RunSpec};

use super::run_dir::{HEARTBEAT_FILE, JOB_STATE_FILE, JobFile, SECRETS_FILE, spec_of, started_ms};
use crate::rules;

/// The first port torchrun's rendezvous is told (`MASTER_PORT`): 29500 (torchrun's own
/// default) plus the job id modulo 1000, so that jobs sharing a node do not collide.
pub(crate) const MASTER_PORT: u16 = 29500;

pub(super) fn master_port(job: &str) -> u16 {
    MASTER_PORT + job.parse::<u32>().map_or(0, |j| (j % 1000) as u16)
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
pub(super) fn node_devices() -> Vec<String> {
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
pub(super) fn node_spec(mut spec: RunSpec, node: &NodeEnv, node_dir: &Path) -> RunSpec {
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
pub(super) fn last_lines_raw(path: &Path, n: usize) -> Vec<String> {
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
pub(super) fn last_lines(log: &Path, n: usize) -> String {
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
        return Some(gather(dir, &job));
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

/// Gathers the nodes' ends of the run at `dir` into the run's end, once: its exit code.
fn gather(dir: &Path, job: &JobFile) -> i32 {
    // Gathered once: the server gathers as soon as every node has ended, and the batch
    // script, after srun, then finds it done. The two never gather at the same time.
    let _gathering = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("gather.lock"))
        .and_then(|f| f.lock().map(|()| f));
    if dir.join("end.json").exists() {
        return 0;
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
    settle(dir, job, decided.as_ref(), &mut end);
    let node0 = dir.join("nodes").join("0");
    for kept in ["result.kept.json", "telemetry.kept.json"] {
        let _ = fs::copy(node0.join(kept), dir.join(kept));
    }
    say_in_log(dir, job, decided.as_ref(), &end);
    match supervisor::write_json_atomic(&dir.join("end.json"), &end) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// What decides the gathered `end` beyond the nodes' own: the control plane's decision (billed
/// as every node bills itself), Slurm's word of a failed node, or the batch shell signalled.
fn settle(dir: &Path, job: &JobFile, decided: Option<&Decision>, end: &mut EndRecord) {
    if let Some(d) = decided {
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
        // The batch shell was signalled (scancel, or Slurm's time limit): canceled, with its
        // spend, unless the run had already ended on its own terms.
        end.status = RunStatus::Canceled;
        end.exit_code = None;
        end.reason = Some("canceled in Slurm (scancel, or the job's time limit)".to_owned());
    }
}

/// Appends to the run's log why a run of several nodes (or one with a node lost) failed, and
/// what Slurm itself said of a job that did not succeed (`div logs` shows it).
fn say_in_log(dir: &Path, job: &JobFile, decided: Option<&Decision>, end: &EndRecord) {
    let Ok(mut log) = fs::OpenOptions::new().append(true).open(dir.join("log")) else {
        return;
    };
    let mut said = String::new();
    if (job.nodes > 1 || decided.is_some_and(|d| d.why == Why::Lost))
        && end.status == RunStatus::Failed
        && let Some(reason) = &end.reason
    {
        said.push_str(&format!("div: {reason}\n"));
    }
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
