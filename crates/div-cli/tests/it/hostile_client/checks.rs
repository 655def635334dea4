//! Checks that compare the result as written, for `div run` and `div result`.

use serde_json::json;

use super::{Local, text};

/// `{"x":0.30000000000000001}` passes `x>0.3`: the number is compared as written, and shown
/// as written. Through `f64` it would be `0.3` and fail.
#[test]
fn checks_compare_the_result_as_written() {
    let local = Local::new();
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--no-upload",
        "--check",
        "x>0.3",
        "--check",
        "big>=123456789012345678901234567890",
        "--",
        r#"printf '{"x":0.30000000000000001,"big":123456789012345678901234567890}' > "$DIVERGENT_RESULT_PATH""#,
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("check passed: x > 0.3 (found 0.30000000000000001)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "check passed: big >= 123456789012345678901234567890 (found 123456789012345678901234567890)\n"
        ),
        "{stdout}"
    );
    assert!(stderr.contains("passed 2 of 2 checks"), "{stderr}");
}

/// `div result RUN --check` judges on this machine as the control plane judges a run's own
/// checks: from the result's text, numbers as written. Through the API's `Value` (an `f64`),
/// `0.30000000000000001` was `0.3`, so `x>0.3` failed here while it passed as a run's check.
/// `--json` and the plain output show the number as written.
#[test]
fn div_result_checks_compare_the_result_as_written() {
    let local = Local::new();
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--no-upload",
        "--name",
        "exact",
        "--",
        r#"printf '{"x":0.30000000000000001,"m":{"l":[1,2.50,[]],"e":{}},"s":"caf\\u00e9"}' > "$DIVERGENT_RESULT_PATH""#,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let passed = local.div(&["result", "exact", "--check", "x>0.3"]);
    let stdout = text(&passed.stdout);
    assert_eq!(
        passed.status.code(),
        Some(0),
        "{stdout}{}",
        text(&passed.stderr)
    );
    assert!(
        stdout.contains("check passed: x > 0.3 (found 0.30000000000000001) · judged here\n"),
        "{stdout}"
    );
    // The object as written, laid out as before.
    assert!(
        stdout.starts_with(
            "{\n  \"x\": 0.30000000000000001,\n  \"m\": {\n    \"l\": [\n      1,\n      2.50,\n      []\n    ],\n    \"e\": {}\n  },\n  \"s\": \"caf\\u00e9\"\n}\n"
        ),
        "{stdout}"
    );

    let missed = local.div(&["result", "exact", "--check", "x>0.30000000000000001"]);
    let stdout = text(&missed.stdout);
    assert_eq!(
        missed.status.code(),
        Some(210),
        "{stdout}{}",
        text(&missed.stderr)
    );
    assert!(
        stdout.contains(
            "check failed: x > 0.30000000000000001 (found 0.30000000000000001) · judged here\n"
        ),
        "{stdout}"
    );
    let equal = local.div(&["result", "exact", "--check", "m.l.1==2.5"]);
    assert_eq!(equal.status.code(), Some(0), "{}", text(&equal.stdout));

    let json = local.div(&["result", "exact", "--json", "--check", "x>0.3"]);
    let stdout = text(&json.stdout);
    assert_eq!(
        json.status.code(),
        Some(0),
        "{stdout}{}",
        text(&json.stderr)
    );
    assert!(stdout.contains("\"x\": 0.30000000000000001,"), "{stdout}");
    assert!(stdout.contains("\"s\": \"caf\\u00e9\""), "{stdout}");
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("--json is JSON");
    assert_eq!(value["run"], "exact");
    assert_eq!(value["judged"][0]["outcome"], "passed", "{stdout}");
    assert_eq!(value["result"]["m"]["l"][1], json!(2.5));
}
