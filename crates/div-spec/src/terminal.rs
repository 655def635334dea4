//! Text a run provides (a failed run's reason, names, a result's strings), made safe to
//! print on a terminal.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is one a terminal would act on rather than show: a C0 control other than
/// `\n` and `\t`, DEL, a C1 control (`U+009B` starts an escape sequence as `ESC [` does), or a
/// bidirectional control, which reorders what follows it on the line.
pub fn is_terminal_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every [`is_terminal_control`] character written as a JSON-style escape
/// (`ESC` becomes `\u001b`), so it shows what it holds instead of acting on the terminal.
/// Inside a JSON string the escape means the same character, so JSON stays JSON. Text with
/// none is returned as it is.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_terminal_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_terminal_control(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}
