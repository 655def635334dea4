use div_spec::{Check, CheckOp, CheckValue, Outcome};
use insta::assert_snapshot;
use serde_json::{Value, json};

use crate::refused;

/// `typed` parses and shows canonically as `canonical`.
fn canonical(typed: &str, canonical: &str) {
    let check: Check = typed.parse().unwrap_or_else(|e| panic!("`{typed}`: {e}"));
    assert_eq!(check.to_string(), canonical, "`{typed}`");
    assert_eq!(
        canonical.parse::<Check>().expect("canonical form parses"),
        check,
        "`{canonical}`"
    );
}

/// `check` judged against `result` writes `line`.
fn judge(check: &str, result: &Value, line: &str) {
    let check: Check = check.parse().unwrap_or_else(|e| panic!("`{check}`: {e}"));
    let verdict = check.evaluate(result);
    assert_eq!(verdict.line(), line);
    assert_eq!(verdict.passed(), line.starts_with("check passed"));
}

#[test]
fn canonical_forms() {
    canonical("metrics.accuracy>=0.8", "metrics.accuracy >= 0.8");
    canonical("metrics.loss<0.6", "metrics.loss < 0.6");
    canonical("  metrics.loss  <  0.6 ", "metrics.loss < 0.6");
    canonical("a<=1", "a <= 1");
    canonical("a>-1", "a > -1");
    canonical("a==1e-4", "a == 1e-4");
    canonical("a!=0.80", "a != 0.80");
    canonical("done==true", "done == true");
    canonical("done!=false", "done != false");
    canonical("status==done", "status == done");
    canonical("status=='done'", "status == done");
    canonical("status==\"done\"", "status == done");
    canonical("status=='two words'", "status == 'two words'");
    canonical("status==\"it's\"", "status == \"it's\"");
    canonical("status==''", "status == ''");
    canonical("status=='true'", "status == 'true'");
    canonical("status=='0.8'", "status == '0.8'");
    canonical("model==org/llama-3.1:8b", "model == org/llama-3.1:8b");
    canonical("metrics.runs.0.acc>=0.5", "metrics.runs.0.acc >= 0.5");
    canonical("eval-set.top_1>0", "eval-set.top_1 > 0");
}

#[test]
fn parts() {
    let check: Check = "metrics.accuracy>=0.8".parse().unwrap();
    assert_eq!(check.path(), "metrics.accuracy");
    assert_eq!(check.op(), CheckOp::Ge);
    assert_eq!(check.value(), &CheckValue::Number("0.8".into()));
    assert_eq!(
        serde_json::to_string(&check).unwrap(),
        "\"metrics.accuracy >= 0.8\""
    );
    let back: Check = serde_json::from_str("\"metrics.accuracy>=0.8\"").unwrap();
    assert_eq!(back, check);
}

#[test]
fn verdict_lines() {
    let result = json!({
        "metrics": {"accuracy": 0.91, "loss": 0.71, "runs": [{"acc": 0.5}], "note": "high", "f1": null},
        "status": "done",
        "converged": true,
        "epochs": 3
    });
    judge(
        "metrics.accuracy>=0.8",
        &result,
        "check passed: metrics.accuracy >= 0.8 (found 0.91)",
    );
    judge(
        "metrics.loss<0.6",
        &result,
        "check failed: metrics.loss < 0.6 (found 0.71)",
    );
    judge(
        "metrics.accuracy==0.91",
        &result,
        "check passed: metrics.accuracy == 0.91 (found 0.91)",
    );
    judge(
        "metrics.accuracy==0.910",
        &result,
        "check passed: metrics.accuracy == 0.910 (found 0.91)",
    );
    judge(
        "metrics.accuracy!=0.91",
        &result,
        "check failed: metrics.accuracy != 0.91 (found 0.91)",
    );
    judge(
        "metrics.accuracy>0.91",
        &result,
        "check failed: metrics.accuracy > 0.91 (found 0.91)",
    );
    judge(
        "metrics.accuracy<=0.91",
        &result,
        "check passed: metrics.accuracy <= 0.91 (found 0.91)",
    );
    judge("epochs==3", &result, "check passed: epochs == 3 (found 3)");
    judge(
        "epochs==3.0",
        &result,
        "check passed: epochs == 3.0 (found 3)",
    );
    judge(
        "epochs>2.5",
        &result,
        "check passed: epochs > 2.5 (found 3)",
    );
    judge(
        "metrics.runs.0.acc>=0.5",
        &result,
        "check passed: metrics.runs.0.acc >= 0.5 (found 0.5)",
    );
    judge(
        "status==done",
        &result,
        "check passed: status == done (found \"done\")",
    );
    judge(
        "status!=done",
        &result,
        "check failed: status != done (found \"done\")",
    );
    judge(
        "converged==true",
        &result,
        "check passed: converged == true (found true)",
    );
    judge(
        "converged==false",
        &result,
        "check failed: converged == false (found true)",
    );
    // Another type than the check's is a failure, showing what was found.
    judge(
        "metrics.note>=0.8",
        &result,
        "check failed: metrics.note >= 0.8 (found \"high\")",
    );
    judge(
        "status==1",
        &result,
        "check failed: status == 1 (found \"done\")",
    );
    judge(
        "epochs==three",
        &result,
        "check failed: epochs == three (found 3)",
    );
    judge(
        "metrics>=1",
        &result,
        "check failed: metrics >= 1 (found an object)",
    );
    judge(
        "metrics.runs==x",
        &result,
        "check failed: metrics.runs == x (found a list)",
    );
    // Missing is unknown, never a pass.
    judge(
        "metrics.accuracy2>=0.8",
        &result,
        "check unknown: metrics.accuracy2 >= 0.8 (the result has no metrics.accuracy2; did you mean metrics.accuracy?)",
    );
    judge(
        "metrics.runs.1.acc>=0.5",
        &result,
        "check unknown: metrics.runs.1.acc >= 0.5 (the result has no metrics.runs.1.acc)",
    );
    judge(
        "metrics.accuracy.x!=1",
        &result,
        "check unknown: metrics.accuracy.x != 1 (the result has no metrics.accuracy.x)",
    );
    judge(
        "metrics.f1>=0.5",
        &result,
        "check unknown: metrics.f1 >= 0.5 (the result's metrics.f1 is null)",
    );
    judge(
        "a!=1",
        &json!([]),
        "check unknown: a != 1 (the result has no a)",
    );
}

#[test]
fn decimals_compare_exactly() {
    let result =
        json!({"x": 0.1, "y": 0.30000000000000004, "big": 12345678901234567890u64, "neg": -2.5});
    judge("x==0.1", &result, "check passed: x == 0.1 (found 0.1)");
    judge("x==0.10", &result, "check passed: x == 0.10 (found 0.1)");
    judge(
        "y>0.3",
        &result,
        "check passed: y > 0.3 (found 0.30000000000000004)",
    );
    judge(
        "big>12345678901234567889",
        &result,
        "check passed: big > 12345678901234567889 (found 12345678901234567890)",
    );
    judge("neg<-2.4", &result, "check passed: neg < -2.4 (found -2.5)");
    judge(
        "neg>=-2.5",
        &result,
        "check passed: neg >= -2.5 (found -2.5)",
    );
}

#[test]
fn outcome_serializes_in_snake_case() {
    let verdict = "a>=1".parse::<Check>().unwrap().evaluate(&json!({}));
    assert_eq!(verdict.outcome, Outcome::Unknown);
    assert_eq!(
        serde_json::to_value(verdict.outcome).unwrap(),
        json!("unknown")
    );
}

#[test]
fn refusals() {
    assert_snapshot!(refused::<Check>("metrics.accuracy"), @"`metrics.accuracy` has no comparison; write a check like `metrics.accuracy>=0.8` with `>=`, `<=`, `>`, `<`, `==` or `!=`");
    assert_snapshot!(refused::<Check>("metrics.accuracy=0.8"), @"`metrics.accuracy=0.8` compares with `=`; write `==`");
    assert_snapshot!(refused::<Check>("metrics.accuracy=>0.8"), @"`metrics.accuracy=>0.8` compares with `=>`; write `>=`");
    assert_snapshot!(refused::<Check>("metrics.accuracy=<0.8"), @"`metrics.accuracy=<0.8` compares with `=<`; write `<=`");
    assert_snapshot!(refused::<Check>("metrics.accuracy!0.8"), @"`metrics.accuracy!0.8` compares with `!`; write `!=`");
    assert_snapshot!(refused::<Check>(">=0.8"), @"`>=0.8` has no path before `>=`; write the path into the result, like `metrics.accuracy`");
    assert_snapshot!(refused::<Check>("metrics..accuracy>=0.8"), @"`metrics..accuracy` in `metrics..accuracy>=0.8` is not a path; a path is names of letters, digits, `_` and `-` joined by dots, like `metrics.runs.0.accuracy`");
    assert_snapshot!(refused::<Check>("metrics accuracy>=0.8"), @"`metrics accuracy` in `metrics accuracy>=0.8` is not a path; a path is names of letters, digits, `_` and `-` joined by dots, like `metrics.runs.0.accuracy`");
    assert_snapshot!(refused::<Check>("metrics.runs[0].acc>=0.8"), @"`metrics.runs[0].acc` in `metrics.runs[0].acc>=0.8` is not a path; a path is names of letters, digits, `_` and `-` joined by dots, like `metrics.runs.0.accuracy`");
    assert_snapshot!(refused::<Check>("metrics.accuracy>="), @"`metrics.accuracy>=` has no value after `>=`; write a number, `true`, `false` or a string");
    assert_snapshot!(refused::<Check>("status<done"), @"`status<done` orders a string with `<`; a string takes `==` or `!=`");
    assert_snapshot!(refused::<Check>("status>='done'"), @"`status>='done'` orders a string with `>=`; a string takes `==` or `!=`");
    assert_snapshot!(refused::<Check>("converged>=true"), @"`converged>=true` orders a boolean with `>=`; a boolean takes `==` or `!=`");
    assert_snapshot!(refused::<Check>("converged==True"), @"`True` in `converged==True` is ambiguous; write `true`, or quote it as a string: `'True'`");
    assert_snapshot!(refused::<Check>("result==null"), @"`null` in `result==null` is not a value a check takes; write a number like `0.8`, `true`, `false`, or a string in quotes like `'null'`");
    assert_snapshot!(refused::<Check>("status=='done"), @"the string in `status=='done` has no closing quote");
    assert_snapshot!(refused::<Check>("status=='a'b'"), @r#"`'a'b'` in `status=='a'b'` is not a value a check takes; write a number like `0.8`, `true`, `false`, or a string in quotes like `"'a'b'"`"#);
    assert_snapshot!(refused::<Check>("a>=0.8>=1"), @"`0.8>=1` in `a>=0.8>=1` is not a number, and `>=` compares numbers; write a number like `0.8` or `-1.5e-3`");
    assert_snapshot!(refused::<Check>("a>=+1"), @"`+1` in `a>=+1` is not a number, and `>=` compares numbers; write it `1`");
    assert_snapshot!(refused::<Check>("a>=.5"), @"`.5` in `a>=.5` is not a number, and `>=` compares numbers; write it `0.5`");
    assert_snapshot!(refused::<Check>("status==two words"), @"`two words` in `status==two words` is not a value a check takes; write a number like `0.8`, `true`, `false`, or a string in quotes like `'two words'`");
}

/// `judge`, on the result's JSON text rather than a `Value`.
fn judge_text(check: &str, result: &str, line: &str) {
    let check: Check = check.parse().unwrap_or_else(|e| panic!("`{check}`: {e}"));
    let verdict = check.evaluate_json(result);
    assert_eq!(verdict.line(), line);
    assert_eq!(verdict.passed(), line.starts_with("check passed"));
}

/// A number with more digits than an `f64` keeps compares as the decimal written, and the
/// verdict shows it as written: through `f64`, `0.30000000000000001` is `0.3` and fails.
#[test]
fn numbers_compare_as_written_in_the_result_text() {
    let result = r#"{"x": 0.30000000000000001, "m": {"runs": [{"acc": 1e-400}, 2.50]},
        "big": 123456789012345678901234567890, "tiny": -0.000000000000000000001}"#;
    judge_text(
        "x>0.3",
        result,
        "check passed: x > 0.3 (found 0.30000000000000001)",
    );
    judge_text(
        "x!=0.3",
        result,
        "check passed: x != 0.3 (found 0.30000000000000001)",
    );
    judge_text(
        "x<=0.3",
        result,
        "check failed: x <= 0.3 (found 0.30000000000000001)",
    );
    judge_text(
        "m.runs.0.acc>0",
        result,
        "check passed: m.runs.0.acc > 0 (found 1e-400)",
    );
    judge_text(
        "m.runs.1==2.5",
        result,
        "check passed: m.runs.1 == 2.5 (found 2.50)",
    );
    judge_text(
        "big>123456789012345678901234567889",
        result,
        "check passed: big > 123456789012345678901234567889 (found 123456789012345678901234567890)",
    );
    judge_text(
        "tiny<0",
        result,
        "check passed: tiny < 0 (found -0.000000000000000000001)",
    );
    judge_text(
        "m.runs.2>0",
        result,
        "check unknown: m.runs.2 > 0 (the result has no m.runs.2)",
    );
    judge_text(
        "x>0",
        "not json",
        "check unknown: x > 0 (the result is not JSON)",
    );
    // Past an `f64`'s range: no `Value` holds it, and it is still compared exactly.
    judge_text(
        "huge>1e399",
        r#"{"huge": 1e400}"#,
        "check passed: huge > 1e399 (found 1e400)",
    );
    judge_text(
        "huge<-1e399",
        r#"{"huge": -1e400}"#,
        "check passed: huge < -1e399 (found -1e400)",
    );
    judge_text(
        "s==x",
        r#"{"s": 1e400}"#,
        "check failed: s == x (found 1e400)",
    );
    // The last of two equal keys counts, as for a `Value`.
    judge_text(
        "d==2",
        r#"{"d": 1, "d": 2}"#,
        "check passed: d == 2 (found 2)",
    );
}

/// Every whole check a refusal proposes parses, and the message shows what it proposes.
#[test]
fn suggestions_are_valid_checks() {
    for typed in [
        "status=='a'b'",
        "status==two words",
        "status==\"it's\" x",
        "converged==True",
        "converged!=FALSE",
        "a>=+1",
        "a<.5",
        "a>-.5",
        "a>5.",
        "a>=True",
        "result==null",
    ] {
        let e = typed.parse::<Check>().expect_err(typed);
        if let Some(suggestion) = e.suggestion() {
            assert!(
                suggestion.parse::<Check>().is_ok(),
                "`{typed}` suggests `{suggestion}`"
            );
        }
    }
    let e = "a>5.".parse::<Check>().unwrap_err();
    assert_eq!(e.suggestion(), Some("a > 5"));
    let e = "a>-.5".parse::<Check>().unwrap_err();
    assert_eq!(e.suggestion(), Some("a > -0.5"));
    // Quoting a string for an ordering would only trade one refusal for another.
    assert_snapshot!(refused::<Check>("a>=True"), @"`True` in `a>=True` is not a number, and `>=` compares numbers; write a number like `0.8` or `-1.5e-3`");
    assert_eq!("a>=True".parse::<Check>().unwrap_err().suggestion(), None);
    // A string holding both quotes cannot be quoted: no quoted form is proposed.
    assert_snapshot!(refused::<Check>(r#"s=='a"b'c'"#), @r#"`'a"b'c'` in `s=='a"b'c'` is not a value a check takes; write a number like `0.8`, `true`, `false`, or a string in quotes"#);
}

/// A path the result lacks names the value it most likely meant, among the values a check
/// compares with; never another item of the same list, a value the path goes past, or a
/// path too far from it.
#[test]
fn a_missing_path_suggests_the_nearest_one_the_result_has() {
    let result = json!({
        "metrics": {"accuracy": 0.91, "loss": 0.2, "per_class": {"cat": 0.9}},
        "runs": [{"acc": 0.5}, {"acc": 0.6}],
        "epochs": 3,
    });
    let cases = [
        ("metrics.acuracy>=0.8", Some("metrics.accuracy")),
        ("metric.accuracy>=0.8", Some("metrics.accuracy")),
        ("Metrics.Accuracy>=0.8", Some("metrics.accuracy")),
        ("metrics.per_class.dog>0", Some("metrics.per_class.cat")),
        ("runs.0.ac>0", Some("runs.0.acc")),
        ("epoch==3", Some("epochs")),
        // Another item of the list is not what was meant.
        ("runs.2.acc>0", None),
        // Nor the value the path goes past, nor an object.
        ("metrics.accuracy.top1>0", None),
        ("metric>0", None),
        ("throughput>100", None),
    ];
    for (typed, meant) in cases {
        let check: Check = typed.parse().expect("a check");
        let reason = check.evaluate(&result).reason.unwrap_or_default();
        let want = match meant {
            Some(m) => format!("the result has no {}; did you mean {m}?", check.path()),
            None => format!("the result has no {}", check.path()),
        };
        assert_eq!(reason, want, "`{typed}`");
    }
}
