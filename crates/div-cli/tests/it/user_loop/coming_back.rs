//! Coming back to a run later is as good as staying attached; no runs yet said plainly;
//! charts that fill the terminal.

use insta::assert_snapshot;

use super::quickstart;
use crate::support::{DIV, World, text};

/// `div logs RUN --follow` ends as `div run` does: the same last line, the same exit code.
/// Without a name, `div logs`, `div result`, `div telemetry` and `div stop` act on the
/// project's latest run and say which.
#[test]
fn coming_back_is_as_good_as_staying_attached() {
    let local = quickstart();
    let attached = local.div(&["run", "--gpu", "cpu", "train.py::crash"]);
    assert_eq!(
        attached.status.code(),
        Some(3),
        "{}",
        text(&attached.stderr)
    );
    let attached_last = text(&attached.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let name = attached_last
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(name.starts_with("run-"), "{attached_last}");

    let followed = local.div(&["logs", &name, "--follow"]);
    assert_eq!(
        followed.status.code(),
        Some(3),
        "{}",
        text(&followed.stderr)
    );
    assert_eq!(text(&followed.stdout), text(&attached.stdout));
    assert_eq!(
        text(&followed.stderr).lines().last().unwrap_or_default(),
        attached_last
    );

    // No name: the latest run, said on stderr.
    let said = format!("{name}, the latest run of quickstart");
    let logs = local.div(&["logs", "--follow"]);
    assert_eq!(logs.status.code(), Some(3));
    assert_eq!(text(&logs.stderr).lines().next(), Some(said.as_str()));
    assert_eq!(text(&logs.stdout), text(&attached.stdout));

    let result = local.div(&["result"]);
    assert_eq!(text(&result.stderr).lines().next(), Some(said.as_str()));
    let telemetry = local.div(&["telemetry"]);
    assert_eq!(text(&telemetry.stderr).lines().next(), Some(said.as_str()));

    let detached = local.div(&["run", "-d", "--gpu", "cpu", "--", "sleep 30"]);
    let going = text(&detached.stdout).trim().to_string();
    let stop = local.div(&["stop"]);
    let stderr = text(&stop.stderr);
    assert_eq!(stop.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "{going}, the latest run of quickstart\n{going} was canceled after "
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn no_runs_yet_is_said_plainly() {
    let world = World::new().await;
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .and(wiremock::matchers::path("/v1/runs"))
        .respond_with(div_test_support::mock::json_response(
            200,
            &serde_json::json!({"runs": [], "next_cursor": null}),
        ))
        .mount(&world.server)
        .await;
    let done = world.div(&["logs"]).await;
    assert_eq!(done.code, 200);
    assert_snapshot!(done.stderr, @r"
    error: project `very-cool-classifier` has no runs yet, so there is no latest run to act on
    hint: name a run (`div runs --all` lists every project's), or start one with `div run`
    ");
}

const CHARTED: &str = r#"import json, os
with open(os.environ["DIVERGENT_TELEMETRY_PATH"], "a") as f:
    for step in range(20):
        f.write(json.dumps({"step": step, "loss": 1.0 / (step + 1)}) + "\n")
json.dump({"metrics": {"accuracy": 0.5}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
"#;

/// On a 150-column terminal, charts are 150 columns wide; piped, they keep their 60 cells.
/// A missed check is red on a terminal, in `div result` and on the last line, and plain with
/// `NO_COLOR`.
#[test]
fn charts_fill_the_terminal_and_missed_checks_are_red() {
    let local = quickstart();
    std::fs::write(local.project().join("charted.py"), CHARTED).expect("write");
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "charted.py",
        "--check",
        "metrics.accuracy>=0.8",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).ends_with(" · missed 1 of 1 check\n"));

    let transcript = local.on_terminal(&format!("{DIV} telemetry"));
    let axis = transcript
        .lines()
        .find(|l| l.contains('└'))
        .unwrap_or_else(|| panic!("a chart: {transcript}"));
    assert_eq!(
        axis.trim_end_matches('\r').chars().count(),
        149,
        "{transcript}"
    );
    let piped = local.div(&["telemetry"]);
    let axis = text(&piped.stdout)
        .lines()
        .find(|l| l.contains('└'))
        .map(|l| l.chars().filter(|c| *c == '─').count());
    assert_eq!(axis, Some(60));

    let transcript = local.on_terminal(&format!("{DIV} result"));
    assert!(
        transcript.contains("\x1b[31;1mcheck failed: metrics.accuracy >= 0.8 (found 0.5)\x1b[0m"),
        "{transcript:?}"
    );
    let transcript = local.on_terminal(&format!("{DIV} logs --follow"));
    assert!(
        transcript.contains(" · \x1b[31;1mmissed 1 of 1 check\x1b[0m"),
        "{transcript:?}"
    );
    // The verdict the control plane wrote at the end of the log, too.
    assert!(
        transcript.contains("\x1b[31;1mcheck failed: metrics.accuracy >= 0.8 (found 0.5)\x1b[0m"),
        "{transcript:?}"
    );
    // Attached on a terminal, the same.
    let transcript = local.on_terminal(&format!(
        "{DIV} run --gpu cpu charted.py --check 'metrics.accuracy>=0.8'"
    ));
    assert!(
        transcript.contains("\x1b[31;1mcheck failed: metrics.accuracy >= 0.8 (found 0.5)\x1b[0m"),
        "{transcript:?}"
    );
    let transcript = local.on_terminal(&format!("NO_COLOR=1 {DIV} logs --follow"));
    assert!(!transcript.contains('\x1b'), "{transcript:?}");
    let transcript = local.on_terminal(&format!("NO_COLOR=1 {DIV} result"));
    assert!(!transcript.contains('\x1b'), "{transcript:?}");
}
