//! Pulls: from a loopback registry, refused when the image does not exist, the named default
//! never replaced, a moved tag pulled again as `pull` says.

use std::path::Path;

use div_image::Credentials;
use div_test_support::image::{Built, Registry, file, push};
use serde_json::{Value, json};

use super::{
    build, busybox_layer, first_line_digest, project_code, pull, refusing_proxy, registry, rootfs,
    run_dirs, run_ok, runs_listed, start,
};
use crate::harness::HOST_LINE;

#[tokio::test(flavor = "multi_thread")]
async fn a_run_in_an_image_pulled_from_a_loopback_registry_has_the_image_as_its_root() {
    let Some(reg) = registry().await else { return };
    let server = start().await;
    let image = format!("{}/tools/busybox:1", reg.addr);
    let log = run_ok(
        &server,
        "cat /etc/os-release; pwd; echo \"$GREETING\"; echo \"id=$DIVERGENT_RUN_ID\"; id -u; ls /",
        json!({"image": image}),
    )
    .await;
    println!("{log}");
    let trees = rootfs(&server.home);
    assert_eq!(trees.len(), 1, "one image unpacked: {trees:?}");
    let digest = trees[0]
        .parent()
        .and_then(Path::file_name)
        .map(|h| format!("sha256:{}", h.to_string_lossy()))
        .expect("a digest");
    // The first log line names the image and its digest.
    assert!(
        log.starts_with(&format!("div: image {image} ({digest})")),
        "{log}"
    );
    // `/` is the image's: its os-release, its working directory, its Env under runtime.md's.
    assert!(log.contains("ID=divtest"), "{log}");
    assert!(log.contains("\n/work\n"), "{log}");
    assert!(log.contains("hello from the image"), "{log}");
    assert!(log.contains("id=r_"), "runtime.md's rows win: {log}");
    assert!(!log.contains("the image's, overridden"), "{log}");
    assert!(log.contains("\n0\n"), "root by default: {log}");
    let listed: Vec<&str> = log
        .lines()
        .skip_while(|l| *l != "0")
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with(' ') && !l.contains(':'))
        .collect();
    assert!(
        listed.contains(&"bin") && listed.contains(&"work"),
        "{listed:?}"
    );
    // Nothing of this machine's own system: no /usr, /var, /home.
    for host_only in ["usr", "var", "home", "lib"] {
        assert!(!listed.contains(&host_only), "{host_only}: {listed:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_that_does_not_exist_is_refused_and_no_run_is_created() {
    let Some(reg) = registry().await else { return };
    let server = start().await;
    let image = format!("{}/tools/nothing:1", reg.addr);
    let said = format!("the registry `{}` has no image `{image}`", reg.addr);
    // Pulled (as `div run` asks first): the last line is the refusal.
    let events = pull(&server, &image, None).await;
    let last = events.last().expect("a last line");
    assert_eq!(last["event"], "error", "{events:?}");
    assert!(
        last["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&said)),
        "{events:?}"
    );
    // Placed: refused, with the registry's answer, and nothing is made.
    let (status, answer) = server.create_run("echo ran", json!({"image": image})).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&said)),
        "{answer}"
    );
    let listed = runs_listed(&server).await;
    assert!(listed.is_empty(), "no run: {listed:?}");
    assert_eq!(run_dirs(&server.home), 0, "a run directory was left");
}

/// Set (to the proxy's record) in the process this test runs itself in, with the proxy.
const PROXIED: &str = "DIV_SERVER_TEST_PROXY_RECORD";

/// Every HTTPS request the control plane makes goes to a proxy that records and refuses it:
/// a pull of the default image reaches for Docker Hub, and fails, offline. The server reads
/// its proxy from its environment (as `div server` does), so the test runs itself again, in
/// a process of its own whose environment names the proxy, and that process asserts.
#[test]
fn an_explicitly_named_default_image_is_pulled_never_replaced() {
    #[allow(clippy::disallowed_methods)] // whether this is the process with the proxy
    if let Some(record) = std::env::var_os(PROXIED) {
        tokio::runtime::Runtime::new()
            .expect("a runtime")
            .block_on(named_default_behind_the_proxy(Path::new(&record)));
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let record = dir.path().join("proxied");
    let proxy = refusing_proxy(record.clone());
    let name = module_path!()
        .split_once("::")
        .map(|(_, rest)| {
            format!("{rest}::an_explicitly_named_default_image_is_pulled_never_replaced")
        })
        .expect("a module path");
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(PROXIED, &record)
        .env("HTTPS_PROXY", &proxy)
        .env("https_proxy", &proxy)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .expect("the test runs again");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("test result: ok. 1 passed"), "{said}");
}

/// The test itself, in the process whose environment names the proxy (recording in `record`).
async fn named_default_behind_the_proxy(record: &Path) {
    let asked = || -> Vec<String> {
        std::fs::read_to_string(record)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let server = super::start().await;
    let image = div_spec::DEFAULT_IMAGE;
    assert_eq!(image, "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime");
    let said = format!("cannot reach the registry `docker.io` for `docker.io/{image}`");

    // Named, the default image is pulled like any other (the server's setting is `host`,
    // out of the box): it cannot be reached, so the run is refused before it exists.
    let events = pull(&server, image, None).await;
    let last = events.last().expect("a last line");
    assert_eq!(last["event"], "error", "{events:?}");
    assert!(
        last["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&said)),
        "{events:?}"
    );
    let (status, answer) = server.create_run("echo ran", json!({"image": image})).await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&said)),
        "{answer}"
    );
    assert_eq!(
        answer["error"]["details"]["registry_unreachable"], "docker.io",
        "{answer}"
    );
    let seen = asked();
    assert!(
        !seen.is_empty()
            && seen
                .iter()
                .all(|l| l.starts_with("CONNECT ") && l.contains("docker.io:443")),
        "the pull went to Docker Hub, through the proxy: {seen:?}"
    );
    let listed = runs_listed(&server).await;
    assert!(listed.is_empty(), "no run: {listed:?}");
    assert_eq!(run_dirs(&server.home), 0, "a run directory was left");

    // Unnamed, this machine's own system stands in for it, offline, and the run's first log
    // line says so; the run's record names the default image.
    let before = asked().len();
    let (status, run) = server.create_run("echo ran", json!({})).await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["image"], image, "{run}");
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(ended["image"], image, "{ended}");
    let log = server.log_text(id).await;
    assert!(log.contains(&format!("{HOST_LINE}ran\n")), "{log}");
    assert_eq!(asked().len(), before, "nothing was pulled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tag_that_moved_is_pulled_again_as_pull_says() {
    let Some(layer) = busybox_layer() else {
        return;
    };
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let marked = |which: &str| {
        build(
            &[
                layer.clone(),
                vec![file("etc/which", &format!("image {which}\n"))],
            ],
            json!({"Env": ["PATH=/bin"]}),
        )
    };
    let (a, b) = (marked("A"), marked("B"));
    push(&reg.addr, "tools/moving", "t", &a, &Credentials::none()).await;
    push(&reg.addr, "tools/other", "1", &a, &Credentials::none()).await;
    let server = start().await;
    let code = project_code(&server).await;
    let image = format!("{}/tools/moving:t", reg.addr);
    // As `div run --image IMAGE [--pull P] --no-upload -- 'cat /etc/which'`: the image
    // pulled (or found), then the run placed with the same policy. What the pull said last,
    // and the run's log.
    let run = |pull_policy: Option<&'static str>| {
        let (server, image) = (&server, &image);
        async move {
            let events = pull(server, image, pull_policy).await;
            let mut extra = json!({"image": image});
            if let Some(p) = pull_policy {
                extra["pull"] = Value::String(p.to_owned());
            }
            let log = run_ok(server, "cat /etc/which", extra).await;
            (events, log)
        }
    };
    let (a_digest, b_digest) = (a.manifest_digest.to_string(), b.manifest_digest.to_string());
    let ready = |events: &[Value]| -> Value {
        let last = events.last().cloned().unwrap_or_default();
        assert_eq!(last["event"], "ready", "{events:?}");
        assert_eq!(last["image"], image, "{events:?}");
        last
    };

    let (events, log) = run(None).await;
    assert!(log.contains("\nimage A\n"), "{log}");
    assert_eq!(
        first_line_digest(&log, &image).as_deref(),
        Some(a_digest.as_str())
    );
    let last = ready(&events);
    assert_eq!(
        (&last["digest"], &last["source"]),
        (&json!(a_digest), &json!("pulled")),
        "{events:?}"
    );

    // The tag moves to B at the registry.
    push(&reg.addr, "tools/moving", "t", &b, &Credentials::none()).await;
    for pull_policy in [None, Some("missing")] {
        let (events, log) = run(pull_policy).await;
        assert!(log.contains("\nimage A\n"), "{pull_policy:?}: {log}");
        assert_eq!(
            first_line_digest(&log, &image).as_deref(),
            Some(a_digest.as_str())
        );
        // From the cache, as the tag resolved when it was pulled; nothing pulled.
        let last = ready(&events);
        assert_eq!(
            (&last["digest"], &last["source"]),
            (&json!(a_digest), &json!("cached")),
            "{pull_policy:?}: {events:?}"
        );
        assert!(
            last["resolved_at"]
                .as_str()
                .is_some_and(|at| at.contains('T') && at.ends_with('Z')),
            "{pull_policy:?}: {events:?}"
        );
        assert_eq!(events.len(), 1, "nothing pulled: {events:?}");
    }
    let (events, log) = run(Some("always")).await;
    assert!(log.contains("\nimage B\n"), "{log}");
    assert_eq!(
        first_line_digest(&log, &image).as_deref(),
        Some(b_digest.as_str())
    );
    assert_eq!(events[0]["event"], "resolved", "{events:?}");
    assert_eq!(events[0]["layers"], 2, "{events:?}");
    let last = ready(&events);
    assert_eq!(
        (&last["digest"], &last["source"]),
        (&json!(b_digest), &json!("pulled")),
        "{events:?}"
    );
    // From now on the tag names B in the cache too; asking again finds it unchanged.
    let (_, log) = run(Some("missing")).await;
    assert!(log.contains("\nimage B\n"), "{log}");
    let (events, log) = run(Some("always")).await;
    assert!(log.contains("\nimage B\n"), "{log}");
    let last = ready(&events);
    assert_eq!(
        (&last["digest"], &last["source"]),
        (&json!(b_digest), &json!("checked")),
        "{events:?}"
    );
    assert!(
        events.iter().all(|e| e["event"] != "progress"),
        "nothing downloaded: {events:?}"
    );
    let (_, log) = run(Some("never")).await;
    assert!(log.contains("\nimage B\n"), "{log}");

    // The cache: the tag's digest and when it resolved; what each pull downloaded (B's
    // shared busybox layer came with A, so B downloaded less than its size).
    let (status, cache) = server.request("GET", "/v1/images", None).await;
    assert_eq!(status, 200, "{cache}");
    let images = cache["images"].as_array().cloned().unwrap_or_default();
    assert_eq!(images.len(), 2, "{cache}");
    let of = |digest: &str| -> Value {
        images
            .iter()
            .find(|i| i["digest"] == digest)
            .cloned()
            .unwrap_or_else(|| panic!("no {digest}: {cache}"))
    };
    let size = |built: &Built, skip: &[div_image::Digest]| -> u64 {
        (built.manifest.len() + built.config.1.len()) as u64
            + built
                .blobs
                .iter()
                .filter(|(d, _)| !skip.contains(d))
                .map(|(_, bytes)| bytes.len() as u64)
                .sum::<u64>()
    };
    let tagged = of(&b_digest);
    assert_eq!(tagged["references"], json!([image]), "{cache}");
    let resolved = tagged["resolved"].as_array().cloned().unwrap_or_default();
    assert_eq!(resolved.len(), 1, "{cache}");
    assert_eq!(resolved[0]["reference"], image, "{cache}");
    assert!(
        resolved[0]["resolved_at"]
            .as_str()
            .is_some_and(|at| at.contains('T') && at.ends_with('Z')),
        "{cache}"
    );
    let b_downloaded = size(&b, &a.layers);
    assert_eq!(tagged["downloaded_bytes"], b_downloaded, "{cache}");
    assert!(b_downloaded < size(&b, &[]), "a shared layer");
    // A keeps no tag and what it downloaded: all of it.
    let untagged = of(&a_digest);
    assert_eq!(untagged["references"], json!([]), "{cache}");
    assert_eq!(untagged["resolved"], json!([]), "{cache}");
    assert_eq!(untagged["downloaded_bytes"], size(&a, &[]), "{cache}");

    // `pull: never` with nothing cached: refused before anything is created.
    let runs_before = run_dirs(&server.home);
    let listed_before = runs_listed(&server).await.len();
    let trees_before = rootfs(&server.home);
    let other = format!("{}/tools/other:1", reg.addr);
    let said = format!(
        "`{other}` is not in this machine's image cache, and --pull never forbids pulling it: pull it once with --pull missing (the default) or --pull always"
    );
    let events = pull(&server, &other, Some("never")).await;
    let last = events.last().expect("a last line");
    assert_eq!(last["event"], "error", "{events:?}");
    assert!(
        last["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&said)),
        "{events:?}"
    );
    let mut extra = super::entrypoint("train.py::main");
    extra["image"] = json!(other);
    extra["pull"] = json!("never");
    extra["code"] = code;
    let (status, answer) = server.create_run("unused", extra).await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&said)),
        "{answer}"
    );
    assert_eq!(run_dirs(&server.home), runs_before, "no run created");
    assert_eq!(runs_listed(&server).await.len(), listed_before, "no run");
    assert_eq!(rootfs(&server.home), trees_before, "nothing pulled");
}
