//! Names at the API (docs/api.md, "Names"): a project, run or volume name outside its rule
//! (div-spec's, which `div` keeps to) is refused 422 with the rule by every route that takes
//! one, and nothing is made; a project stored before the rule is still listed by it.

use serde_json::{Value, json};

use crate::harness::Server;

/// Names `div` would never send: markup, `..`, a `/`, capitals, 300 characters.
fn hostile() -> Vec<String> {
    vec![
        "<img id=x src=x>".to_owned(),
        "../../etc".to_owned(),
        "..".to_owned(),
        "a/b".to_owned(),
        "UPPER".to_owned(),
        "a".repeat(300),
    ]
}

/// `name` as one path segment (every byte but `A-Za-z0-9-._~` escaped, `/` among them).
fn segment(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// That the answer is 422 `invalid` and its message says `rule` of `name`.
#[track_caller]
fn refused(what: &str, (status, body): (u16, Value), rule: &str) {
    assert_eq!(status, 422, "{what}: {body}");
    assert_eq!(body["error"]["code"], "invalid", "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(rule) && message.contains("1 to 63"),
        "{what}: the refusal says what was wrong and what would be right: {message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn names_outside_their_rules_are_refused_by_every_route_and_nothing_is_made() {
    let server = Server::start().await;
    let (status, made) = server
        .request("POST", "/v1/volumes", Some(json!({"name": "kept"})))
        .await;
    assert_eq!(status, 201, "{made}");
    let hash = blake3::hash(b"x\n").to_hex().to_string();
    let tree = json!({"path": "code/0000", "entries": [
        {"path": "a.txt", "kind": "file", "size": 2, "hash": hash}
    ]});
    for bad in hostile() {
        let key = [("idempotency-key", "names")];
        for (what, extra, rule) in [
            ("project", json!({"project": bad}), "is not a project name"),
            ("name", json!({"name": bad}), "is not a run name"),
            (
                "code's volume",
                json!({"code": {"volume": bad, "path": "code/0000"}}),
                "is not a volume name",
            ),
        ] {
            let mut body = json!({
                "project": "p", "entrypoint": "true", "command": "true", "sku": "cpu", "gpus": 1
            });
            if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
                b.extend(e);
            }
            let placed = server
                .request_with("POST", "/v1/runs", Some(body.clone()), &key)
                .await;
            refused(
                &format!("POST /v1/runs, {what} `{bad}`"),
                placed.clone(),
                rule,
            );
            let validated = server
                .request("POST", "/v1/runs/validate", Some(body))
                .await;
            assert_eq!(validated, placed, "validate answers as placing does");
        }
        let name = segment(&bad);
        refused(
            &format!("GET /v1/runs?project={name}"),
            server
                .request("GET", &format!("/v1/runs?project={name}"), None)
                .await,
            "is not a project name",
        );
        refused(
            &format!("POST /v1/volumes `{bad}`"),
            server
                .request("POST", "/v1/volumes", Some(json!({"name": bad})))
                .await,
            "is not a volume name",
        );
        let routes: [(&str, String, Option<Value>); 10] = [
            ("DELETE", format!("/v1/volumes/{name}"), None),
            (
                "POST",
                format!("/v1/volumes/{name}/blobs/missing"),
                Some(json!({"hashes": [hash]})),
            ),
            ("POST", format!("/v1/volumes/{name}/blobs/pack"), None),
            (
                "PUT",
                format!("/v1/volumes/{name}/blobs/{hash}?offset=0&total=2"),
                None,
            ),
            (
                "POST",
                format!("/v1/volumes/{name}/trees"),
                Some(tree.clone()),
            ),
            (
                "GET",
                format!("/v1/volumes/{name}/trees?path=code/0000&digest=x"),
                None,
            ),
            (
                "POST",
                format!("/v1/volumes/{name}/stages"),
                Some(tree.clone()),
            ),
            (
                "POST",
                format!("/v1/volumes/{name}/stages/stage-1-2-3/commit"),
                Some(json!({})),
            ),
            ("GET", format!("/v1/volumes/{name}/tree?path="), None),
            ("GET", format!("/v1/volumes/{name}/file?path=a.txt"), None),
        ];
        for (method, path, body) in routes {
            refused(
                &format!("{method} {path}"),
                server.request(method, &path, body).await,
                "is not a volume name",
            );
        }
    }
    let (_, runs) = server.request("GET", "/v1/runs", None).await;
    assert_eq!(runs["runs"], json!([]), "no run was placed: {runs}");
    let (_, volumes) = server.request("GET", "/v1/volumes", None).await;
    let names: Vec<&str> = volumes["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, ["kept"], "no volume was made or removed");
    assert!(
        !server.home.join("etc").exists() && !server.home.join("../etc").exists(),
        "nothing was made outside the volumes"
    );
}

/// A run placed before the rule (when any project was taken; made here by renaming a run's
/// project in the store while the server is stopped) is still read by its id and name and
/// listed by its project; a project that no stored run has is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_project_stored_before_the_rule_is_still_listed_by_it() {
    let server = Server::start().await;
    let (status, run) = server.create_run("true", json!({"project": "old"})).await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_end(&id).await;
    let (home, _dir) = server.kill().await;
    let db = rusqlite::Connection::open(home.join("state.db")).expect("state.db");
    db.busy_timeout(std::time::Duration::from_secs(10))
        .expect("timeout");
    let changed = db
        .execute(
            "UPDATE runs SET project = 'Old Project', run = json_set(run, '$.project', 'Old Project') WHERE id = ?1",
            [&id],
        )
        .expect("the run's project renamed");
    assert_eq!(changed, 1);
    drop(db);
    let server = Server::at(crate::harness::options(
        &home,
        Some("h100:2"),
        div_server::SandboxMode::Auto,
    ))
    .await;
    let (status, listed) = server
        .request("GET", "/v1/runs?project=Old%20Project", None)
        .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["runs"][0]["id"], json!(id), "{listed}");
    assert_eq!(listed["runs"][0]["project"], "Old Project", "{listed}");
    let (status, got) = server.request("GET", &format!("/v1/runs/{id}"), None).await;
    assert_eq!((status, &got["project"]), (200, &json!("Old Project")));
    refused(
        "a project no run has",
        server
            .request("GET", "/v1/runs?project=New%20Project", None)
            .await,
        "is not a project name",
    );
}
