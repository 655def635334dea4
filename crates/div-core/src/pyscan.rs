//! What a Python file defines at module level, read without Python: enough to refuse
//! `train.py::mian` before anything is billed, and never enough to refuse a run that works.
//!
//! The scan reads the source into tokens (names, operators, strings, numbers), joins them into
//! logical lines (brackets, backslashes) and looks at each statement that runs at module level:
//! `def` and `async def`, `class`, assignments (plain, annotated, chained, unpacked, walrus),
//! `import` and `from … import`, the targets of `for`, `with … as` and `except … as`, and
//! `type X = …`. The bodies of `if`, `try`, `for`, `with` and `while` run at module level and
//! are read; the bodies of `def` and `class` are not.
//!
//! A name a function declares `global` is counted as defined. When the file can bind names
//! some other way, the scan says it cannot tell ([`Defines::Unknown`]) and the run is placed:
//! `from x import *`, `globals()`, `locals()`, `vars()`, `exec` (by their own names, not as
//! attributes: `model.eval()` is no matter), `sys.modules`, a module-level `__getattr__`, a
//! `match` statement, a name that is not ASCII, and anything it does not read (not UTF-8, an
//! unclosed string or bracket, a stray backslash). It never panics, on any bytes.
//!
//! Why over 700 lines: some 300 of them are its tests (Python's own syntax corner by corner);
//! the scanner itself is about 700.

use std::collections::BTreeSet;

use div_spec::did_you_mean;

/// What a Python file defines at module level, as far as the scan can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Defines {
    /// Every name the file can define at module level (perhaps more, never fewer).
    Names(BTreeSet<String>),
    /// The file may define names the scan cannot see; why.
    Unknown(&'static str),
}

impl Defines {
    /// Whether `name` may be defined: true unless the scan is sure it is not.
    pub fn may_define(&self, name: &str) -> bool {
        match self {
            Defines::Names(names) => names.contains(name),
            Defines::Unknown(_) => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Name(String),
    Op(&'static str),
    /// A string or a number: a value, never a name.
    Value,
}

/// One logical line: its indentation and its tokens.
struct Line {
    indent: usize,
    toks: Vec<Tok>,
}

/// What, anywhere in a file, may bind module-level names the scan cannot see: `sys.modules`,
/// and these called by their own name (not as an attribute: `model.eval()` is no matter).
/// `vars` only without arguments (`vars(args)` reads an object).
fn opaque(toks: &[Tok]) -> Option<&'static str> {
    for (i, tok) in toks.iter().enumerate() {
        let Tok::Name(name) = tok else { continue };
        let before = i.checked_sub(1).and_then(|j| toks.get(j));
        let attribute = matches!(before, Some(Tok::Op(".")));
        let defined = matches!(before, Some(Tok::Name(n)) if n == "def" || n == "class");
        let after = toks.get(i + 1);
        let why = match name.as_str() {
            "modules"
                if attribute
                    && matches!(i.checked_sub(2).and_then(|j| toks.get(j)), Some(Tok::Name(n)) if n == "sys") =>
            {
                "`sys.modules`"
            }
            "globals" if !attribute && !defined => "`globals()`",
            "locals" if !attribute && !defined => "`locals()`",
            "exec" if !attribute && !defined => "`exec`",
            "vars"
                if !attribute
                    && !defined
                    && after == Some(&Tok::Op("("))
                    && toks.get(i + 2) == Some(&Tok::Op(")")) =>
            {
                "`vars()`"
            }
            _ => continue,
        };
        return Some(why);
    }
    None
}

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// What `source`, the bytes of a `.py` file, defines at module level.
pub fn module_names(source: &[u8]) -> Defines {
    let Ok(text) = std::str::from_utf8(source) else {
        return Defines::Unknown("the file is not UTF-8");
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines = match lines(text) {
        Ok(lines) => lines,
        Err(why) => return Defines::Unknown(why),
    };
    let mut names = BTreeSet::new();
    for line in &lines {
        if let Some(why) = opaque(&line.toks) {
            return Defines::Unknown(why);
        }
        for (i, tok) in line.toks.iter().enumerate() {
            match tok {
                // Python reads `ｍａｉｎ` as `main` (NFKC): a name the scan would not match.
                Tok::Name(name) if !name.is_ascii() => {
                    return Defines::Unknown("a name that is not ASCII");
                }
                // `global main` in a function binds `main` at module level when it runs:
                // counted as defined.
                Tok::Name(name) if name == "global" => {
                    for t in &line.toks[i + 1..] {
                        match t {
                            Tok::Name(n) => {
                                names.insert(n.clone());
                            }
                            Tok::Op(",") => {}
                            _ => break,
                        }
                    }
                }
                _ => {}
            }
        }
    }
    // The indentation of the `def` or `class` whose body is being skipped.
    let mut skipping: Option<usize> = None;
    for line in &lines {
        if let Some(header) = skipping {
            if line.indent > header {
                continue;
            }
            skipping = None;
        }
        if let Some(Tok::Op("@")) = line.toks.first() {
            continue; // a decorator
        }
        match statements(&line.toks, &mut names) {
            Ok(true) => skipping = Some(line.indent),
            Ok(false) => {}
            Err(why) => return Defines::Unknown(why),
        }
    }
    if names.contains("__getattr__") {
        return Defines::Unknown("a module-level `__getattr__`");
    }
    Defines::Names(names)
}

/// Reads the statements of one logical line (split at `;`) into `names`; true when the line
/// opens the body of a `def` or `class` on the lines that follow.
fn statements(toks: &[Tok], names: &mut BTreeSet<String>) -> Result<bool, &'static str> {
    let mut opens_body = false;
    for stmt in split_depth0(toks, |t| *t == Tok::Op(";")) {
        opens_body = statement(stmt, names)?;
    }
    Ok(opens_body)
}

/// One statement; true when it is a `def` or `class` header whose body follows on the next
/// lines.
fn statement(stmt: &[Tok], names: &mut BTreeSet<String>) -> Result<bool, &'static str> {
    let stmt = match stmt.first() {
        Some(Tok::Name(n)) if n == "async" => &stmt[1..],
        _ => stmt,
    };
    let Some(first) = stmt.first() else {
        return Ok(false);
    };
    let word = match first {
        Tok::Name(n) => n.as_str(),
        _ => "",
    };
    let next_is_name = matches!(stmt.get(1), Some(Tok::Name(_)));
    match word {
        "def" | "class" => {
            if let Some(Tok::Name(name)) = stmt.get(1) {
                names.insert(name.clone());
            }
            let colon = first_depth0(stmt, |t| *t == Tok::Op(":"));
            return Ok(match colon {
                Some(at) => at + 1 == stmt.len(),
                None => true,
            });
        }
        "import" => {
            for part in split_depth0(&stmt[1..], |t| *t == Tok::Op(",")) {
                let bound = match part.iter().position(|t| *t == Tok::Name("as".into())) {
                    Some(at) => part.get(at + 1),
                    None => part.first(),
                };
                if let Some(Tok::Name(n)) = bound {
                    names.insert(n.clone());
                }
            }
            return Ok(false);
        }
        "from" => {
            let Some(at) = stmt.iter().position(|t| *t == Tok::Name("import".into())) else {
                return Ok(false);
            };
            let rest: Vec<Tok> = stmt[at + 1..]
                .iter()
                .filter(|t| !matches!(t, Tok::Op("(" | ")")))
                .cloned()
                .collect();
            for part in split_depth0(&rest, |t| *t == Tok::Op(",")) {
                if part.first() == Some(&Tok::Op("*")) {
                    return Err("`from … import *`");
                }
                let bound = match part.iter().position(|t| *t == Tok::Name("as".into())) {
                    Some(at) => part.get(at + 1),
                    None => part.first(),
                };
                if let Some(Tok::Name(n)) = bound {
                    names.insert(n.clone());
                }
            }
            return Ok(false);
        }
        "match" | "case"
            if stmt.last() == Some(&Tok::Op(":"))
                && !matches!(stmt.get(1), Some(Tok::Op("=" | "." | "[" | "(" | ":"))) =>
        {
            return Err("a `match` statement");
        }
        "type" if next_is_name && matches!(stmt.get(2), Some(Tok::Op("=" | "["))) => {
            if let Some(Tok::Name(n)) = stmt.get(1) {
                names.insert(n.clone());
            }
            return Ok(false);
        }
        "if" | "elif" | "else" | "while" | "for" | "try" | "except" | "finally" | "with" => {
            let Some(colon) = first_depth0(stmt, |t| *t == Tok::Op(":")) else {
                return Ok(false);
            };
            let header = &stmt[..colon];
            walrus(header, names);
            match word {
                "for" => {
                    let end = header
                        .iter()
                        .position(|t| *t == Tok::Name("in".into()))
                        .unwrap_or(header.len());
                    targets(&header[1..end], names);
                }
                "with" | "except" => {
                    for (i, t) in header.iter().enumerate() {
                        if *t == Tok::Name("as".into()) {
                            match header.get(i + 1) {
                                Some(Tok::Name(n)) => {
                                    names.insert(n.clone());
                                }
                                // `as (a, b)`: more names than bound is harmless.
                                _ => targets(&header[i + 1..], names),
                            }
                        }
                    }
                }
                _ => {}
            }
            // A body on the same line: `if x: main = f`.
            return statement(&stmt[colon + 1..], names);
        }
        _ => {}
    }
    walrus(stmt, names);
    let parts = split_depth0(stmt, |t| *t == Tok::Op("="));
    if parts.len() > 1 {
        for target in &parts[..parts.len() - 1] {
            annotated_or_targets(target, names);
        }
    } else if let Some(at) = first_depth0(stmt, |t| *t == Tok::Op(":")) {
        // `x: int` without a value still names `x` (for a checker; harmless here).
        targets(&stmt[..at], names);
    }
    Ok(false)
}

/// `x: int = …` binds `x` (the part before the annotation is read by [`targets`]).
fn annotated_or_targets(target: &[Tok], names: &mut BTreeSet<String>) {
    match first_depth0(target, |t| *t == Tok::Op(":")) {
        // `(x): int = …` too.
        Some(at) => targets(&target[..at], names),
        None => targets(target, names),
    }
}

/// The names an assignment target binds: names that are not attributes, not subscripted or
/// called, and not inside a subscript or a call.
fn targets(target: &[Tok], names: &mut BTreeSet<String>) {
    // For each open bracket: whether names inside it are bound (a tuple or list target) or
    // not (a subscript or a call).
    let mut binds: Vec<bool> = Vec::new();
    let mut prev: Option<&Tok> = None;
    for (i, t) in target.iter().enumerate() {
        match t {
            Tok::Op("(" | "[" | "{") => {
                let subscript = matches!(prev, Some(Tok::Name(_) | Tok::Op(")" | "]")));
                let outer = binds.last().copied().unwrap_or(true);
                binds.push(outer && !subscript);
            }
            Tok::Op(")" | "]" | "}") => {
                binds.pop();
            }
            Tok::Name(n) => {
                let inside = binds.last().copied().unwrap_or(true);
                let attribute = matches!(prev, Some(Tok::Op(".")));
                let followed = matches!(target.get(i + 1), Some(Tok::Op("." | "[" | "(")));
                if inside && !attribute && !followed && !KEYWORDS.contains(&n.as_str()) {
                    names.insert(n.clone());
                }
            }
            _ => {}
        }
        prev = Some(t);
    }
}

/// `(name := …)` binds `name` at module level, wherever it is in a module-level statement.
fn walrus(toks: &[Tok], names: &mut BTreeSet<String>) {
    for pair in toks.windows(2) {
        if let [Tok::Name(n), Tok::Op(":=")] = pair {
            names.insert(n.clone());
        }
    }
}

/// The pieces of `toks` between tokens at bracket depth 0 for which `is_sep` holds.
fn split_depth0(toks: &[Tok], is_sep: impl Fn(&Tok) -> bool) -> Vec<&[Tok]> {
    let mut pieces = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Op("(" | "[" | "{") => depth += 1,
            Tok::Op(")" | "]" | "}") => depth = depth.saturating_sub(1),
            _ if depth == 0 && is_sep(t) => {
                pieces.push(&toks[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    pieces.push(&toks[start..]);
    pieces
}

/// The index of the first token at bracket depth 0 for which `is` holds (a `lambda`'s own
/// colon is passed over).
fn first_depth0(toks: &[Tok], is: impl Fn(&Tok) -> bool) -> Option<usize> {
    let mut depth = 0usize;
    let mut lambdas = 0usize;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Op("(" | "[" | "{") => depth += 1,
            Tok::Op(")" | "]" | "}") => depth = depth.saturating_sub(1),
            Tok::Name(n) if depth == 0 && n == "lambda" => lambdas += 1,
            Tok::Op(":") if depth == 0 && lambdas > 0 => lambdas -= 1,
            _ if depth == 0 && is(t) => return Some(i),
            _ => {}
        }
    }
    None
}

const OPS3: &[&str] = &["**=", "//=", ">>=", "<<=", "..."];
const OPS2: &[&str] = &[
    "==", "!=", "<=", ">=", ":=", "->", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", "**",
    "//", "<<", ">>",
];
const OPS1: &[&str] = &[
    "(", ")", "[", "]", "{", "}", ":", ";", ",", ".", "=", "+", "-", "*", "/", "%", "&", "|", "^",
    "~", "<", ">", "@", "!",
];

/// The source as logical lines of tokens; blank and comment-only lines are left out.
fn lines(text: &str) -> Result<Vec<Line>, &'static str> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut depth = 0usize;
    let mut current: Option<Line> = None;
    let mut at_line_start = true;
    while i < chars.len() {
        if at_line_start && depth == 0 && current.is_none() {
            // Indentation of a new logical line.
            let mut indent = 0;
            while let Some(&c) = chars.get(i) {
                match c {
                    ' ' => indent += 1,
                    '\t' => indent = (indent / 8 + 1) * 8,
                    '\x0c' => indent = 0,
                    _ => break,
                }
                i += 1;
            }
            at_line_start = false;
            match chars.get(i) {
                None => break,
                Some('\n' | '\r' | '#') => {}
                Some(_) => {
                    current = Some(Line {
                        indent,
                        toks: Vec::new(),
                    })
                }
            }
            continue;
        }
        let c = chars[i];
        match c {
            ' ' | '\t' | '\x0c' => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\r' | '\n' => {
                i += 1;
                if depth == 0 {
                    if let Some(line) = current.take() {
                        out.push(line);
                    }
                    at_line_start = true;
                }
            }
            '\\' => match (chars.get(i + 1), chars.get(i + 2)) {
                (Some('\n'), _) => i += 2,
                (Some('\r'), Some('\n')) => i += 3,
                (Some('\r'), _) => i += 2,
                _ => return Err("a backslash outside a string"),
            },
            _ => {
                let line = current.get_or_insert_with(|| Line {
                    indent: 0,
                    toks: Vec::new(),
                });
                let (tok, next) = token(&chars, i)?;
                match &tok {
                    Tok::Op("(" | "[" | "{") => depth += 1,
                    Tok::Op(")" | "]" | "}") => {
                        depth = depth
                            .checked_sub(1)
                            .ok_or("a bracket closed that never opened")?
                    }
                    _ => {}
                }
                line.toks.push(tok);
                i = next;
            }
        }
    }
    if depth != 0 {
        return Err("a bracket that never closes");
    }
    if let Some(line) = current {
        out.push(line);
    }
    Ok(out)
}

/// The token at `i` (not whitespace, a comment or a newline), and where the next one starts.
fn token(chars: &[char], i: usize) -> Result<(Tok, usize), &'static str> {
    let c = chars[i];
    if c.is_alphabetic() || c == '_' {
        let mut j = i;
        while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
            j += 1;
        }
        if matches!(chars.get(j), Some('\'' | '"')) && j - i <= 2 {
            let prefix: String = chars[i..j].iter().collect::<String>().to_ascii_lowercase();
            if prefix.chars().all(|p| "rbuft".contains(p)) {
                let formatted = prefix.contains('f') || prefix.contains('t');
                return Ok((Tok::Value, string(chars, j, formatted)?));
            }
        }
        return Ok((Tok::Name(chars[i..j].iter().collect()), j));
    }
    if c == '\'' || c == '"' {
        return Ok((Tok::Value, string(chars, i, false)?));
    }
    if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
        let mut j = i;
        while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '.' || chars[j] == '_')
        {
            j += 1;
        }
        return Ok((Tok::Value, j));
    }
    for ops in [OPS3, OPS2, OPS1] {
        for op in ops {
            let len = op.chars().count();
            if chars.len() >= i + len && op.chars().eq(chars[i..i + len].iter().copied()) {
                return Ok((Tok::Op(op), i + len));
            }
        }
    }
    Err("a character Python does not have outside a string")
}

/// The end of the string whose opening quote is at `i`. In an f-string, quotes inside a
/// `{…}` replacement field open strings of their own (Python 3.12 allows the same quote).
fn string(chars: &[char], i: usize, formatted: bool) -> Result<usize, &'static str> {
    let quote = chars[i];
    let triple = chars.get(i + 1) == Some(&quote) && chars.get(i + 2) == Some(&quote);
    let mut j = if triple { i + 3 } else { i + 1 };
    // Depth of `{` in an f-string: above 0, inside a replacement field.
    let mut braces = 0usize;
    loop {
        let Some(&c) = chars.get(j) else {
            return Err("a string that never closes");
        };
        match c {
            '\\' => j += 2,
            '\n' if !triple && braces == 0 => return Err("a string that never closes"),
            '{' if formatted => {
                if braces == 0 && chars.get(j + 1) == Some(&'{') {
                    j += 2;
                } else {
                    braces += 1;
                    j += 1;
                }
            }
            '}' if formatted && braces > 0 => {
                braces -= 1;
                j += 1;
            }
            '\'' | '"' if formatted && braces > 0 => {
                j = string(chars, j, false)?;
            }
            _ if c == quote && braces == 0 => {
                if !triple {
                    return Ok(j + 1);
                }
                if chars.get(j + 1) == Some(&quote) && chars.get(j + 2) == Some(&quote) {
                    return Ok(j + 3);
                }
                j += 1;
            }
            _ => j += 1,
        }
    }
}

/// A `.py` file larger than this is not scanned (its run is placed).
const MOST_SCANNED: u64 = 4 << 20;

/// What can be known wrong with an entrypoint once the shipment is known, found before
/// anything is created:
///
/// - the `.py` file it names is not shipped (with the shipped `.py` file it most likely
///   meant);
/// - `file.py::function` where the file surely defines no such name at module level (with
///   the name it most likely meant);
/// - the user's own command starts with a shipped `.py` file that `sh` cannot run (no `/`,
///   so `sh` looks for it on `PATH`, or not executable), with the `python` form that works.
pub(crate) fn check_shipped(
    entrypoint: &div_spec::Entrypoint,
    shipment: &div_ship::Shipment,
    dir: &std::path::Path,
) -> Result<(), crate::RunError> {
    use crate::RunError;
    use div_spec::EntrypointKind;
    let shipped_py = || {
        shipment
            .manifest
            .entries
            .iter()
            .map(|e| e.path.as_str())
            .filter(|p| p.ends_with(".py"))
    };
    if let Some(file) = entrypoint.python_file() {
        if !shipment.contains(file) {
            return Err(match did_you_mean(file, shipped_py()) {
                Some(meant) => RunError::EntrypointMisspelled {
                    file: file.to_string(),
                    meant: meant.to_string(),
                },
                None => RunError::EntrypointNotShipped {
                    file: file.to_string(),
                    dir: dir.to_path_buf(),
                },
            });
        }
        if let EntrypointKind::PythonFunction { function, .. } = entrypoint.kind()
            && let Some(entry) = shipment.manifest.get(file)
            && entry.size <= MOST_SCANNED
            && let Ok(source) = shipment.read(file)
            && let Defines::Names(names) = module_names(&source)
            && !names.contains(function)
        {
            let meant =
                did_you_mean(function, names.iter().map(String::as_str)).map(|m| m.to_string());
            return Err(RunError::NoSuchFunction {
                file: file.to_string(),
                function: function.clone(),
                meant,
                defined: names.into_iter().collect(),
            });
        }
        return Ok(());
    }
    if *entrypoint.kind() != EntrypointKind::Command {
        return Ok(());
    }
    let command = entrypoint.command();
    let Some(first) = command.split_whitespace().next() else {
        return Ok(());
    };
    let path = first.strip_prefix("./").unwrap_or(first);
    if !path.ends_with(".py") {
        return Ok(());
    }
    let Some(entry) = shipment.manifest.get(path) else {
        return Ok(());
    };
    let why = if !first.contains('/') {
        format!("`sh` looks for `{first}` on PATH, not in the shipped code")
    } else if !entry.executable {
        format!("`{path}` is not executable")
    } else {
        return Ok(());
    };
    let rest = command[command.find(first).unwrap_or(0) + first.len()..].trim_start();
    let python = if rest.is_empty() {
        format!("python {path}")
    } else {
        format!("python {path} {rest}")
    };
    let plain = python
        .bytes()
        .all(|b| !b"&|;<>$`()\\\"'*?!#~{}".contains(&b));
    let meant = if plain {
        format!("div run -- {python}")
    } else {
        format!("div run -- {}", div_spec::shell_quote(&python))
    };
    Err(RunError::ScriptNotRunnable {
        first: first.to_string(),
        why,
        meant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(src: &str) -> Vec<String> {
        match module_names(src.as_bytes()) {
            Defines::Names(n) => n.into_iter().collect(),
            Defines::Unknown(why) => panic!("unknown: {why}\n{src}"),
        }
    }

    fn unknown(src: &str) -> &'static str {
        match module_names(src.as_bytes()) {
            Defines::Unknown(why) => why,
            Defines::Names(n) => panic!("expected unknown, got {n:?}\n{src}"),
        }
    }

    #[test]
    fn module_level_definitions_are_found() {
        let src = r#"
"""A docstring with def fake(): inside."""
import os, numpy as np
import torch.nn
from sklearn.neural_network import BernoulliRBM
from x import (a,
    b as bee)
from . import sibling

LR = 1e-3
x: int = 3
y: float
p, (q, *r) = 1, (2, 3)
s = t = 4
obj.attr = 5
d["key"] = 6
counter += 1

@decorator(arg=1)
def main(epochs: int = 3) -> None:
    inner = 1
    def nested():
        pass
    print(f"{epochs!r:>{width}} {d["k"]}")

async def serve(): return 1

class Model(Base):
    field = 1
    def method(self):
        pass

if __name__ == "__main__":
    main()
else:
    fallback = 1

try:
    from fast import loader
except ImportError as err:
    def loader():
        pass

for i, (j, k) in enumerate(pairs):
    pass
with open("f") as fh, lock:
    pass
if (n := 10) > 5: late = n
type Alias = list[int]
f = lambda v=1: v
"#;
        let got = names(src);
        for want in [
            "os",
            "np",
            "torch",
            "BernoulliRBM",
            "a",
            "bee",
            "sibling",
            "LR",
            "x",
            "y",
            "p",
            "q",
            "r",
            "s",
            "t",
            "main",
            "serve",
            "Model",
            "fallback",
            "loader",
            "err",
            "i",
            "j",
            "k",
            "fh",
            "n",
            "late",
            "Alias",
            "f",
        ] {
            assert!(got.contains(&want.to_string()), "{want} in {got:?}");
        }
        for not in [
            "inner",
            "nested",
            "field",
            "method",
            "fake",
            "obj",
            "attr",
            "d",
            "key",
            "epochs",
            "counter",
            "numpy",
            "nn",
            "neural_network",
            "ImportError",
            "enumerate",
            "pairs",
        ] {
            assert!(!got.contains(&not.to_string()), "{not} in {got:?}");
        }
    }

    #[test]
    fn what_it_cannot_tell_it_says() {
        assert_eq!(unknown("from x import *\n"), "`from … import *`");
        assert_eq!(unknown("globals()['main'] = f\n"), "`globals()`");
        assert_eq!(
            names("def setup():\n    global main, other\n    main = f\n"),
            ["main", "other", "setup"]
        );
        assert_eq!(unknown("ｍａｉｎ = 1\n"), "a name that is not ASCII");
        assert_eq!(unknown("print(vars())\n"), "`vars()`");
        assert_eq!(
            unknown("def __getattr__(name):\n    pass\n"),
            "a module-level `__getattr__`"
        );
        assert_eq!(
            unknown("import sys\nsys.modules[__name__] = M()\n"),
            "`sys.modules`"
        );
        assert_eq!(unknown("exec('main = 1')\n"), "`exec`");
        // What ML scripts do all day is no reason to give up.
        assert_eq!(
            names(
                "import torch\nmodel = torch.nn.Linear(1, 1)\nmodel.eval()\nfor m in model.modules(): pass\nprint(vars(args))\nsetattr(cfg, 'lr', 1)\ndef eval(): pass\n"
            ),
            ["eval", "m", "model", "torch"]
        );
        assert_eq!(
            unknown("match x:\n    case main:\n        pass\n"),
            "a `match` statement"
        );
        assert_eq!(unknown("s = 'never closed\n"), "a string that never closes");
        assert_eq!(unknown("f(\n"), "a bracket that never closes");
        assert_eq!(unknown("x = 1 \\ 2\n"), "a backslash outside a string");
        assert_eq!(
            unknown("x = a ? b\n"),
            "a character Python does not have outside a string"
        );
        assert!(matches!(module_names(b"\xff\xfe"), Defines::Unknown(_)));
    }

    #[test]
    fn lines_join_across_brackets_backslashes_and_triple_quotes() {
        let src = "x = (1,\n  2)\ny = 1 + \\\n  2\nz = '''\ndef fake():\n'''\n\tdef tabbed(): pass\nmatch = 3\n";
        assert_eq!(names(src), ["match", "tabbed", "x", "y", "z"]);
        assert_eq!(names("\u{feff}def main(): pass\r\n"), ["main"]);
        assert_eq!(names("(pars): bool = True\nobj.attr: int = 1\n"), ["pars"]);
        assert_eq!(names(""), Vec::<String>::new());
    }

    /// Pieces of Python, so the scan gets deep into strings, brackets and statements.
    const PIECES: &[&str] = &[
        "def ", "class ", "async ", "import ", "from ", " as ", "global ", "lambda ", "if ",
        "for ", " in ", "with ", "match ", "type ", "f\"", "f'", "'''", "\"\"\"", "\"", "'", "\\",
        "{", "}", "{{", "(", ")", "[", "]", ":", "=", ":=", "+=", ",", ";", ".", "*", "@", "#",
        "\n", "\r\n", "\t", " ", "    ", "main", "x", "1", "é", "\u{feff}", "\\\n",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Any bytes at all: an answer, never a panic.
        #[test]
        fn never_panics_on_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = module_names(&bytes);
        }

        /// Python-like text: an answer, never a panic; a name it lists is one the text has.
        #[test]
        fn never_panics_on_python_like_text(pieces in proptest::collection::vec(proptest::sample::select(PIECES), 0..80)) {
            let src = pieces.concat();
            if let Defines::Names(names) = module_names(src.as_bytes()) {
                for n in names {
                    proptest::prop_assert!(src.contains(&n), "{n} in {src:?}");
                }
            }
        }
    }

    /// What Python's own parser says the module level of each of 600 files of its standard
    /// library binds (`ast`), and what the scan says: every name Python finds, the scan finds
    /// (it may find more, or say it cannot tell; it never misses one, which would refuse a run
    /// that works).
    #[test]
    fn never_misses_a_name_python_finds_in_its_standard_library() {
        let out = std::process::Command::new("python3")
            .args(["-c", PYTHON_AST_NAMES])
            .output()
            .expect("python3 runs (the local control plane's runs need it too)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let (mut read, mut missing) = (0, Vec::new());
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("json");
            let path = v["path"].as_str().unwrap_or_default();
            let Ok(bytes) = std::fs::read(path) else {
                continue;
            };
            if let Defines::Names(got) = module_names(&bytes) {
                read += 1;
                for want in v["names"].as_array().into_iter().flatten() {
                    let want = want.as_str().unwrap_or_default();
                    if !got.contains(want) {
                        missing.push(format!("{path}: {want}"));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "{missing:#?}");
        // Most of the library is read, not given up on.
        assert!(read > 400, "only {read} files read");
    }

    const PYTHON_AST_NAMES: &str = r#"import ast, json, sys, glob
import os
root = os.path.dirname(ast.__file__)
files = sorted(glob.glob(root + '/**/*.py', recursive=True))[:600]
for p in files:
    try:
        src = open(p, 'rb').read()
        tree = ast.parse(src)
    except Exception:
        continue
    names = set()
    def targets(t):
        if isinstance(t, ast.Name): names.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts: targets(e)
        elif isinstance(t, ast.Starred): targets(t.value)
    def walk(body):
        for n in body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, ast.Assign):
                for t in n.targets: targets(t)
            elif isinstance(n, (ast.AnnAssign, ast.AugAssign)):
                targets(n.target)
            elif isinstance(n, ast.Import):
                for a in n.names: names.add(a.asname or a.name.split('.')[0])
            elif isinstance(n, ast.ImportFrom):
                for a in n.names:
                    if a.name != '*': names.add(a.asname or a.name)
            elif isinstance(n, (ast.For, ast.AsyncFor)):
                targets(n.target); walk(n.body); walk(n.orelse)
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                for i in n.items:
                    if i.optional_vars is not None: targets(i.optional_vars)
                walk(n.body)
            elif isinstance(n, ast.If) or isinstance(n, ast.While):
                walk(n.body); walk(n.orelse)
            elif isinstance(n, ast.Try) or (hasattr(ast, 'TryStar') and isinstance(n, ast.TryStar)):
                walk(n.body); walk(n.orelse); walk(n.finalbody)
                for h in n.handlers:
                    if h.name: names.add(h.name)
                    walk(h.body)
    walk(tree.body)
    print(json.dumps({"path": p, "names": sorted(names)}))
"#;
}
