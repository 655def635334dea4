//! Runs that leave traps where the supervisor looks: `/tmp/divergent/result.json` and
//! `telemetry.jsonl` as a FIFO, a link (to `/dev/zero`, to a host file, to the state
//! database), a folder, a 10 GB sparse file, or `/tmp/divergent` itself a link to a host
//! folder; and leftovers under `/mnt` that are FIFOs and links. The supervisor neither hangs,
//! nor follows a link, nor reads without bound: the run ends as it exited, and the result,
//! the verdict and the telemetry say what was wrong with the file.

use serde_json::{Value, json};

use crate::harness::Server;

/// Plants `kind` at `/tmp/divergent/<file>` (`host_file`: a JSON file on the host, outside
/// the run's view; `state_db`: the server's database, also hidden).
fn plant(kind: &str, file: &str, host_file: &str, state_db: &str) -> String {
    let at = format!("/tmp/divergent/{file}");
    match kind {
        "fifo" => format!("mkfifo {at}"),
        "dev-zero" => format!("ln -s /dev/zero {at}"),
        "host-file" => format!("ln -s {host_file} {at}"),
        "state-db" => format!("ln -s {state_db} {at}"),
        "folder" => format!("mkdir {at}"),
        "sparse-10g" => format!("truncate -s 10G {at}"),
        other => panic!("no such trap {other}"),
    }
}

async fn result_of(server: &Server, id: &str) -> Value {
    let (status, result) = server
        .request("GET", &format!("/v1/runs/{id}/result"), None)
        .await;
    assert_eq!(status, 200, "{result}");
    result
}

async fn telemetry_of(server: &Server, id: &str) -> Value {
    let (status, telemetry) = server
        .request("GET", &format!("/v1/runs/{id}/telemetry"), None)
        .await;
    assert_eq!(status, 200, "{telemetry}");
    telemetry
}

#[tokio::test(flavor = "multi_thread")]
async fn result_and_telemetry_traps_are_refused_not_followed_and_the_run_ends_normally() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    // A host file a link could reach: valid JSON, so following it would be seen.
    let outside = server.home.parent().expect("a parent").join("host.json");
    std::fs::write(&outside, r#"{"x": 1, "stolen": true}"#).expect("host.json");
    let host_file = outside.display().to_string();
    let state_db = server.home.join("state.db").display().to_string();
    let traps: [(&str, &str, &str); 6] = [
        (
            "fifo",
            "is a FIFO (named pipe), not a regular file; it was not read",
            "is a FIFO (named pipe), not a regular file; it was not read",
        ),
        (
            "dev-zero",
            "is (or lies under) a symbolic link, which is not followed",
            "is (or lies under) a symbolic link, which is not followed",
        ),
        (
            "host-file",
            "is (or lies under) a symbolic link, which is not followed",
            "is (or lies under) a symbolic link, which is not followed",
        ),
        (
            "state-db",
            "is (or lies under) a symbolic link, which is not followed",
            "is (or lies under) a symbolic link, which is not followed",
        ),
        (
            "folder",
            "is a folder, not a regular file; it was not read",
            "is a folder, not a regular file; it was not read",
        ),
        (
            "sparse-10g",
            "is 10.7 GB, over the 16.8 MB it may be; it was not read",
            "only its first lines were read, up to here",
        ),
    ];
    let mut ids = Vec::new();
    for (kind, _, _) in traps {
        let command = format!(
            "{}; {}; echo planted {kind}",
            plant(kind, "result.json", &host_file, &state_db),
            plant(kind, "telemetry.jsonl", &host_file, &state_db),
        );
        let (status, run) = server
            .create_run(&command, json!({"checks": ["x>0"]}))
            .await;
        assert_eq!(status, 201, "{run}");
        ids.push(run["id"].as_str().expect("an id").to_owned());
    }
    // `/tmp/divergent` itself a link to a host folder holding a result.
    let folder = server
        .home
        .parent()
        .expect("a parent")
        .join("host-divergent");
    std::fs::create_dir_all(&folder).expect("a host folder");
    std::fs::write(folder.join("result.json"), r#"{"x": 1, "stolen": true}"#).expect("result");
    std::fs::write(folder.join("telemetry.jsonl"), "{\"stolen\": 1}\n").expect("telemetry");
    let (_, run) = server
        .create_run(
            &format!(
                "rm -r /tmp/divergent && ln -s {} /tmp/divergent && echo planted folder-link",
                folder.display()
            ),
            json!({"checks": ["x>0"]}),
        )
        .await;
    let folder_link = run["id"].as_str().expect("an id").to_owned();

    for ((kind, result_says, telemetry_says), id) in traps.iter().zip(&ids) {
        let ended = server.wait_end(id).await;
        let log = server.log_text(id).await;
        assert_eq!(ended["status"], "succeeded", "{kind}: {ended}\n{log}");
        assert_eq!(ended["exit_code"], 0, "{kind}: {ended}");
        assert!(log.contains(&format!("planted {kind}\n")), "{kind}: {log}");
        let result = result_of(&server, id).await;
        assert_eq!(result["result"], Value::Null, "{kind}: {result}");
        let problem = result["problem"].as_str().unwrap_or("");
        assert!(
            problem.starts_with("/tmp/divergent/result.json ") && problem.contains(result_says),
            "{kind}: {problem:?}"
        );
        let line = ended["verdicts"][0]["line"].as_str().unwrap_or("");
        assert!(line.contains(result_says), "{kind}: {line:?}");
        let telemetry = telemetry_of(&server, id).await;
        assert_eq!(telemetry["points"], json!([]), "{kind}: {telemetry}");
        let bad = telemetry["bad_lines"][0]["error"].as_str().unwrap_or("");
        assert!(
            bad.starts_with("/tmp/divergent/telemetry.jsonl ") && bad.contains(telemetry_says),
            "{kind}: {telemetry}"
        );
        assert!(
            log.contains(&format!("div: /tmp/divergent/result.json {result_says}")),
            "{kind}: {log}"
        );
    }
    let ended = server.wait_end(&folder_link).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let result = result_of(&server, &folder_link).await;
    assert_eq!(result["result"], Value::Null, "{result}");
    assert!(
        result["problem"]
            .as_str()
            .is_some_and(|p| p.contains("symbolic link, which is not followed")),
        "{result}"
    );
    let telemetry = telemetry_of(&server, &folder_link).await;
    assert_eq!(telemetry["points"], json!([]), "{telemetry}");

    // Every core came back: a plain run after them all runs and reads its result.
    let (_, run) = server
        .create_run(
            "echo '{\"x\": 2}' > /tmp/divergent/result.json",
            json!({"checks": ["x>0"]}),
        )
        .await;
    let ended = server.wait_end(run["id"].as_str().expect("an id")).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(ended["verdicts"][0]["outcome"], "passed", "{ended}");
}

#[tokio::test(flavor = "multi_thread")]
async fn leftovers_under_mnt_are_measured_without_following_links_or_opening_fifos() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let outside = server.home.parent().expect("a parent").join("host-big");
    std::fs::create_dir_all(&outside).expect("a host folder");
    std::fs::write(outside.join("big"), vec![7u8; 1 << 20]).expect("a host file");
    // `$m/…`, not `/mnt/…`: a `/mnt/<name>` written in the command is made a volume.
    let command = format!(
        "m=/mnt; mkfifo $m/pipe; ln -s {} $m/hostlink; mkdir $m/junk; mkfifo $m/junk/fifo; \
         ln -s {} $m/junk/link; ln -s /dev/zero $m/junk/zero; head -c 1000 /dev/zero > $m/junk/f; \
         echo left traps",
        outside.display(),
        outside.display()
    );
    let (_, run) = server.create_run(&command, json!({})).await;
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    let log = server.log_text(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}\n{log}");
    // Only the 1000 bytes written count: not the link's target, not /dev/zero, not the FIFO.
    assert!(
        log.contains("/mnt/junk is not a volume, so the 1.0K the run wrote there"),
        "{log}"
    );
    assert!(
        log.contains("/mnt/hostlink is not a volume, so the 0B"),
        "{log}"
    );
    assert!(
        log.contains("/mnt/pipe is not a volume, so the 0B"),
        "{log}"
    );
    // The links went, never what they point at.
    assert_eq!(
        std::fs::read(outside.join("big"))
            .expect("the host file")
            .len(),
        1 << 20
    );
    let mnt = server.home.join("runs").join(&id).join("mnt");
    assert_eq!(
        std::fs::read_dir(&mnt).map(|d| d.count()).unwrap_or(0),
        0,
        "leftovers stayed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_end_is_reported_as_unreadable_and_keeps_the_exit_code() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run(
            "echo first; while [ ! -f /tmp/go ]; do sleep 0.05; done; exit 3",
            json!({}),
        )
        .await;
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "first\n").await;
    let (home, dir) = server.kill().await;
    let run_dir = home.join("runs").join(&id);
    std::fs::write(crate::harness::in_run(&run_dir, "tmp/go"), b"")
        .expect("the run's /tmp is writable");
    let end = run_dir.join("end.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !end.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor never ended the run"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Damaged while no server ran: cut in half (its exit code is near the top).
    let whole = std::fs::read(&end).expect("end.json");
    std::fs::write(&end, &whole[..whole.len() / 2]).expect("cut end.json");
    let server = Server::at(crate::harness::options(
        &home,
        Some("h100:2"),
        div_server::SandboxMode::Auto,
    ))
    .await;
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 3, "{ended}");
    let reason = ended["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with(&format!(
            "the run's end record (runs/{id}/end.json) could not be read: "
        )) && reason.ends_with("; its exit code, 3, was found in it"),
        "{reason:?}"
    );
    drop(server);
    drop(dir);
}
