//! Small formatting helpers.
//!
//! Stand-ins for div-spec's `format_duration`, `format_bytes` and `Money` display until that
//! crate lands; they print the same strings.

/// `12m 40s`, `1h 0m`, `40s`.
pub(crate) fn format_duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// `$1.05` from 105 cents.
pub(crate) fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let c = cents.unsigned_abs();
    format!("{sign}${}.{:02}", c / 100, c % 100)
}

/// The API's slug rule, until div-spec's `Slug` lands: lowercase ASCII letters and digits,
/// every other run of characters one `-`, trimmed, at most 63 characters.
pub(crate) fn slugify(name: &str) -> Option<String> {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let out: String = out.chars().take(63).collect();
    let out = out.trim_end_matches('-').to_string();
    (!out.is_empty()).then_some(out)
}
