//! `docs/cli/reference.md` is `div`'s help, generated; this fails when they differ.
//! `UPDATE_DOCS=1 cargo test -p div-cli` rewrites it.

use crate::support::DIV;

const COMMANDS: &[&[&str]] = &[
    &[],
    &["run"],
    &["eval"],
    &["evals"],
    &["models"],
    &["models", "push"],
    &["models", "ls"],
    &["models", "show"],
    &["models", "rm"],
    &["logs"],
    &["stop"],
    &["runs"],
    &["storage"],
    &["storage", "put"],
    &["storage", "get"],
    &["storage", "ls"],
    &["storage", "rm"],
    &["secrets"],
    &["secrets", "set"],
    &["secrets", "ls"],
    &["secrets", "rm"],
    &["result"],
    &["telemetry"],
    &["config"],
    &["login"],
    &["image"],
    &["image", "ls"],
    &["image", "prune"],
    &["dashboard"],
    &["server"],
    &["server", "run"],
    &["server", "start"],
    &["server", "stop"],
    &["server", "status"],
    &["server", "users"],
    &["server", "users", "add"],
    &["server", "users", "ls"],
    &["server", "users", "revoke"],
    &["server", "users", "set"],
    &["server", "tokens"],
    &["server", "tokens", "add"],
    &["server", "tokens", "ls"],
    &["server", "tokens", "revoke"],
    &["server", "audit"],
    &["server", "limit"],
];

fn reference() -> String {
    let mut out = String::from(
        "# div command reference\n\nGenerated from `div --help` by `UPDATE_DOCS=1 cargo test -p div-cli`; do not edit.\n",
    );
    for words in COMMANDS {
        let output = std::process::Command::new(DIV)
            .args(*words)
            .arg("--help")
            .env("NO_COLOR", "1")
            .env("COLUMNS", "100")
            .output()
            .expect("div runs");
        assert!(output.status.success(), "div {words:?} --help fails");
        let title = if words.is_empty() {
            "div".to_string()
        } else {
            format!("div {}", words.join(" "))
        };
        out.push_str(&format!(
            "\n## `{title}`\n\n```text\n{}```\n",
            String::from_utf8_lossy(&output.stdout)
        ));
    }
    out
}

#[test]
#[allow(clippy::disallowed_methods)]
fn the_reference_is_the_help() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli/reference.md");
    let generated = reference();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(path, &generated).expect("write the reference");
    }
    let written = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        written == generated,
        "docs/cli/reference.md differs from `div --help`: run `UPDATE_DOCS=1 cargo test -p div-cli`"
    );
}
