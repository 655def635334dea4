//! Timing helpers shared by the benchmarks: medians after a warm-up, percentiles, ratios.

use std::time::{Duration, Instant};

use anyhow::Result;

/// The median of `runs` timings of `f`, after one warm-up run.
pub(crate) fn median<T>(runs: usize, mut f: impl FnMut() -> Result<T>) -> Result<(Duration, T)> {
    let mut last = f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        last = f()?;
        times.push(started.elapsed());
    }
    Ok((percentile(&mut times, 50), last))
}

/// The `p`th percentile (nearest rank) of `values`, sorting them; zero when empty.
pub(crate) fn percentile(values: &mut [Duration], p: usize) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    let rank = (values.len() * p).div_ceil(100).clamp(1, values.len());
    values[rank - 1]
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(crate) fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// `met` or `NOT met`, for a goal line.
pub(crate) fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}
