//! The run's own arithmetic, from div-spec and div-pricing: what it is charged, how its
//! checks are judged, its limits.

use div_api::{CheckOutcome, CheckVerdict};
use div_pricing::Rate;
use div_spec::{Check, Money, Outcome};

pub use div_spec::{DEFAULT_STOP_GRACE_SECONDS, MAX_RUN_SECONDS, format_bytes_short};

/// What a run is charged after `seconds` at `cents_per_hour`, never past its ceiling.
pub fn charge(cents_per_hour: i64, seconds: u64, ceiling: Option<i64>) -> i64 {
    Rate::from_cents_per_hour(cents_per_hour)
        .charge(seconds, ceiling.map(Money::from_cents))
        .cents()
}

/// The first whole second at which the ceiling is reached; `None` at a zero rate.
pub fn ceiling_reached_at(cents_per_hour: i64, ceiling: i64) -> Option<u64> {
    Rate::from_cents_per_hour(cents_per_hour).ceiling_reached_at(Money::from_cents(ceiling))
}

/// Judges `check` against the run's result, its JSON text (div-spec's rules: numbers compare
/// as written, never through `f64`); no result judges against `null`, so every check is
/// unknown.
pub fn judge(check: &str, result: Option<&str>) -> CheckVerdict {
    let verdict = match check.parse::<Check>() {
        Ok(c) => c.evaluate_json(result.unwrap_or("null")),
        Err(e) => div_spec::Verdict {
            check: check.to_owned(),
            outcome: Outcome::Unknown,
            found: None,
            found_text: None,
            reason: Some(e.to_string()),
        },
    };
    CheckVerdict {
        line: verdict.line(),
        check: verdict.check,
        outcome: match verdict.outcome {
            Outcome::Passed => CheckOutcome::Passed,
            Outcome::Failed => CheckOutcome::Failed,
            Outcome::Unknown => CheckOutcome::Unknown,
        },
        found: verdict.found,
        extra: Default::default(),
    }
}

/// The most tasks (processes and threads together) a run is given: 16,384.
pub const MAX_RUN_TASKS: u64 = 16_384;
/// The fewest: 1,024.
pub const MIN_RUN_TASKS: u64 = 1_024;
/// Tasks a run is given for each of its cores.
pub const TASKS_PER_CORE: u64 = 512;

/// How many tasks (processes and threads together) a run of `cores` cores may have at once:
/// 512 a core, at least 1,024 and at most 16,384. A training process with a dataloader of 8
/// workers runs a few hundred; a fork or thread bomb stops at this, with `EAGAIN` in the run,
/// well short of the machine's own limit (`kernel.pid_max`).
pub fn run_tasks(cores: u32) -> u64 {
    (u64::from(cores) * TASKS_PER_CORE).clamp(MIN_RUN_TASKS, MAX_RUN_TASKS)
}
