//! Snapshot filters: replace what changes from run to run (ports, temp dirs, durations) so
//! a snapshot holds only what a test means.

use std::sync::LazyLock;

use regex::Regex;

static PORT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(127\.0\.0\.1|localhost|\[::1\]):\d+").expect("a valid pattern"));
static TEMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(/private)?(/tmp|/var/folders/[^\s`']*)/[^\s`']*").expect("a valid pattern")
});
static DURATION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d+(\.\d+)?(ns|µs|us|ms|s)\b").expect("a valid pattern"));

/// `text` with `127.0.0.1:4242` → `127.0.0.1:[PORT]`, paths under a temp dir → `[TEMP]`
/// and durations (`1.5s`, `30ms`) → `[DURATION]`.
pub fn filter_snapshot(text: &str) -> String {
    let text = PORT.replace_all(text, "$1:[PORT]");
    let text = TEMP.replace_all(&text, "[TEMP]");
    DURATION.replace_all(&text, "[DURATION]").into_owned()
}
