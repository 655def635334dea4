//! `DIVERGENT_TIMINGS`: when `div` began, and how long each step of `div run` took.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use div_core::{Event, Step};

/// When `main` began, for `DIVERGENT_TIMINGS`: on the monotonic clock, and on the wall clock
/// (which the timings line prints, so a bench can lay the server's marks beside the steps).
static STARTED: std::sync::OnceLock<(Instant, SystemTime)> = std::sync::OnceLock::new();

/// Notes the moment the process began its work (the first thing `main` does).
pub(crate) fn mark_start() {
    let _ = STARTED.set((Instant::now(), SystemTime::now()));
}

/// When `main` began (now, if it never said).
fn began() -> (Instant, SystemTime) {
    *STARTED.get_or_init(|| (Instant::now(), SystemTime::now()))
}

/// How long each step of `div run` took, for `DIVERGENT_TIMINGS`: each mark names the step
/// that ends there.
pub(crate) struct Timings {
    marks: Vec<(&'static str, Instant)>,
}

impl Timings {
    pub(crate) fn new() -> Timings {
        Timings {
            marks: vec![("", began().0)],
        }
    }

    /// The step that ended last.
    fn last(&self) -> Option<&'static str> {
        self.marks.last().map(|m| m.0)
    }

    fn mark(&mut self, step: &'static str) {
        self.marks.push((step, Instant::now()));
    }

    /// Marks the step an event ends, if it ends one.
    pub(crate) fn saw(&mut self, event: &Event) {
        let step = match event {
            Event::Step(Step::Validated) => "validate",
            Event::Step(Step::Listed) => "list",
            Event::Shipping { .. } => "price",
            Event::Placing => {
                // Nothing shipped: pricing ended here and there was no upload.
                if self.last() == Some("list") {
                    "price"
                } else {
                    "upload"
                }
            }
            Event::Placed { .. } => "create",
            Event::Log(bytes) if !bytes.is_empty() && self.last() == Some("create") => {
                "start + first log byte"
            }
            Event::Ended(_) => {
                if self.last() == Some("create") {
                    "start + run" // a run that printed nothing
                } else {
                    "run"
                }
            }
            _ => return,
        };
        self.mark(step);
    }

    /// `timings: validate 0.4 ms · list 2.1 ms · … · exit 0.1 ms (main began at
    /// 1765012345.123456)`: each step until now, then when `main` began, in seconds since the
    /// Unix epoch to the microsecond.
    pub(crate) fn line(mut self) -> String {
        self.mark("exit");
        let steps: Vec<String> = self
            .marks
            .windows(2)
            .map(|w| {
                let ms = w[1].1.duration_since(w[0].1).as_secs_f64() * 1000.0;
                format!("{} {ms:.1} ms", w[1].0)
            })
            .collect();
        let began = began()
            .1
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros();
        format!(
            "timings: {} (main began at {}.{:06})",
            steps.join(" · "),
            began / 1_000_000,
            began % 1_000_000
        )
    }
}
