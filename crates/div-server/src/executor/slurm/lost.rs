//! Whether a started Slurm run has lost a node: each node's last word (its heartbeat file's
//! text, or its task's `node.env` as its first), and how long this server has seen it
//! unchanged. No node's clock is trusted: the times are this server's own.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::node::parse_node_env;
use super::run_dir::{HEARTBEAT_FILE, JobFile};

/// How long a started node may go without saying it is well before the run takes it for
/// lost: 60 s, twelve of its heartbeats (`supervisor::HEARTBEAT`). The run then ends within
/// this and a tick of the scheduler (docs/slurm.md, "A node lost").
pub(crate) const LOST_AFTER: Duration = Duration::from_secs(60);

/// How long a started job's node may go without its task begun (no `node.env` in its
/// directory yet: the batch script still asking Slurm for the nodes' addresses, or `srun`
/// still launching) before the run takes it for lost: 180 s. That part is Slurm's own, and on
/// a loaded cluster it took over 60 s for a job of four nodes; from the task's start, the
/// executor's `LOST_AFTER` applies.
pub(crate) const NOT_LAUNCHED_AFTER: Duration = Duration::from_secs(180);

/// The first node of a started run (`job`, in `run_dir`) that has not said a new word for
/// longer than it is allowed, as of `now`: [`NOT_LAUNCHED_AFTER`] while its task has not
/// begun (no `node.env`), [`LOST_AFTER`] from its task's start or its last word. `beats`
/// keeps each node's last word and when this server first saw it.
pub(super) fn lost_node(
    beats: &mut BTreeMap<(PathBuf, u32), (String, Instant)>,
    run_dir: &Path,
    job: &JobFile,
    now: Instant,
) -> Option<String> {
    for k in 0..job.nodes {
        let node = run_dir.join("nodes").join(k.to_string());
        if node.join("end.json").exists() {
            continue;
        }
        // Not a word yet: its task not begun (Slurm's part, given longer), or begun with
        // its supervisor not yet up (waited for as long as one that stopped saying it is
        // well, from the task's start: the task's `node.env` counts as its first word).
        let said = fs::read_to_string(node.join(HEARTBEAT_FILE)).unwrap_or_default();
        let launched = !said.is_empty() || node.join("node.env").exists();
        let word = if said.is_empty() && launched {
            "launched".to_owned()
        } else {
            said.clone()
        };
        let key = (run_dir.to_path_buf(), k);
        let seen = match beats.get(&key) {
            Some((last, at)) if *last == word => *at,
            _ => {
                beats.insert(key, (word, now));
                now
            }
        };
        let quiet = now.saturating_duration_since(seen);
        let allowed = if launched {
            LOST_AFTER
        } else {
            NOT_LAUNCHED_AFTER
        };
        if quiet >= allowed {
            let host = fs::read_to_string(node.join("node.env"))
                .map(|t| parse_node_env(&t).host)
                .unwrap_or_default();
            let named = if host.is_empty() {
                format!("node {k}")
            } else {
                format!("node {k} ({host})")
            };
            let what = if !launched {
                "Slurm never began its task"
            } else if said.is_empty() {
                "its supervisor never said it was running"
            } else {
                "its supervisor stopped reporting"
            };
            return Some(format!(
                "{named} was lost: {what} for {} s (Slurm job {})",
                quiet.as_secs(),
                job.job.map_or_else(|| "?".to_owned(), |j| j.to_string())
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: JobFile = JobFile {
        nodes: 2,
        job: Some(42),
    };

    #[test]
    fn a_node_whose_task_never_began_is_given_three_minutes_then_a_minute_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path();
        for k in 0..2 {
            fs::create_dir_all(run_dir.join("nodes").join(k.to_string())).unwrap();
        }
        // Node 0's task began and says it is well; node 1's has not begun.
        fs::write(run_dir.join("nodes/0/node.env"), "rank=0\nhost=n1\n").unwrap();
        fs::write(run_dir.join("nodes/0").join(HEARTBEAT_FILE), "1").unwrap();
        let mut beats = BTreeMap::new();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(lost_node(&mut beats, run_dir, &JOB, t0), None);
        // Past a minute, node 0 keeps saying new words; node 1 (not begun) is not lost yet.
        for s in [30, 60, 90, 120, 150] {
            fs::write(run_dir.join("nodes/0").join(HEARTBEAT_FILE), s.to_string()).unwrap();
            assert_eq!(
                lost_node(&mut beats, run_dir, &JOB, at(s)),
                None,
                "at {s} s"
            );
        }
        fs::write(run_dir.join("nodes/0").join(HEARTBEAT_FILE), "179").unwrap();
        assert_eq!(lost_node(&mut beats, run_dir, &JOB, at(179)), None);
        // At three minutes, it is lost, named for what never happened.
        assert_eq!(
            lost_node(&mut beats, run_dir, &JOB, at(180)).as_deref(),
            Some("node 1 was lost: Slurm never began its task for 180 s (Slurm job 42)")
        );
    }

    #[test]
    fn once_its_task_begins_a_node_has_a_minute_to_say_it_is_running_then_a_minute_a_word() {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path();
        let job = JobFile {
            nodes: 1,
            job: Some(7),
        };
        let node = run_dir.join("nodes/0");
        fs::create_dir_all(&node).unwrap();
        let mut beats = BTreeMap::new();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(lost_node(&mut beats, run_dir, &job, t0), None);
        // Its task begins at 100 s: from then, a minute (not what is left of three).
        fs::write(node.join("node.env"), "rank=0\nhost=n3\n").unwrap();
        assert_eq!(lost_node(&mut beats, run_dir, &job, at(100)), None);
        assert_eq!(lost_node(&mut beats, run_dir, &job, at(159)), None);
        assert_eq!(
            lost_node(&mut beats, run_dir, &job, at(160)).as_deref(),
            Some(
                "node 0 (n3) was lost: its supervisor never said it was running for 60 s (Slurm job 7)"
            )
        );
        // Its supervisor says it is well at 170 s, then goes quiet: a minute from that word.
        fs::write(node.join(HEARTBEAT_FILE), "1").unwrap();
        assert_eq!(lost_node(&mut beats, run_dir, &job, at(170)), None);
        assert_eq!(lost_node(&mut beats, run_dir, &job, at(229)), None);
        assert_eq!(
            lost_node(&mut beats, run_dir, &job, at(230)).as_deref(),
            Some("node 0 (n3) was lost: its supervisor stopped reporting for 60 s (Slurm job 7)")
        );
        // A node that wrote its end is never lost.
        fs::write(node.join("end.json"), "{}").unwrap();
        assert_eq!(lost_node(&mut beats, run_dir, &job, at(1000)), None);
    }
}
