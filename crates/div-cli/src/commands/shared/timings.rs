//! `DIVERGENT_TIMINGS`: when `div` began, and how long each step of `div run` took.

use std::time::Instant;

use div_core::{Event, Step};

/// When `main` began, for `DIVERGENT_TIMINGS`.
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Notes the moment the process began its work (the first thing `main` does).
pub(crate) fn mark_start() {
    let _ = STARTED.set(std::time::Instant::now());
}

/// When `main` began (now, if it never said).
pub(crate) fn started() -> std::time::Instant {
    *STARTED.get_or_init(std::time::Instant::now)
}

/// How long each step of `div run` took, for `DIVERGENT_TIMINGS`: each mark names the step
/// that ends there.
pub(crate) struct Timings {
    marks: Vec<(&'static str, Instant)>,
}

impl Timings {
    pub(crate) fn new() -> Timings {
        Timings {
            marks: vec![("", started())],
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

    /// `timings: validate 0.4 ms · list 2.1 ms · …`, ending with `exit` (until now).
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
        format!("timings: {}", steps.join(" · "))
    }
}
