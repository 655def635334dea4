//! The one line `div` ends with, for every status a run can be in.

use div_api::{CheckOutcome, CheckVerdict, Run, RunStatus};

use crate::fmt::{format_duration, money};

/// The line about how a run went, to the character of div-run.md's table:
///
/// - succeeded: `run-k4t9 finished in 12m 40s and spent $1.05`, then ` · missed 1 of 2 checks`
///   when it missed any, or ` · passed 2 of 2 checks` when it had checks and passed them all;
/// - hit its ceiling: `run-k4t9 hit its $5.00 ceiling after 1h 0m`;
/// - stopped by the org: `run-k4t9 was stopped by the org after 12m 0s: <reason> — $3.10 spent`;
/// - failed: `run-k4t9 failed after 3m 12s (exit 1): <reason> — $0.27 spent`;
/// - canceled: `run-k4t9 was canceled after 4m 0s, $0.33 spent`.
///
/// A run that has not ended yet says where it is: `run-k4t9 is queued`,
/// `run-k4t9 is running (4m 0s so far, $0.33 spent)`.
pub fn last_line(run: &Run) -> String {
    let name = &run.name;
    let after = format_duration(run.duration_seconds);
    let spent = money(run.spent_cents);
    match run.status {
        RunStatus::Queued => format!("{name} is queued"),
        RunStatus::Running => format!("{name} is running ({after} so far, {spent} spent)"),
        RunStatus::Succeeded => {
            let mut line = format!("{name} finished in {after} and spent {spent}");
            if let Some(checks) = check_summary(run) {
                line.push_str(" · ");
                line.push_str(&checks);
            }
            line
        }
        RunStatus::HitCeiling => {
            let ceiling = money(run.max_spend_cents.unwrap_or(run.spent_cents));
            format!("{name} hit its {ceiling} ceiling after {after}")
        }
        RunStatus::StoppedByOrg => match reason(run) {
            Some(reason) => {
                format!("{name} was stopped by the org after {after}: {reason} — {spent} spent")
            }
            None => format!("{name} was stopped by the org after {after} — {spent} spent"),
        },
        RunStatus::Failed => {
            let mut line = format!("{name} failed after {after}");
            if let Some(code) = run.exit_code {
                line.push_str(&format!(" (exit {code})"));
            }
            if let Some(reason) = reason(run) {
                line.push_str(": ");
                line.push_str(reason);
            }
            line.push_str(&format!(" — {spent} spent"));
            line
        }
        RunStatus::Canceled => format!("{name} was canceled after {after}, {spent} spent"),
    }
}

fn reason(run: &Run) -> Option<&str> {
    run.reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
}

/// `missed 1 of 2 checks` or `passed 2 of 2 checks`; `None` for a run without checks.
fn check_summary(run: &Run) -> Option<String> {
    checks_said(&run.checks, &run.verdicts)
}

/// `missed 1 of 2 checks` or `passed 2 of 2 checks` for these checks and verdicts, as a run's
/// last line and an evaluation say it; `None` when there are no checks.
///
/// A check without a verdict counts as missed: unknown is never a pass.
pub fn checks_said(checks: &[String], verdicts: &[CheckVerdict]) -> Option<String> {
    let total = checks.len().max(verdicts.len());
    if total == 0 {
        return None;
    }
    let passed = verdicts
        .iter()
        .filter(|v| v.outcome == CheckOutcome::Passed)
        .count();
    let noun = if total == 1 { "check" } else { "checks" };
    Some(if passed == total {
        format!("passed {passed} of {total} {noun}")
    } else {
        format!("missed {} of {total} {noun}", total - passed)
    })
}

#[cfg(test)]
mod tests {
    use div_api::{CheckVerdict, Run, RunStatus};
    use serde_json::json;

    use super::*;

    fn run(status: RunStatus, seconds: u64, spent: i64) -> Run {
        serde_json::from_value(json!({
            "id": "r_1", "name": "run-k4t9", "project": "p", "status": status.as_str(),
            "entrypoint": "train.py", "command": "python -u train.py", "sku": "h100", "gpus": 1,
            "cores": 1, "memory_gib": 8, "cents_per_hour": 495, "image": "i",
            "created_at": "2025-01-01T00:00:00Z", "duration_seconds": seconds, "spent_cents": spent,
        }))
        .expect("a valid run")
    }

    fn verdict(outcome: CheckOutcome) -> CheckVerdict {
        CheckVerdict {
            check: "metrics.accuracy >= 0.8".into(),
            outcome,
            found: None,
            line: String::new(),
            extra: Default::default(),
        }
    }

    fn check(run: Run, expect: &str) {
        assert_eq!(last_line(&run), expect);
    }

    #[test]
    fn every_status() {
        check(
            run(RunStatus::Succeeded, 760, 105),
            "run-k4t9 finished in 12m 40s and spent $1.05",
        );
        check(
            Run {
                max_spend_cents: Some(500),
                ..run(RunStatus::HitCeiling, 3636, 500)
            },
            "run-k4t9 hit its $5.00 ceiling after 1h 0m",
        );
        check(
            Run {
                reason: Some("org usage limit of $500.00 reached".into()),
                ..run(RunStatus::StoppedByOrg, 720, 310)
            },
            "run-k4t9 was stopped by the org after 12m 0s: org usage limit of $500.00 reached — $3.10 spent",
        );
        check(
            run(RunStatus::StoppedByOrg, 720, 310),
            "run-k4t9 was stopped by the org after 12m 0s — $3.10 spent",
        );
        check(
            Run {
                exit_code: Some(1),
                reason: Some("ValueError: bad shape".into()),
                ..run(RunStatus::Failed, 192, 27)
            },
            "run-k4t9 failed after 3m 12s (exit 1): ValueError: bad shape — $0.27 spent",
        );
        check(
            Run {
                exit_code: Some(3),
                ..run(RunStatus::Failed, 192, 27)
            },
            "run-k4t9 failed after 3m 12s (exit 3) — $0.27 spent",
        );
        check(
            Run {
                reason: Some("the supervisor was lost".into()),
                ..run(RunStatus::Failed, 5, 1)
            },
            "run-k4t9 failed after 5s: the supervisor was lost — $0.01 spent",
        );
        check(
            run(RunStatus::Canceled, 240, 33),
            "run-k4t9 was canceled after 4m 0s, $0.33 spent",
        );
        check(run(RunStatus::Queued, 0, 0), "run-k4t9 is queued");
        check(
            run(RunStatus::Running, 240, 33),
            "run-k4t9 is running (4m 0s so far, $0.33 spent)",
        );
    }

    #[test]
    fn checks_on_a_succeeded_run() {
        let with = |outcomes: &[CheckOutcome]| Run {
            checks: outcomes.iter().map(|_| "c".to_string()).collect(),
            verdicts: outcomes.iter().map(|o| verdict(*o)).collect(),
            ..run(RunStatus::Succeeded, 760, 105)
        };
        use CheckOutcome::*;
        check(
            with(&[Passed, Failed]),
            "run-k4t9 finished in 12m 40s and spent $1.05 · missed 1 of 2 checks",
        );
        check(
            with(&[Passed, Unknown]),
            "run-k4t9 finished in 12m 40s and spent $1.05 · missed 1 of 2 checks",
        );
        check(
            with(&[Passed, Passed]),
            "run-k4t9 finished in 12m 40s and spent $1.05 · passed 2 of 2 checks",
        );
        check(
            with(&[Failed]),
            "run-k4t9 finished in 12m 40s and spent $1.05 · missed 1 of 1 check",
        );
        check(
            Run {
                checks: vec!["a".into(), "b".into()],
                ..run(RunStatus::Succeeded, 760, 105)
            },
            "run-k4t9 finished in 12m 40s and spent $1.05 · missed 2 of 2 checks",
        );
    }
}
