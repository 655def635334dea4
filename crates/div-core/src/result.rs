//! `div result`: a run's result and verdicts, and the same result judged again here against
//! checks given now.

use div_api::{ControlPlane, RunResult};
use div_spec::{Check, Verdict};

use crate::error::RunError;
use crate::follow::find_run;

/// A run's stored result, and `checks` judged against it on this machine.
#[derive(Debug, Clone)]
pub struct ResultReport {
    /// What the control plane keeps: the object and its own verdicts; `run` is the run's name.
    pub result: RunResult,
    /// The checks given now, judged by div-spec against the stored object (an absent result
    /// makes every one unknown).
    pub judged: Vec<Verdict>,
}

impl ResultReport {
    /// Whether every check judged here passed (true when none were given).
    pub fn all_passed(&self) -> bool {
        self.judged.iter().all(Verdict::passed)
    }
}

/// Read a run's result and judge `checks` against it.
pub async fn result(
    cp: &dyn ControlPlane,
    run: &str,
    checks: &[Check],
) -> Result<ResultReport, RunError> {
    let found = find_run(cp, run).await?;
    let mut result = cp
        .result(&found.id)
        .await
        .map_err(|e| RunError::api("read the result", e))?;
    // People see the run's name, never its internal id.
    result.run = found.name;
    let empty = serde_json::Value::Object(Default::default());
    let object = result.result.as_ref().unwrap_or(&empty);
    let judged = checks.iter().map(|c| c.evaluate(object)).collect();
    Ok(ResultReport { result, judged })
}
