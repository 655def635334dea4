//! How a run is told to end: when a limit is near, what is said, and, for a run that runs on
//! several supervisors at once (a Slurm job's nodes), the one decision that ends it.
//!
//! A local run's supervisor decides its own ceiling and time limit (nothing it does depends on
//! the server). A Slurm run's nodes do not: each would meter from its own start, and the first
//! to end would decide how the others end. The control plane decides once, for the whole run
//! ([`decide`], written as `RUN_DIR/stop.json`, never overwritten), and every node's
//! supervisor reads it, tells its run at that moment and kills what is left at the same
//! [`Decision::kill_at_ms`] (docs/slurm.md, "Stops").

use std::fs;
use std::io;
use std::path::Path;

use div_api::RunStatus;
use serde::{Deserialize, Serialize};

use crate::rules;

/// The decision's file, in the run directory.
pub const FILE: &str = "stop.json";

/// Why a run is told to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// `div stop`, the dashboard's Stop.
    Canceled,
    /// Its `--max-spend`.
    Ceiling,
    /// 24 hours, or this machine's `max_run_seconds`.
    TimeLimit,
    /// The org's usage limit.
    Org,
    /// A part of it (a node) stopped reporting: the run cannot go on whole.
    Lost,
}

/// The one decision that ends a run of several supervisors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub why: Why,
    /// The run's reason, where its status has one (the time limit's, the org's, the lost
    /// node's).
    pub reason: Option<String>,
    /// What each supervisor writes in its log as it tells its run.
    pub line: String,
    pub decided_ms: u64,
    /// When whatever of the run is left is killed, on every node at once.
    pub kill_at_ms: u64,
    /// Where the run's spend stops: at its end (`None`), or, for a lost node, the moment it
    /// was found lost (the rest of the grace is not billed).
    #[serde(default)]
    pub spend_until_ms: Option<u64>,
}

impl Decision {
    /// The run's status and reason once it has ended under this decision.
    pub fn status(&self) -> (RunStatus, Option<String>) {
        let status = match self.why {
            Why::Canceled => RunStatus::Canceled,
            Why::Ceiling => RunStatus::HitCeiling,
            Why::TimeLimit | Why::Lost => RunStatus::Failed,
            Why::Org => RunStatus::StoppedByOrg,
        };
        (status, self.reason.clone())
    }
}

/// Writes `decision` as the run's, unless it already has one; returns the one that holds
/// (the first, always). Made whole beside it, then linked into place, which fails where a
/// decision is already there: no reader ever sees half of one, and none is replaced.
pub fn decide(run_dir: &Path, decision: &Decision) -> io::Result<Decision> {
    let path = run_dir.join(FILE);
    if let Some(first) = read(run_dir) {
        return Ok(first);
    }
    let staged = run_dir.join(format!(".{FILE}.{}", std::process::id()));
    let _ = fs::remove_file(&staged);
    let bytes = serde_json::to_vec_pretty(decision).map_err(io::Error::other)?;
    fs::write(&staged, bytes)?;
    let linked = fs::hard_link(&staged, &path);
    let _ = fs::remove_file(&staged);
    match linked {
        Ok(()) => Ok(decision.clone()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            read(run_dir).ok_or_else(|| io::Error::other("a decision is there but unreadable"))
        }
        Err(e) => Err(e),
    }
}

/// The run's decision, when one was made.
pub fn read(run_dir: &Path) -> Option<Decision> {
    let bytes = fs::read(run_dir.join(FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// When a limit is reached (`limit_ms` after the start) and when the run is told of it
/// (`told_ms`): its grace before, but never more than half of the whole, so a run whose
/// ceiling buys 7 s is told at 4 s, not at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub told_ms: u64,
    pub limit_ms: u64,
}

impl Limit {
    pub fn new(limit_seconds: u64, grace_seconds: u64) -> Limit {
        let before = grace_seconds.min(limit_seconds / 2);
        Limit {
            told_ms: (limit_seconds - before).saturating_mul(1000),
            limit_ms: limit_seconds.saturating_mul(1000),
        }
    }

    /// The run's ceiling as a limit: `None` without one (or at no price).
    pub fn ceiling(
        cents_per_hour: i64,
        max_spend_cents: Option<i64>,
        grace_seconds: u64,
    ) -> Option<Limit> {
        let ceiling = max_spend_cents?;
        rules::ceiling_reached_at(cents_per_hour, ceiling).map(|s| Limit::new(s, grace_seconds))
    }
}

/// `24-hour limit`, or the shorter one this machine's settings give: `time limit of 60 s
/// (max_run_seconds)`.
pub fn time_limit_words(max_seconds: u64) -> String {
    if max_seconds == rules::MAX_RUN_SECONDS {
        "24-hour limit".to_owned()
    } else {
        format!("time limit of {max_seconds} s (max_run_seconds)")
    }
}

/// Why a run stopped at its time limit failed: `reached the 24-hour limit` at 24 hours.
pub fn time_limit_reason(max_seconds: u64) -> String {
    if max_seconds == rules::MAX_RUN_SECONDS {
        crate::supervisor::DAY_REASON.to_owned()
    } else {
        format!("reached this machine's {}", time_limit_words(max_seconds))
    }
}

/// `10 s`, `1 s`, `0 s`: whole seconds, rounded up.
pub fn seconds_words(ms: u64) -> String {
    format!("{} s", ms.div_ceil(1000))
}

/// The line a run's log gets as it is told: `div: {why}: SIGTERM sent to the run; SIGKILL in
/// 10 s if it has not exited`, `left_ms` being what is left until the kill.
pub fn told_line(why: &str, left_ms: u64) -> String {
    format!(
        "div: {why}: SIGTERM sent to the run; SIGKILL in {} if it has not exited",
        seconds_words(left_ms)
    )
}

/// What the told line says of a ceiling `left_ms` away.
pub fn ceiling_words(max_spend_cents: i64, left_ms: u64) -> String {
    format!(
        "its {} ceiling is {} away",
        div_spec::Money::from_cents(max_spend_cents),
        seconds_words(left_ms)
    )
}

/// What the told line says of a time limit `left_ms` away.
pub fn time_limit_line_words(max_seconds: u64, left_ms: u64) -> String {
    format!(
        "its {} is {} away",
        time_limit_words(max_seconds),
        seconds_words(left_ms)
    )
}

/// What the told line says of a stop asked for.
pub const ASKED_WORDS: &str = "it was asked to stop";

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(why: Why) -> Decision {
        Decision {
            why,
            reason: None,
            line: "div: stop".to_owned(),
            decided_ms: 1,
            kill_at_ms: 2,
            spend_until_ms: None,
        }
    }

    #[test]
    fn the_first_decision_holds_and_none_replaces_it() {
        let dir = tempfile::tempdir().expect("a temp dir");
        assert_eq!(read(dir.path()), None);
        let first = decide(dir.path(), &decision(Why::Ceiling)).expect("decided");
        assert_eq!(first.why, Why::Ceiling);
        let again = decide(dir.path(), &decision(Why::Canceled)).expect("answered");
        assert_eq!(again.why, Why::Ceiling, "the first decision holds");
        assert_eq!(read(dir.path()).map(|d| d.why), Some(Why::Ceiling));
        // Nothing staged is left beside it.
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("listed")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, [FILE]);
    }

    #[test]
    fn each_decision_ends_the_run_with_its_own_status() {
        assert_eq!(decision(Why::Canceled).status().0, RunStatus::Canceled);
        assert_eq!(decision(Why::Ceiling).status().0, RunStatus::HitCeiling);
        assert_eq!(decision(Why::TimeLimit).status().0, RunStatus::Failed);
        assert_eq!(decision(Why::Org).status().0, RunStatus::StoppedByOrg);
        let mut lost = decision(Why::Lost);
        lost.reason = Some("node 2 (n3) stopped reporting".to_owned());
        assert_eq!(
            lost.status(),
            (
                RunStatus::Failed,
                Some("node 2 (n3) stopped reporting".to_owned())
            )
        );
    }

    #[test]
    fn the_grace_before_a_limit_is_at_most_half_of_it() {
        assert_eq!(
            Limit::new(86_400, 10),
            Limit {
                told_ms: 86_390_000,
                limit_ms: 86_400_000
            }
        );
        // 1 cent at $4.95/h buys 8 s: told at 4 s, not at the start.
        assert_eq!(
            Limit::new(8, 10),
            Limit {
                told_ms: 4_000,
                limit_ms: 8_000
            }
        );
        assert_eq!(Limit::new(0, 10).told_ms, 0);
        assert_eq!(Limit::new(u64::MAX, 10).limit_ms, u64::MAX);
    }
}
