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

/// `POST /v1/runs/validate` answers `{"valid": true}` for what `POST /v1/runs` would place,
/// and for each thing `POST /v1/runs` refuses, its very status and body; it creates nothing:
/// no run, not the volume the command names.
#[tokio::test(flavor = "multi_thread")]
async fn validate_refuses_what_create_refuses_and_creates_nothing() {
    let server = Server::start().await;
    let base = json!({
        "project": "p", "entrypoint": "x", "command": "ls /mnt/named; true", "sku": "cpu", "gpus": 1
    });
    let with = |extra: serde_json::Value| {
        let mut body = base.clone();
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        body
    };
    let keys = std::sync::atomic::AtomicU32::new(0);
    let both = |body: serde_json::Value| {
        let key = format!(
            "k-{}",
            keys.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let server = &server;
        async move {
            let validated = server
                .request("POST", "/v1/runs/validate", Some(body.clone()))
                .await;
            let created = server
                .request_with("POST", "/v1/runs", Some(body), &[("idempotency-key", &key)])
                .await;
            (validated, created)
        }
    };
    assert_eq!(
        server
            .request("POST", "/v1/runs/validate", Some(base.clone()))
            .await,
        (200, json!({"valid": true}))
    );
    let (status, taken) = server.create_run("true", json!({"name": "taken"})).await;
    assert_eq!(status, 201, "{taken}");

    for (extra, status) in [
        (json!({"sku": "b300"}), 422),
        (json!({"sku": "h100", "gpus": 3}), 422),
        (json!({"max_spend_cents": 0}), 422),
        (json!({"checks": ["accuracy"]}), 422),
        (json!({"env": [{"key": "1X", "value": "y"}]}), 422),
        (json!({"project": " "}), 422),
        (
            json!({"code": {"volume": "nowhere", "path": "code/0000"}}),
            422,
        ),
        (json!({"name": "taken"}), 409),
        (json!({"gpus": -1}), 400),
    ] {
        let (validated, created) = both(with(extra.clone())).await;
        assert_eq!(validated.0, status, "{extra}: {}", validated.1);
        assert_eq!(validated, created, "{extra}");
    }
    // The org's usage limit reached (a limit of nothing is reached at once): 402, both.
    let settings = server.home.join("settings.json");
    std::fs::write(&settings, r#"{"org_usage_limit_cents": 0}"#).expect("settings");
    let (validated, created) = both(base.clone()).await;
    assert_eq!(validated.0, 402, "{}", validated.1);
    assert_eq!(validated.1["error"]["code"], "usage_limit_reached");
    assert_eq!(validated, created);
    std::fs::remove_file(&settings).expect("settings removed");

    // Nothing was made: the one run placed on purpose, and no volume `named`.
    let (_, list) = server.request("GET", "/v1/runs", None).await;
    let names: Vec<&str> = list["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["taken"], "{list}");
    let (_, volumes) = server.request("GET", "/v1/volumes", None).await;
    assert_eq!(volumes, json!({"volumes": []}));
    // The same body, now placed: its volume is made then.
    let (status, placed) = server
        .request_with(
            "POST",
            "/v1/runs",
            Some(base.clone()),
            &[("idempotency-key", "k-placed")],
        )
        .await;
    assert_eq!(status, 201, "{placed}");
    let (_, volumes) = server.request("GET", "/v1/volumes", None).await;
    assert_eq!(volumes["volumes"][0]["name"], "named", "{volumes}");
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

/// A volume's file: its length and an etag always; `range: bytes=N-` gives the rest (206,
/// `content-range`); an `if-range` naming another version gives all of it (200); a start at
/// or past the end is 416; other range forms are ignored.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_is_read_whole_or_from_a_byte_of_the_same_version() {
    let server = Server::start().await;
    let (status, volume) = server
        .request("POST", "/v1/volumes", Some(json!({"name": "data"})))
        .await;
    assert!(status == 200 || status == 201, "{status} {volume}");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(server.home.join("volumes/data/f.bin"), &data).expect("the file");
    let url = "/v1/volumes/data/file?path=f.bin";
    let get = |headers: Vec<(&'static str, String)>| {
        let server = &server;
        async move {
            let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server
                .try_request_with_headers("GET", url, None, &h)
                .await
                .expect("the request went through")
        }
    };
    let header = |h: &hyper::HeaderMap, name: &str| {
        h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
    };

    let (status, h, body) = get(vec![]).await;
    assert_eq!(status, 200);
    assert!(body == data);
    assert_eq!(header(&h, "content-length").as_deref(), Some("100000"));
    assert_eq!(header(&h, "accept-ranges").as_deref(), Some("bytes"));
    let etag = header(&h, "etag").expect("an etag");
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");

    let (status, h, body) = get(vec![("range", "bytes=60000-".into())]).await;
    assert_eq!(status, 206);
    assert!(body == data[60_000..]);
    assert_eq!(
        header(&h, "content-range").as_deref(),
        Some("bytes 60000-99999/100000")
    );
    assert_eq!(header(&h, "content-length").as_deref(), Some("40000"));

    let (status, _, body) = get(vec![
        ("range", "bytes=99999-".into()),
        ("if-range", etag.clone()),
    ])
    .await;
    assert_eq!(status, 206);
    assert_eq!(body.as_ref(), &data[99_999..]);

    let (status, _, body) = get(vec![
        ("range", "bytes=60000-".into()),
        ("if-range", "\"another-version\"".into()),
    ])
    .await;
    assert_eq!(status, 200, "another version: all of this one");
    assert!(body == data);

    let (status, h, body) = get(vec![("range", "bytes=100000-".into())]).await;
    assert_eq!(status, 416);
    assert_eq!(
        header(&h, "content-range").as_deref(),
        Some("bytes */100000")
    );
    let error: serde_json::Value = serde_json::from_slice(&body).expect("an error body");
    assert_eq!(
        error["error"]["message"],
        "the file has 100000 bytes; there is nothing from byte 100000"
    );

    let (status, _, body) = get(vec![("range", "bytes=0-10".into())]).await;
    assert_eq!(
        status, 200,
        "a closed range is not served as one: all of it"
    );
    assert!(body == data);

    // Written again, it is another version with another etag.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(server.home.join("volumes/data/f.bin"), b"new").expect("rewrite");
    let (_, h, body) = get(vec![]).await;
    assert_eq!(body.as_ref(), b"new");
    assert_ne!(header(&h, "etag"), Some(etag));
}
