//! Inputs `cargo xtask fuzz` found, kept so they stay fixed: whatever parses displays as text
//! that parses back to the same value.

use div_spec::Check;

#[track_caller]
fn check(typed: &str, shown: &str) {
    let value: Check = typed.parse().expect("the input parses");
    assert_eq!(value.to_string(), shown);
    assert_eq!(
        shown.parse::<Check>().ok(),
        Some(value),
        "{shown:?} does not parse back"
    );
}

#[test]
fn checks_round_trip() {
    // fuzz/artifacts/check/crash-51b612aa: the string `none` was shown bare, and bare `none`
    // is refused.
    check("s=='none'", "s == 'none'");
    check("s=='NONE'", "s == 'NONE'");
    check("s=='null'", "s == 'null'");
    check("s=='True'", "s == 'True'");
}
