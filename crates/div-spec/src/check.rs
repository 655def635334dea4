//! Checks: what a run's result must say (`metrics.accuracy>=0.8`), and their verdicts.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::decimal::Decimal;

/// One check: a dotted path into the result, a comparison and a value.
///
/// Parsed from `metrics.accuracy>=0.8` (spaces around the operator optional); displayed in
/// canonical form `metrics.accuracy >= 0.8`. Serialized as the canonical string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    path: String,
    op: CheckOp,
    value: CheckValue,
}

/// The comparison of a [`Check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckOp {
    /// `>=`
    Ge,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `<`
    Lt,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl CheckOp {
    /// The operator as written: `>=`.
    pub fn symbol(self) -> &'static str {
        match self {
            CheckOp::Ge => ">=",
            CheckOp::Le => "<=",
            CheckOp::Gt => ">",
            CheckOp::Lt => "<",
            CheckOp::Eq => "==",
            CheckOp::Ne => "!=",
        }
    }

    /// Whether the operator orders (`<`, `>`, `<=`, `>=`) rather than tests equality.
    pub fn is_ordering(self) -> bool {
        !matches!(self, CheckOp::Eq | CheckOp::Ne)
    }

    fn holds(self, ordering: Ordering) -> bool {
        match self {
            CheckOp::Ge => ordering != Ordering::Less,
            CheckOp::Le => ordering != Ordering::Greater,
            CheckOp::Gt => ordering == Ordering::Greater,
            CheckOp::Lt => ordering == Ordering::Less,
            CheckOp::Eq => ordering == Ordering::Equal,
            CheckOp::Ne => ordering != Ordering::Equal,
        }
    }
}

impl fmt::Display for CheckOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

/// The value a [`Check`] compares with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckValue {
    /// A number, kept as the decimal text typed (`0.8`, `-3`, `1e-4`) and compared exactly.
    Number(String),
    /// `true` or `false`.
    Bool(bool),
    /// A string, typed quoted (`'done'`, `"done"`) or bare (`done`).
    String(String),
}

impl fmt::Display for CheckValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckValue::Number(text) => f.write_str(text),
            CheckValue::Bool(b) => write!(f, "{b}"),
            CheckValue::String(s) if is_bare(s) => f.write_str(s),
            CheckValue::String(s) if !s.contains('\'') => write!(f, "'{s}'"),
            CheckValue::String(s) => write!(f, "\"{s}\""),
        }
    }
}

/// The error returned by [`Check::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// No operator at all.
    #[error(
        "`{typed}` has no comparison; write a check like `metrics.accuracy>=0.8` with `>=`, `<=`, `>`, `<`, `==` or `!=`"
    )]
    NoOperator { typed: String },
    /// An operator that is not one of the six.
    #[error("`{typed}` compares with `{found}`; write `{instead}`")]
    WrongOperator {
        typed: String,
        found: String,
        instead: String,
    },
    /// Nothing before the operator.
    #[error(
        "`{typed}` has no path before `{op}`; write the path into the result, like `metrics.accuracy`"
    )]
    NoPath { typed: String, op: String },
    /// A path that is not dotted names.
    #[error(
        "`{path}` in `{typed}` is not a path; a path is names of letters, digits, `_` and `-` joined by dots, like `metrics.runs.0.accuracy`"
    )]
    BadPath { typed: String, path: String },
    /// Nothing after the operator.
    #[error("`{typed}` has no value after `{op}`; write a number, `true`, `false` or a string")]
    NoValue { typed: String, op: String },
    /// A value that is not a number, bool or string.
    #[error(
        "`{value}` in `{typed}` is not a value a check takes; write a number like `0.8`, `true`, `false`, or a string in quotes{}",
        quoted.as_ref().map(|q| format!(" like `{q}`")).unwrap_or_default()
    )]
    BadValue {
        typed: String,
        value: String,
        /// The value quoted so that it reads back as the string typed, when a quote can.
        quoted: Option<String>,
        /// The whole check with `quoted` in place: `status == 'two words'`.
        suggestion: Option<String>,
    },
    /// `True`, `null` and other spellings that look like something else.
    #[error(
        "`{value}` in `{typed}` is ambiguous; write `{instead}`, or quote it as a string: `'{value}'`"
    )]
    Ambiguous {
        typed: String,
        value: String,
        instead: String,
        /// The whole check with `instead` in place: `converged == true`.
        suggestion: String,
    },
    /// An ordering (`>=`, `<`…) on a value that is not a number, nor a string or boolean
    /// spelled as one.
    #[error(
        "`{value}` in `{typed}` is not a number, and `{op}` compares numbers; {}",
        match instead { Some(n) => format!("write it `{n}`"), None => "write a number like `0.8` or `-1.5e-3`".to_owned() }
    )]
    NotANumber {
        typed: String,
        value: String,
        op: &'static str,
        /// The number meant, when the value is one written another way (`+1`, `.5`, `5.`).
        instead: Option<String>,
        /// The whole check with `instead` in place: `loss < 0.5`.
        suggestion: Option<String>,
    },
    /// A quote not closed.
    #[error("the string in `{typed}` has no closing quote")]
    Unclosed { typed: String },
    /// An ordering on a string or boolean.
    #[error("`{typed}` orders a {kind} with `{op}`; a {kind} takes `==` or `!=`")]
    OrderNonNumber {
        typed: String,
        kind: &'static str,
        op: &'static str,
    },
}

impl CheckError {
    /// The whole check the message proposes instead, when it proposes one: it always parses.
    pub fn suggestion(&self) -> Option<&str> {
        match self {
            CheckError::BadValue { suggestion, .. } | CheckError::NotANumber { suggestion, .. } => {
                suggestion.as_deref()
            }
            CheckError::Ambiguous { suggestion, .. } => Some(suggestion),
            _ => None,
        }
    }
}

/// `s` quoted so that a check reads it back as `s`: in `'…'`, else in `"…"`; `None` when it
/// holds both quotes.
fn quote_for(s: &str) -> Option<String> {
    if !s.contains('\'') {
        Some(format!("'{s}'"))
    } else if !s.contains('"') {
        Some(format!("\"{s}\""))
    } else {
        None
    }
}

/// The number `text` means when written in a way a check does not take: `+1`, `.5`, `-.5`,
/// `5.`.
fn number_meant(text: &str) -> Option<String> {
    let (sign, rest) = match text.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let mantissa = mantissa.strip_suffix('.').unwrap_or(mantissa);
    let mantissa = if mantissa.starts_with('.') {
        format!("0{mantissa}")
    } else {
        mantissa.to_owned()
    };
    let number = format!("{sign}{mantissa}{exponent}");
    Decimal::parse(&number).is_some().then_some(number)
}

/// `suggestion` when it parses as a check, so a message never proposes one that does not.
fn valid(suggestion: String) -> Option<String> {
    suggestion.parse::<Check>().is_ok().then_some(suggestion)
}

impl FromStr for Check {
    type Err = CheckError;

    fn from_str(raw: &str) -> Result<Check, CheckError> {
        let typed = raw.trim();
        let owned = || typed.to_owned();
        let Some(at) = typed.find(['<', '>', '=', '!']) else {
            return Err(CheckError::NoOperator { typed: owned() });
        };
        let path = typed[..at].trim();
        let rest = &typed[at..];
        let two = rest.get(..2).unwrap_or(rest);
        let (op, len) = match two {
            ">=" => (CheckOp::Ge, 2),
            "<=" => (CheckOp::Le, 2),
            "==" => (CheckOp::Eq, 2),
            "!=" => (CheckOp::Ne, 2),
            "=>" | "=<" => {
                let instead = if two == "=>" { ">=" } else { "<=" };
                return Err(CheckError::WrongOperator {
                    typed: owned(),
                    found: two.to_owned(),
                    instead: instead.to_owned(),
                });
            }
            _ => match rest.as_bytes()[0] {
                b'>' => (CheckOp::Gt, 1),
                b'<' => (CheckOp::Lt, 1),
                b'=' => {
                    return Err(CheckError::WrongOperator {
                        typed: owned(),
                        found: "=".to_owned(),
                        instead: "==".to_owned(),
                    });
                }
                _ => {
                    return Err(CheckError::WrongOperator {
                        typed: owned(),
                        found: "!".to_owned(),
                        instead: "!=".to_owned(),
                    });
                }
            },
        };
        if path.is_empty() {
            return Err(CheckError::NoPath {
                typed: owned(),
                op: op.symbol().to_owned(),
            });
        }
        if !is_path(path) {
            return Err(CheckError::BadPath {
                typed: owned(),
                path: path.to_owned(),
            });
        }
        let value_text = rest[len..].trim();
        let value = parse_value(typed, path, op, value_text)?;
        let kind = match &value {
            CheckValue::String(_) => Some("string"),
            CheckValue::Bool(_) => Some("boolean"),
            CheckValue::Number(_) => None,
        };
        if let Some(kind) = kind
            && op.is_ordering()
        {
            return Err(CheckError::OrderNonNumber {
                typed: owned(),
                kind,
                op: op.symbol(),
            });
        }
        Ok(Check {
            path: path.to_owned(),
            op,
            value,
        })
    }
}

fn is_path(path: &str) -> bool {
    path.split('.').all(|seg| {
        !seg.is_empty()
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// Whether a string may be written without quotes: it starts with a letter or `_`, holds only
/// letters, digits and `_ - . / : @ +`, and is not `true`, `false`, `null` or `none` in any
/// case (the parser refuses those bare).
fn is_bare(s: &str) -> bool {
    let mut bytes = s.bytes();
    let Some(first) = bytes.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"_-./:@+".contains(&b))
        && !["true", "false", "null", "none"]
            .iter()
            .any(|w| w.eq_ignore_ascii_case(s))
}

fn parse_value(typed: &str, path: &str, op: CheckOp, text: &str) -> Result<CheckValue, CheckError> {
    let owned = || typed.to_owned();
    if text.is_empty() {
        return Err(CheckError::NoValue {
            typed: owned(),
            op: op.symbol().to_owned(),
        });
    }
    match text {
        "true" => return Ok(CheckValue::Bool(true)),
        "false" => return Ok(CheckValue::Bool(false)),
        _ => {}
    }
    let first = text.as_bytes()[0];
    let bad = || {
        if op.is_ordering() {
            let instead = number_meant(text);
            return CheckError::NotANumber {
                typed: owned(),
                value: text.to_owned(),
                op: op.symbol(),
                suggestion: instead
                    .as_ref()
                    .and_then(|n| valid(format!("{path} {op} {n}"))),
                instead,
            };
        }
        let quoted = quote_for(text);
        let suggestion = quoted
            .as_ref()
            .and_then(|q| valid(format!("{path} {op} {q}")));
        CheckError::BadValue {
            typed: owned(),
            value: text.to_owned(),
            quoted: suggestion.as_ref().and(quoted),
            suggestion,
        }
    };
    if first == b'\'' || first == b'"' {
        let quote = char::from(first);
        let inner = &text[1..];
        return match inner.find(quote) {
            Some(end) if end + 1 == inner.len() => Ok(CheckValue::String(inner[..end].to_owned())),
            Some(_) => Err(bad()),
            None => Err(CheckError::Unclosed { typed: owned() }),
        };
    }
    if Decimal::parse(text).is_some() {
        return Ok(CheckValue::Number(text.to_owned()));
    }
    let lower = text.to_ascii_lowercase();
    if matches!(lower.as_str(), "true" | "false") && !op.is_ordering() {
        return Err(CheckError::Ambiguous {
            typed: owned(),
            value: text.to_owned(),
            suggestion: format!("{path} {op} {lower}"),
            instead: lower,
        });
    }
    if lower == "null" || lower == "none" {
        return Err(bad());
    }
    if is_bare(text) {
        return Ok(CheckValue::String(text.to_owned()));
    }
    Err(bad())
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.path, self.op, self.value)
    }
}

impl Serialize for Check {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Check, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The result has the value and it compares as the check says.
    Passed,
    /// The result has a value and it does not (including a value of another type).
    Failed,
    /// The result does not have the value (or it is `null`): never a pass.
    Unknown,
}

/// A check's verdict against a result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The check in canonical form: `metrics.accuracy >= 0.8`.
    pub check: String,
    /// How it came out.
    pub outcome: Outcome,
    /// The value found at the path, when there was one (`null` included).
    pub found: Option<Value>,
    /// A number found, as the result wrote it (`0.30000000000000001`): `found` holds it as
    /// an `f64`, which may have fewer digits. The verdict's line shows this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_text: Option<String>,
    /// Why the outcome is unknown: `the result has no metrics.accuracy`.
    pub reason: Option<String>,
}

impl Verdict {
    /// The line written into the log:
    /// `check passed: metrics.accuracy >= 0.8 (found 0.91)`,
    /// `check failed: metrics.loss < 0.6 (found 0.71)`,
    /// `check unknown: metrics.accuracy >= 0.8 (the result has no metrics.accuracy)`.
    pub fn line(&self) -> String {
        let word = match self.outcome {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Unknown => "unknown",
        };
        let why = match (&self.reason, &self.found_text, &self.found) {
            (Some(reason), _, _) => reason.clone(),
            (None, Some(text), _) => format!("found {text}"),
            (None, None, Some(found)) => format!("found {}", describe(found)),
            (None, None, None) => "nothing found".to_owned(),
        };
        format!("check {word}: {} ({why})", self.check)
    }

    /// Whether the check passed.
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Passed
    }
}

/// A found value as the verdict line shows it: scalars as JSON, containers by kind.
fn describe(value: &Value) -> String {
    match value {
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
        // JSON escapes C0 controls; the rest a terminal acts on (C1, bidi) are escaped too,
        // as this line goes into the log, which reaches terminals as it is.
        Value::String(_) => crate::terminal::terminal_safe(&value.to_string()).into_owned(),
        scalar => scalar.to_string(),
    }
}

/// The most paths of a result [`paths_of`] lists, and the most items of one list it goes
/// into: a suggestion is looked for among these, never across a whole large result.
const MOST_PATHS: usize = 10_000;
const MOST_ITEMS: usize = 100;

/// Whether a path's segment is a list's index.
fn is_index(segment: &str) -> bool {
    !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit())
}

/// Every path to a value a check compares with in `result` (`metrics.accuracy`, `losses.0`;
/// not `metrics`, an object), breadth first, at most [`MOST_PATHS`]; none when it is not
/// JSON.
fn paths_of(result: &str) -> Vec<String> {
    let Ok(value) = serde_json::from_str::<Value>(result) else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    let mut queue = std::collections::VecDeque::from([(String::new(), &value)]);
    while let Some((path, value)) = queue.pop_front() {
        let children: Vec<(String, &Value)> = match value {
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Value::Array(items) => items
                .iter()
                .take(MOST_ITEMS)
                .enumerate()
                .map(|(i, v)| (i.to_string(), v))
                .collect(),
            _ => continue,
        };
        for (key, child) in children {
            if paths.len() >= MOST_PATHS {
                return paths;
            }
            let child_path = if path.is_empty() {
                key
            } else {
                format!("{path}.{key}")
            };
            if child.is_object() || child.is_array() {
                queue.push_back((child_path, child));
            } else {
                paths.push(child_path);
            }
        }
    }
    paths
}

impl Check {
    /// The dotted path into the result: `metrics.accuracy`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The comparison.
    pub fn op(&self) -> CheckOp {
        self.op
    }

    /// The value compared with.
    pub fn value(&self) -> &CheckValue {
        &self.value
    }

    /// Judges the check against a run's result.
    ///
    /// A missing path or a `null` is [`Outcome::Unknown`]; a value of another type than the
    /// check's is [`Outcome::Failed`]. Numbers compare exactly as decimals. A `Value` holds
    /// its numbers as `f64` (or integers), so a number written with more digits than an `f64`
    /// keeps has lost them already: judge the result's JSON text with
    /// [`Check::evaluate_json`] where it is at hand.
    pub fn evaluate(&self, result: &Value) -> Verdict {
        self.evaluate_json(&result.to_string())
    }

    /// Judges the check against a run's result given as JSON text.
    ///
    /// Numbers are compared as the decimals written in the text, never through `f64`:
    /// `{"x":0.30000000000000001}` passes `x > 0.3`, and the verdict's line shows the number
    /// as written. Text that is not JSON judges as unknown.
    pub fn evaluate_json(&self, result: &str) -> Verdict {
        let check = self.to_string();
        let unknown = |found: Option<Value>, reason: String| Verdict {
            check: check.clone(),
            outcome: Outcome::Unknown,
            found,
            found_text: None,
            reason: Some(reason),
        };
        let Ok(mut here) = serde_json::from_str::<&RawValue>(result) else {
            return unknown(None, "the result is not JSON".to_owned());
        };
        for seg in self.path.split('.') {
            let next = match here.get().trim_start().as_bytes().first() {
                Some(b'{') => serde_json::from_str::<HashMap<String, &RawValue>>(here.get())
                    .ok()
                    .and_then(|mut map| map.remove(seg)),
                Some(b'[') => serde_json::from_str::<Vec<&RawValue>>(here.get())
                    .ok()
                    .and_then(|items| {
                        seg.parse::<usize>()
                            .ok()
                            .and_then(|i| items.get(i).copied())
                    }),
                _ => None,
            };
            let Some(next) = next else {
                let paths = paths_of(result);
                // Another item of the same list is not what was meant: `runs.2` of two runs.
                let other_item = |c: &str| {
                    let (a, b): (Vec<&str>, Vec<&str>) =
                        (self.path.split('.').collect(), c.split('.').collect());
                    a.len() == b.len()
                        && a.iter()
                            .zip(&b)
                            .all(|(x, y)| x == y || (is_index(x) && is_index(y)))
                };
                // Nor is a value the path goes past: `metrics.accuracy` for `metrics.accuracy.x`.
                let above = |c: &str| {
                    self.path
                        .strip_prefix(c)
                        .is_some_and(|rest| rest.starts_with('.'))
                };
                let candidates = paths
                    .iter()
                    .map(String::as_str)
                    .filter(|c| !other_item(c) && !above(c));
                let reason = match crate::did_you_mean(&self.path, candidates) {
                    Some(meant) => {
                        format!("the result has no {}; did you mean {meant}?", self.path)
                    }
                    None => format!("the result has no {}", self.path),
                };
                return unknown(None, reason);
            };
            here = next;
        }
        let text = here.get().trim();
        // A number is told by its text, not by what `Value` makes of it: `1e400` is past an
        // `f64` (no `Value` holds it) and still a number, compared exactly.
        let is_number = text.starts_with(|c: char| c == '-' || c.is_ascii_digit());
        let found: Option<Value> = serde_json::from_str(text).ok();
        if text == "null" {
            return unknown(
                Some(Value::Null),
                format!("the result's {} is null", self.path),
            );
        }
        let passed = match (&self.value, &found) {
            (CheckValue::Number(want), _) if is_number => {
                match (Decimal::parse(text), Decimal::parse(want)) {
                    (Some(got), Some(want)) => self.op.holds(got.cmp(&want)),
                    _ => false,
                }
            }
            (CheckValue::Bool(want), Some(Value::Bool(got))) => self.op.holds(got.cmp(want)),
            (CheckValue::String(want), Some(Value::String(got))) => {
                self.op.holds(got.as_str().cmp(want.as_str()))
            }
            _ => false,
        };
        let found_text = is_number.then(|| text.to_owned());
        Verdict {
            check,
            outcome: if passed {
                Outcome::Passed
            } else {
                Outcome::Failed
            },
            found,
            found_text,
            reason: None,
        }
    }
}
