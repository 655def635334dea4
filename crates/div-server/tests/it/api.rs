//! The API's refusals and idempotency, through raw HTTP.

use serde_json::json;

use crate::harness::Server;

#[tokio::test(flavor = "multi_thread")]
async fn create_run_is_idempotent() {
    let server = Server::start().await;
    let body =
        json!({"project": "p", "entrypoint": "true", "command": "true", "sku": "cpu", "gpus": 1});
    let key = [("idempotency-key", "k-1")];
    let (s1, r1) = server
        .request_with("POST", "/v1/runs", Some(body.clone()), &key)
        .await;
    let (s2, r2) = server
        .request_with("POST", "/v1/runs", Some(body.clone()), &key)
        .await;
    assert_eq!((s1, s2), (201, 200));
    assert_eq!(r1["id"], r2["id"]);
    let mut other = body.clone();
    other["command"] = json!("false");
    let (s3, e3) = server
        .request_with("POST", "/v1/runs", Some(other), &key)
        .await;
    assert_eq!(s3, 409);
    assert_eq!(e3["error"]["code"], "conflict");
    let (_, list) = server.request("GET", "/v1/runs?project=p", None).await;
    assert_eq!(list["runs"].as_array().map(Vec::len), Some(1), "{list}");
}

fn check_refusal(got: (u16, serde_json::Value), status: u16, code: &str, message: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["error"]["code"], code, "{}", got.1);
    assert_eq!(got.1["error"]["message"], message, "{}", got.1);
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_refused_with_reasons() {
    let server = Server::start().await;
    let got = server.create_run("true", json!({"sku": "b300"})).await;
    assert_eq!(
        got.1["error"]["details"]["accepted"],
        json!(["h100", "cpu"])
    );
    check_refusal(
        got,
        422,
        "unknown_sku",
        "unknown SKU `b300`; this machine takes h100, cpu",
    );
    check_refusal(
        server.create_run("true", json!({"sku": "a100"})).await,
        422,
        "unknown_sku",
        "unknown SKU `a100`; this machine takes h100, cpu",
    );
    check_refusal(
        server
            .create_run("true", json!({"max_spend_cents": 0}))
            .await,
        422,
        "invalid",
        "`max_spend_cents` must be more than 0, not `0`",
    );
    check_refusal(
        server.create_run("true", json!({"cpu": 999})).await,
        422,
        "invalid",
        "`--cpu 999` is more than one container takes; the most is 64 cores",
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    check_refusal(
        server.create_run("true", json!({"cpu": 64})).await,
        422,
        "invalid",
        &format!("this machine has {cores} cores; the run asks for 64"),
    );
    check_refusal(
        server
            .create_run("true", json!({"sku": "h100", "gpus": 3}))
            .await,
        422,
        "invalid",
        "this machine has 2 H100; the run asks for 3",
    );
    check_refusal(
        server
            .create_run("true", json!({"checks": ["accuracy"]}))
            .await,
        422,
        "invalid",
        "`accuracy` has no comparison; write a check like `metrics.accuracy>=0.8` with `>=`, `<=`, `>`, `<`, `==` or `!=`",
    );
    check_refusal(
        server.request("GET", "/v1/runs/run-none", None).await,
        404,
        "not_found",
        "no run `run-none`",
    );
    check_refusal(
        server
            .request_with("POST", "/v1/runs", Some(json!({})), &[])
            .await,
        400,
        "invalid",
        "the `Idempotency-Key` header is required",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_socket_is_its_owners_only() {
    use std::os::unix::fs::PermissionsExt;
    let server = Server::start().await;
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&server.socket()), 0o600);
    assert_eq!(mode(&server.home), 0o700);
    // SAFETY-free check of who we are: only root can make a second user to try it.
    let uid = std::fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|r| r.split_whitespace().next().unwrap_or("").to_owned())
        })
        .unwrap_or_default();
    if uid != "0" {
        println!("skipped the second-user check: not root, so no user can be made");
        return;
    }
    let user = "div-other";
    let _ = std::process::Command::new("useradd")
        .args(["--no-create-home", user])
        .output();
    // The home's parent (a temp dir) must be passable for the refusal to be the socket's own.
    let out = std::process::Command::new("su")
        .args([user, "-s", "/bin/sh", "-c"])
        .arg(format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}')\" 2>&1; echo rc=$?",
            server.socket().display()
        ))
        .output()
        .expect("su runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Permission denied") && !text.contains("rc=0"),
        "{text}"
    );
}
