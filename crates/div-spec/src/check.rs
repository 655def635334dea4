//! Checks: what a run's result must say (`metrics.accuracy>=0.8`), and their verdicts.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
        "`{value}` in `{typed}` is not a value a check takes; write a number like `0.8`, `true`, `false`, or a string in quotes like `'{value}'`"
    )]
    BadValue { typed: String, value: String },
    /// `True`, `null` and other spellings that look like something else.
    #[error(
        "`{value}` in `{typed}` is ambiguous; write `{instead}`, or quote it as a string: `'{value}'`"
    )]
    Ambiguous {
        typed: String,
        value: String,
        instead: String,
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
        let value = parse_value(typed, op, value_text)?;
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

fn parse_value(typed: &str, op: CheckOp, text: &str) -> Result<CheckValue, CheckError> {
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
    if first == b'\'' || first == b'"' {
        let quote = char::from(first);
        let inner = &text[1..];
        return match inner.find(quote) {
            Some(end) if end + 1 == inner.len() => Ok(CheckValue::String(inner[..end].to_owned())),
            Some(_) => Err(CheckError::BadValue {
                typed: owned(),
                value: text.to_owned(),
            }),
            None => Err(CheckError::Unclosed { typed: owned() }),
        };
    }
    if Decimal::parse(text).is_some() {
        return Ok(CheckValue::Number(text.to_owned()));
    }
    let lower = text.to_ascii_lowercase();
    if matches!(lower.as_str(), "true" | "false") {
        return Err(CheckError::Ambiguous {
            typed: owned(),
            value: text.to_owned(),
            instead: lower,
        });
    }
    if lower == "null" || lower == "none" {
        return Err(CheckError::BadValue {
            typed: owned(),
            value: text.to_owned(),
        });
    }
    if is_bare(text) {
        return Ok(CheckValue::String(text.to_owned()));
    }
    Err(CheckError::BadValue {
        typed: owned(),
        value: text.to_owned(),
    })
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
        let why = match (&self.reason, &self.found) {
            (Some(reason), _) => reason.clone(),
            (None, Some(found)) => format!("found {}", describe(found)),
            (None, None) => "nothing found".to_owned(),
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
        scalar => scalar.to_string(),
    }
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
    /// check's is [`Outcome::Failed`]. Numbers compare exactly as decimals.
    pub fn evaluate(&self, result: &Value) -> Verdict {
        let check = self.to_string();
        let mut here = result;
        for seg in self.path.split('.') {
            let next = match here {
                Value::Object(map) => map.get(seg),
                Value::Array(items) => seg.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            };
            let Some(next) = next else {
                return Verdict {
                    check,
                    outcome: Outcome::Unknown,
                    found: None,
                    reason: Some(format!("the result has no {}", self.path)),
                };
            };
            here = next;
        }
        if here.is_null() {
            return Verdict {
                check,
                outcome: Outcome::Unknown,
                found: Some(Value::Null),
                reason: Some(format!("the result's {} is null", self.path)),
            };
        }
        let passed = match (&self.value, here) {
            (CheckValue::Number(want), Value::Number(got)) => {
                match (Decimal::parse(&got.to_string()), Decimal::parse(want)) {
                    (Some(got), Some(want)) => self.op.holds(got.cmp(&want)),
                    _ => false,
                }
            }
            (CheckValue::Bool(want), Value::Bool(got)) => self.op.holds(got.cmp(want)),
            (CheckValue::String(want), Value::String(got)) => {
                self.op.holds(got.as_str().cmp(want.as_str()))
            }
            _ => false,
        };
        Verdict {
            check,
            outcome: if passed {
                Outcome::Passed
            } else {
                Outcome::Failed
            },
            found: Some(here.clone()),
            reason: None,
        }
    }
}
