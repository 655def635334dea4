//! `div result`: a run's result and verdicts, and the same result judged again here against
//! checks given now.

use div_api::{ControlPlane, RunResult};
use div_spec::{Check, Verdict};
use serde_json::value::RawValue;

use crate::error::RunError;
use crate::follow::find_run;

/// A run's stored result, and `checks` judged against it on this machine.
#[derive(Debug, Clone)]
pub struct ResultReport {
    /// What the control plane keeps: the object and its own verdicts; `run` is the run's name.
    pub result: RunResult,
    /// The object's JSON text as the control plane sent it: its numbers as the run wrote
    /// them, which `result`'s `Value` holds only as far as an `f64` can. Absent with the
    /// object.
    pub text: Option<Box<RawValue>>,
    /// The checks given now, judged by div-spec against the object's text, as the control
    /// plane judges a run's own checks (numbers compare as the decimals written); an absent
    /// result makes every one unknown.
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
    let exact = cp
        .result_exact(&found.id)
        .await
        .map_err(|e| RunError::api("read the result", e))?;
    let mut result = exact.result;
    // People see the run's name, never its internal id.
    result.run = found.name;
    let text = exact.text;
    let judged = checks
        .iter()
        .map(|c| c.evaluate_json(text.as_deref().map_or("{}", RawValue::get)))
        .collect();
    Ok(ResultReport {
        result,
        text,
        judged,
    })
}

/// JSON text (valid JSON, as a [`RawValue`] holds) laid out as `serde_json::to_string_pretty`
/// lays out a value, but with every token as written: numbers keep their digits
/// (`0.30000000000000001`), strings their escapes.
pub fn pretty_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or list stays `{}` / `[]`.
                while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|n| matches!(n, '}' | ']')) {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}
