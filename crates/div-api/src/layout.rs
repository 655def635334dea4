//! The telemetry layout: how a run's points are grouped into charts (a `telemetry.toml`, or
//! one chart per numeric series). Part of the contract because every reader of telemetry lays
//! it out the same way: `div telemetry` (through div-core) and a control plane's dashboard.
//!
//! ```toml
//! [[chart]]
//! title = "loss"                  # optional; the series' names by default
//! series = ["loss", "val_loss"]   # keys of the points; `a.b` reaches into objects
//! x = "step"                      # optional; `step` when points have one, else `line`
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TelemetryPoint;

/// The error returned by [`Layout::parse`]: what is wrong with the layout, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LayoutError(pub String);

/// The x of a chart that plots against the line number.
pub const X_LINE: &str = "line";
/// The x a chart plots against when the layout does not say and the points have it.
pub const X_STEP: &str = "step";

/// One chart of a layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChartSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub series: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
}

/// How a run's telemetry is laid out: charts, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    #[serde(default, rename = "chart")]
    pub charts: Vec<ChartSpec>,
}

impl Layout {
    /// Read a `telemetry.toml`.
    pub fn parse(text: &str) -> Result<Layout, LayoutError> {
        let layout: Layout =
            toml::from_str(text).map_err(|e| LayoutError(e.message().to_string()))?;
        for (i, chart) in layout.charts.iter().enumerate() {
            if chart.series.is_empty() {
                return Err(LayoutError(format!("chart {} names no series", i + 1)));
            }
        }
        Ok(layout)
    }

    /// One chart per numeric series the points have, in the order first seen, each over
    /// `step` when the points have it, else over the line number.
    pub fn default_for(points: &[TelemetryPoint]) -> Layout {
        let x = default_x(points);
        let mut names: Vec<String> = Vec::new();
        for p in points {
            numeric_paths(&p.point, "", &mut names);
        }
        names.retain(|n| *n != x);
        Layout {
            charts: names
                .into_iter()
                .map(|n| ChartSpec {
                    title: None,
                    series: vec![n],
                    x: None,
                })
                .collect(),
        }
    }
}

fn default_x(points: &[TelemetryPoint]) -> String {
    if points.iter().any(|p| number_at(&p.point, X_STEP).is_some()) {
        X_STEP.to_string()
    } else {
        X_LINE.to_string()
    }
}

fn numeric_paths(value: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Value::Object(map) = value {
        for (k, v) in map {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Number(_) if !out.contains(&path) => out.push(path),
                Value::Object(_) => numeric_paths(v, &path, out),
                _ => {}
            }
        }
    }
}

/// The number at a dotted path of a point.
pub fn number_at(point: &Value, path: &str) -> Option<f64> {
    let mut at = point;
    for part in path.split('.') {
        at = at.get(part)?;
    }
    at.as_f64().filter(|f| f.is_finite())
}

/// One series of a chart: `(x, y)` in the points' order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x: String,
    pub series: Vec<Series>,
}

/// The charts `layout` makes of `points`.
pub fn charts(layout: &Layout, points: &[TelemetryPoint]) -> Vec<Chart> {
    let fallback_x = default_x(points);
    layout
        .charts
        .iter()
        .map(|spec| {
            let x = spec.x.clone().unwrap_or_else(|| fallback_x.clone());
            let series = spec
                .series
                .iter()
                .map(|name| Series {
                    name: name.clone(),
                    points: points
                        .iter()
                        .filter_map(|p| {
                            let xv = if x == X_LINE {
                                p.line as f64
                            } else {
                                number_at(&p.point, &x)?
                            };
                            Some((xv, number_at(&p.point, name)?))
                        })
                        .collect(),
                })
                .collect();
            Chart {
                title: spec.title.clone().unwrap_or_else(|| spec.series.join(", ")),
                x,
                series,
            }
        })
        .collect()
}
