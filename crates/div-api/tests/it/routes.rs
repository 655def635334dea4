//! The client calls every route of the table, each at its own template: a server that answers
//! every request 404 records them, and each must be a route of the table.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use div_api::*;
use div_test_support::mock::*;
use serde_json::Value;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer};

use crate::models::examples as ex;

/// Routes the client never calls, and who does.
const CALLED_ELSEWHERE: &[(Route, &str)] = &[(
    Route::OpenDashboard,
    "div-server's `open_dashboard`, on the local control plane's socket",
)];

/// Every operation of the client once; what each answers (404, or what a client does on 404)
/// does not matter here.
async fn call_everything(cp: &HttpControlPlane) {
    let blob = || BlobSource::Bytes(Bytes::from_static(b"x"));
    let pack = [PackBlob {
        hash: "h".into(),
        data: Bytes::from_static(b"x"),
    }];
    let _ = cp.health().await;
    let _ = cp.catalogue().await;
    let _ = cp.pull_image("busybox", &|_| {}).await;
    let _ = cp.list_images().await;
    let _ = cp.prune_images(&PruneImages::default()).await;
    let _ = cp.list_volumes().await;
    let _ = cp.create_volume("v").await;
    let _ = cp.delete_volume("v").await;
    let _ = cp.missing_blobs("v", &["h".into()]).await;
    let _ = cp.upload_blob("v", "h", 0, 1, blob()).await;
    let _ = cp.upload_pack("v", &pack).await;
    let _ = cp.stage_tree("v", &ex::commit_tree()).await;
    let _ = cp.upload_staged_pack("v", "s", &pack).await;
    let _ = cp.commit_stage("v", "s").await;
    let _ = cp.commit_tree("v", &ex::commit_tree()).await;
    let _ = cp.tree_held("v", "code/x", "d").await;
    let _ = cp.list_tree("v", "").await;
    let mut sink = Vec::new();
    let _ = cp.read_file("v", "f", &mut sink).await;
    let _ = cp.validate_run(&ex::create_run()).await;
    let _ = cp.create_run("key", &ex::create_run()).await;
    let _ = cp.get_run("r").await;
    let _ = cp.list_runs(&ListRuns::default()).await;
    let _ = cp.stop_run("r").await;
    let _ = cp.log("r", 0, false).await;
    let _ = cp.node_log("r", 1, 0, false).await;
    let _ = cp.result("r").await;
    let _ = cp.result_exact("r").await;
    let _ = cp.telemetry("r", 0).await;
    let _ = cp.set_secret("S", "v").await;
    let _ = cp.list_secrets().await;
    let _ = cp.delete_secret("S").await;
    let _ = cp.list_models().await;
    let _ = cp.get_model("m").await;
    let push = PushModel {
        volume: "div-models".into(),
        path: "code/m/1".into(),
        extra: Default::default(),
    };
    let _ = cp.push_model("m", &push).await;
    let _ = cp.delete_model("m", None).await;
    let _ = cp.delete_model("m", Some(2)).await;
    let _ = cp.list_evaluations(Some("m")).await;
    let _ = cp.get_evaluation("ev_1").await;
    let team = cp.team().expect("the HTTP client speaks the team's routes");
    let _ = team.whoami().await;
    let _ = team.list_members().await;
    let member = CreateMember {
        name: "alice".into(),
        role: Role::Member,
        kind: MemberKind::User,
        slurm_account: None,
    };
    let _ = team.add_member(&member).await;
    let _ = team.revoke_member("alice").await;
    let _ = team.set_member_limit("alice", Some(100)).await;
    let _ = team.set_member_slurm_account("alice", Some("a")).await;
    let _ = team.set_org_limit(None).await;
    let _ = team.audit(Some(10), Some("5")).await;
}

#[tokio::test]
async fn the_client_calls_every_route_at_its_template() {
    let server: MockServer = mock_server().await;
    Mock::given(any())
        .respond_with(error_response(
            404,
            "not_found",
            "no such route",
            Value::Null,
        ))
        .mount(&server)
        .await;
    let options = Options {
        deadline: Duration::from_secs(600),
        ..test_options(None)
    };
    let cp = HttpControlPlane::new(endpoint(&server), options).expect("client");
    call_everything(&cp).await;

    let mut called = BTreeSet::new();
    for request in server.received_requests().await.unwrap_or_default() {
        let segments: Vec<&str> = request.url.path().trim_matches('/').split('/').collect();
        match Route::find(request.method.as_str(), &segments) {
            Some(found) => {
                called.insert(found.route);
            }
            None => panic!(
                "`{} {}` is no route of the table",
                request.method,
                request.url.path()
            ),
        }
    }
    for &route in Route::ALL {
        let elsewhere = CALLED_ELSEWHERE.iter().any(|(r, _)| *r == route);
        assert!(
            called.contains(&route) != elsewhere,
            "{route:?} ({} {}): the client {} it",
            route.method(),
            route.template(),
            if elsewhere { "calls" } else { "never calls" }
        );
    }
}
