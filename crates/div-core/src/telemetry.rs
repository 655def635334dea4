//! `div telemetry`: a run's points, and the layout that groups their numeric series into
//! charts (a `telemetry.toml`, or one chart per series).
//!
//! The layout file:
//!
//! ```toml
//! [[chart]]
//! title = "loss"                  # optional; the series' names by default
//! series = ["loss", "val_loss"]   # keys of the points; `a.b` reaches into objects
//! x = "step"                      # optional; `step` when points have one, else `line`
//! ```
//!
//! `x = "line"` is the point's line number in `telemetry.jsonl`; any other name is a key of
//! the points (`time`, `epoch`…). A point without a numeric value for a series (or its x) is
//! left out of that series.

pub use div_api::layout::{
    Chart, ChartSpec, Layout, LayoutError, Series, X_LINE, X_STEP, charts, number_at,
};
use div_api::{ControlPlane, Run, Telemetry};

use crate::error::RunError;
use crate::follow::find_run;

/// A run and its telemetry points after line `after`.
#[derive(Debug, Clone)]
pub struct TelemetryRead {
    pub run: Run,
    pub telemetry: Telemetry,
}

/// Read a run (by name or id) and its points after line `after` (0 for all).
pub async fn telemetry(
    cp: &dyn ControlPlane,
    run: &str,
    after: u64,
) -> Result<TelemetryRead, RunError> {
    let found = find_run(cp, run).await?;
    let telemetry = cp
        .telemetry(&found.id, after)
        .await
        .map_err(|e| RunError::api("read the telemetry", e))?;
    Ok(TelemetryRead {
        run: found,
        telemetry,
    })
}
