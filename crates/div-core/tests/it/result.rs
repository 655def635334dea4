//! `div_core::pretty_json`: the result's text laid out as serde_json lays out a value, with
//! its tokens as written.

use proptest::prelude::*;
use serde_json::Value;

/// Any JSON value, a few levels deep, with keys and strings that need escapes.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "[a-z\"\\\\{}\\[\\],: \\n\\t\u{e9}\u{9b}]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("[a-z,:\"{ ]{0,5}", inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    /// The layout is serde_json's pretty one, for compact text and for text already laid out
    /// (or spaced any other way).
    #[test]
    fn proptest_pretty_json_lays_out_as_serde_json(v in json()) {
        let pretty = serde_json::to_string_pretty(&v).expect("writes");
        prop_assert_eq!(div_core::pretty_json(&serde_json::to_string(&v).expect("writes")), pretty.clone());
        prop_assert_eq!(div_core::pretty_json(&pretty), pretty);
    }
}

#[test]
fn numbers_and_escapes_stay_as_written() {
    let text = " { \"x\" : 0.30000000000000001 , \"big\":123456789012345678901234567890,\n\
                \"s\":\"caf\\u00e9 \\\" , {\" , \"e\" : [ ] , \"o\":{ }, \"l\":[1E+2,-0.0]}";
    assert_eq!(
        div_core::pretty_json(text),
        "{\n  \"x\": 0.30000000000000001,\n  \"big\": 123456789012345678901234567890,\n  \
         \"s\": \"caf\\u00e9 \\\" , {\",\n  \"e\": [],\n  \"o\": {},\n  \"l\": [\n    1E+2,\n    -0.0\n  ]\n}"
    );
}
