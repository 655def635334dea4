//! `--json` prints runs as the API sent them: a field sent as `null` and a field this client
//! does not know both survive.

use div_api::RunStatus;
use div_test_support::mock::json_response;
use serde_json::{Value, json};
use wiremock::Mock;
use wiremock::matchers::{method, path};

use crate::support::{World, run};

#[tokio::test]
async fn runs_json_keeps_nulls_and_unknown_fields_as_sent() {
    let world = World::new().await;
    let mut sent = serde_json::to_value(run(RunStatus::Running)).expect("a run serializes");
    sent["reason"] = Value::Null;
    sent["ended_at"] = Value::Null;
    sent["from_the_future"] = json!({"kept": true});
    Mock::given(method("GET"))
        .and(path("/v1/runs"))
        .respond_with(json_response(200, &json!({"runs": [sent.clone()]})))
        .mount(&world.server)
        .await;
    let done = world.div(&["runs", "--all", "--json"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let printed: Value = serde_json::from_str(&done.stdout).expect("--json prints JSON");
    let first = &printed[0];
    assert_eq!(first.get("reason"), Some(&Value::Null), "{first}");
    assert_eq!(first.get("ended_at"), Some(&Value::Null), "{first}");
    assert_eq!(first["from_the_future"], json!({"kept": true}), "{first}");
    assert_eq!(first, &sent, "the run is printed as it was sent");
}
