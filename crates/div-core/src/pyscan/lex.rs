//! Python source read into tokens (names, operators, values) and joined into logical lines
//! (brackets, backslashes, strings over several lines), as Python's tokenizer joins them.

/// A token, as much of it as the scan needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    Name(String),
    Op(&'static str),
    /// A string or a number: a value, never a name.
    Value,
}

/// One logical line: its indentation and its tokens.
pub(crate) struct Line {
    pub(crate) indent: usize,
    pub(crate) toks: Vec<Tok>,
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
pub(crate) fn lines(text: &str) -> Result<Vec<Line>, &'static str> {
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
