//! `div`'s exit codes, documented in `docs/exit-codes.md`.
//!
//! A run's own exit code passes through (`div run` of a run that exits 3 exits 3). div's own
//! outcomes use 200–210, a block no shell, signal (128+N) or common program convention uses,
//! so a script can tell them from the run's.

/// Everything went as asked: the run succeeded (its checks may have missed), or it was placed
/// with `--detach`, or a dry run found nothing wrong.
pub(crate) const SUCCESS: i32 = 0;
/// What was typed was refused before anything was created: flags, values, SKU, sizes, money,
/// checks, entrypoint, project, nothing to ship; or no run has the name given.
pub(crate) const REFUSED: i32 = 200;
/// The control plane could not be reached (or the local one could not be started).
pub(crate) const UNREACHABLE: i32 = 201;
/// The control plane refused the credentials.
pub(crate) const UNAUTHORIZED: i32 = 202;
/// The control plane failed, or answered something `div` cannot read.
pub(crate) const CONTROL_PLANE: i32 = 203;
/// Something failed on this machine: reading a file, writing output.
pub(crate) const LOCAL: i32 = 204;
/// The run hit its `--max-spend` ceiling and was stopped.
pub(crate) const HIT_CEILING: i32 = 205;
/// The run was canceled (`div stop`).
pub(crate) const CANCELED: i32 = 206;
/// The run was stopped by the org.
pub(crate) const STOPPED_BY_ORG: i32 = 207;
/// Ctrl-C: `div` detached (the run goes on) or stopped before placing anything.
pub(crate) const INTERRUPTED: i32 = 208;
/// The run failed without an exit code of its own (its supervisor was lost).
pub(crate) const FAILED_WITHOUT_CODE: i32 = 209;
/// `div result`: a check shown (the run's own, or one given with `--check`) missed or is
/// unknown.
pub(crate) const CHECK_MISSED: i32 = 210;

use div_api::{Run, RunStatus};
use div_core::FailureKind;

/// The exit code for a run as it ended.
pub(crate) fn for_run(run: &Run) -> i32 {
    match run.status {
        RunStatus::Succeeded => run.exit_code.unwrap_or(SUCCESS),
        RunStatus::Failed => run
            .exit_code
            .filter(|c| *c != 0)
            .unwrap_or(FAILED_WITHOUT_CODE),
        RunStatus::HitCeiling => HIT_CEILING,
        RunStatus::Canceled => CANCELED,
        RunStatus::StoppedByOrg => STOPPED_BY_ORG,
        RunStatus::Queued | RunStatus::Running => SUCCESS,
    }
}

/// The exit code for one of div-core's failures.
pub(crate) fn for_failure(kind: FailureKind) -> i32 {
    match kind {
        FailureKind::Refused | FailureKind::NotFound => REFUSED,
        FailureKind::Unreachable => UNREACHABLE,
        FailureKind::Unauthorized => UNAUTHORIZED,
        FailureKind::ControlPlane => CONTROL_PLANE,
        _ => LOCAL,
    }
}

/// Every code, with its name, for the documentation test.
#[cfg(test)]
pub(crate) const ALL: [(&str, i32); 12] = [
    ("SUCCESS", SUCCESS),
    ("REFUSED", REFUSED),
    ("UNREACHABLE", UNREACHABLE),
    ("UNAUTHORIZED", UNAUTHORIZED),
    ("CONTROL_PLANE", CONTROL_PLANE),
    ("LOCAL", LOCAL),
    ("HIT_CEILING", HIT_CEILING),
    ("CANCELED", CANCELED),
    ("STOPPED_BY_ORG", STOPPED_BY_ORG),
    ("INTERRUPTED", INTERRUPTED),
    ("FAILED_WITHOUT_CODE", FAILED_WITHOUT_CODE),
    ("CHECK_MISSED", CHECK_MISSED),
];

#[cfg(test)]
mod tests {
    /// `docs/exit-codes.md` names every code with its value.
    #[test]
    fn every_code_is_documented() {
        let doc = include_str!("../../../docs/exit-codes.md");
        for (name, code) in super::ALL {
            let row = format!("| {code} | `{name}` |");
            assert!(
                doc.contains(&row),
                "docs/exit-codes.md lacks the row `{row}`"
            );
        }
    }
}
