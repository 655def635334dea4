//! Run-provided text escaped before it reaches the terminal.

use super::{Local, drives_a_terminal, text};

/// A run that plants escape sequences in its failure reason, its result's strings and the
/// names of files it leaves in a volume: none reach the terminal as they are.
#[test]
fn run_provided_text_is_escaped_before_the_terminal() {
    let local = Local::new();
    let script = r#"printf '{"s":"a\u001b]0;owned\u0007b\u009b2Jc\u202eevil"}' > "$DIVERGENT_RESULT_PATH"; mkdir -p /mnt/vol; : > "/mnt/vol/$(printf 'f\033[2Jg')"; printf 'boom \033]0;title\007 \302\233 1J\r\n'; exit 4"#;
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--no-upload",
        "--check",
        "s==x",
        "--",
        script,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(!drives_a_terminal(&stderr), "{stderr:?}");
    assert!(
        stderr.contains("boom \\u001b]0;title\\u0007 \\u009b 1J"),
        "{stderr}"
    );
    // The verdict line goes into the log, which is the run's own bytes and printed as they
    // are: the found string in it is escaped where it is written.
    let stdout = text(&out.stdout);
    let verdict = stdout
        .lines()
        .find(|l| l.starts_with("check failed: s == x"))
        .unwrap_or_default();
    assert!(!drives_a_terminal(verdict), "{verdict:?}");
    assert!(verdict.contains(r"\u009b2Jc\u202eevil"), "{verdict}");

    let runs = local.div(&["runs", "--all", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&runs.stdout).expect("JSON");
    let name = listed[0]["name"].as_str().expect("a name").to_owned();
    for args in [
        vec!["result", name.as_str()],
        vec!["result", name.as_str(), "--json"],
        vec!["runs", "--all"],
        vec!["logs", name.as_str(), "--json"],
        vec!["storage", "ls", "-r", "vol"],
        vec!["storage", "ls", "-r", "vol", "--json"],
    ] {
        let out = local.div(&args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        // `logs` prints the log itself on stderr with --json: that is the run's own bytes.
        if args[0] != "logs" {
            assert!(!drives_a_terminal(&stderr), "{args:?}: {stderr:?}");
        }
        assert!(!drives_a_terminal(&stdout), "{args:?}: {stdout:?}");
        if args.ends_with(&["--json"]) {
            serde_json::from_str::<serde_json::Value>(&stdout)
                .unwrap_or_else(|e| panic!("{args:?}: still JSON: {e}: {stdout}"));
        }
    }
    let ls = text(&local.div(&["storage", "ls", "-r", "vol"]).stdout);
    assert!(ls.contains(r"f\u001b[2Jg"), "{ls}");
}
