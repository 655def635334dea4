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

mod lex;
pub(crate) mod shipped;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use self::lex::{Tok, lines};

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
