//! Runs end to end: placed through the API, run by a supervisor, followed to their end.

use serde_json::json;

use crate::harness::{HOST_LINE, Server};

#[tokio::test(flavor = "multi_thread")]
async fn a_run_runs_and_passes_its_checks() {
    let server = Server::start().await;
    let command = r#"echo hello from $DIVERGENT_RUN_NAME; python -c 'import json,os; json.dump({"metrics": {"accuracy": 0.91, "loss": 0.71}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))'; printf '{"step": 1, "loss": 0.5}\nnot json\n' > $DIVERGENT_TELEMETRY_PATH"#;
    let (status, run) = server
        .create_run(
            command,
            json!({"checks": ["metrics.accuracy>=0.8", "metrics.loss<0.6"]}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "queued");
    let name = run["name"].as_str().expect("a name");
    assert!(name.starts_with("run-") && name.len() == 8, "{name}");
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(ended["exit_code"], 0);
    let log = server.log_text(id).await;
    assert!(log.contains(&format!("hello from {name}\n")), "{log}");
    assert!(
        log.contains("check passed: metrics.accuracy >= 0.8 (found 0.91)\n"),
        "{log}"
    );
    assert!(
        log.contains("check failed: metrics.loss < 0.6 (found 0.71)\n"),
        "{log}"
    );
    let (_, result) = server
        .request("GET", &format!("/v1/runs/{id}/result"), None)
        .await;
    assert_eq!(result["result"]["metrics"]["accuracy"], 0.91, "{result}");
    assert_eq!(result["verdicts"].as_array().map(Vec::len), Some(2));
    let (_, telemetry) = server
        .request("GET", &format!("/v1/runs/{id}/telemetry"), None)
        .await;
    assert_eq!(
        telemetry["points"],
        json!([{"line": 1, "point": {"step": 1, "loss": 0.5}}]),
        "{telemetry}"
    );
    assert_eq!(telemetry["bad_lines"][0]["line"], 2, "{telemetry}");
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_code_passes_through() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run("echo about to fail; exit 3", json!({}))
        .await;
    let ended = server.wait_end(run["id"].as_str().expect("an id")).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 3);
    assert_eq!(ended["reason"], "about to fail");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_outlives_a_killed_server_and_is_followed_to_its_end() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run(
            "echo first; while [ ! -f /tmp/go ]; do sleep 0.05; done; echo second; exit 4",
            json!({}),
        )
        .await;
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "first\n").await;
    let (home, dir) = server.kill().await;
    // While no server runs, the run goes on and ends.
    let run_dir = home.join("runs").join(&id);
    std::fs::write(crate::harness::in_run(&run_dir, "tmp/go"), b"")
        .expect("the run's /tmp is writable");
    let end = home.join("runs").join(&id).join("end.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !end.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor never ended the run"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let server = Server::at(crate::harness::options(
        &home,
        Some("h100:2"),
        div_server::SandboxMode::Auto,
    ))
    .await;
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 4);
    assert_eq!(
        server.log_text(&id).await,
        format!("{HOST_LINE}first\nsecond\n")
    );
    drop(server);
    drop(dir);
}

/// What a server killed between starting a run's supervisor and recording it leaves in
/// `state.db`: the run running, with no supervisor pid. Returns the pid it had.
fn forget_supervisor(home: &std::path::Path, id: &str) -> u32 {
    let db = rusqlite::Connection::open(home.join("state.db")).expect("state.db opens");
    let internal: String = db
        .query_row("SELECT internal FROM runs WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .expect("the run's record");
    let mut internal: serde_json::Value = serde_json::from_str(&internal).expect("JSON");
    let pid = internal["pid"].as_u64().expect("a supervisor pid") as u32;
    internal["pid"] = serde_json::Value::Null;
    db.execute(
        "UPDATE runs SET internal = ?2 WHERE id = ?1",
        rusqlite::params![id, internal.to_string()],
    )
    .expect("the record is rewritten");
    pid
}

fn restart(home: &std::path::Path) -> impl std::future::Future<Output = Server> {
    Server::at(crate::harness::options(
        home,
        Some("h100:2"),
        div_server::SandboxMode::Auto,
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_supervisor_the_server_did_not_record_is_found_and_its_run_ends_once() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run(
            "echo started; while [ ! -f /tmp/go ]; do sleep 0.05; done; echo done; exit 5",
            json!({}),
        )
        .await;
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "started\n").await;
    let (home, dir) = server.kill().await;
    forget_supervisor(&home, &id);
    let server = restart(&home).await;
    // The restarted server finds the supervisor by the run's lock: the run is still running,
    // not lost, and not started a second time.
    for _ in 0..10 {
        let (_, now) = server.request("GET", &format!("/v1/runs/{id}"), None).await;
        assert_eq!(now["status"], "running", "{now}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A second supervisor started on the same run (a launch repeated) leaves it untouched.
    let run_dir = home.join("runs").join(&id);
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_div-supervise"))
        .arg(&run_dir)
        .status()
        .expect("a second supervisor runs");
    assert!(second.success(), "{second:?}");
    std::fs::write(crate::harness::in_run(&run_dir, "tmp/go"), b"")
        .expect("the run's /tmp is writable");
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 5, "{ended}");
    assert_eq!(
        server.log_text(&id).await,
        format!("{HOST_LINE}started\ndone\n")
    );
    drop(server);
    drop(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_recorded_as_lost_is_never_started_afterwards() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run("echo started; sleep 1000", json!({}))
        .await;
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "started\n").await;
    let (home, dir) = server.kill().await;
    // The supervisor dies too (SIGKILL: no end written), and the record forgets it.
    let pid = forget_supervisor(&home, &id);
    std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    let run_dir = home.join("runs").join(&id);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty()) {
        assert!(std::time::Instant::now() < deadline, "the supervisor lives");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let server = restart(&home).await;
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], serde_json::Value::Null, "{ended}");
    // A supervisor that starts on it now (one that was still starting when the server gave
    // up on it) runs nothing: the log stays as it was, and no end is written over the record.
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_div-supervise"))
        .arg(&run_dir)
        .status()
        .expect("a late supervisor runs");
    assert!(second.success(), "{second:?}");
    assert_eq!(server.log_text(&id).await, format!("{HOST_LINE}started\n"));
    assert!(!run_dir.join("end.json").exists());
    drop(server);
    drop(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ceiling_stops_the_run_and_spends_exactly_it() {
    let server = Server::start().await;
    // 1 cent buys 7 s (7.27 s) at $4.95/h. The run ignores the SIGTERM it is sent at 4 s
    // (the grace before a ceiling is at most half of what it buys), so it is killed at the
    // ceiling itself.
    let (status, run) = server
        .create_run(
            "trap '' TERM; echo start; sleep 1000",
            json!({"sku": "h100", "max_spend_cents": 1}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "hit_ceiling", "{ended}");
    assert_eq!(ended["spent_cents"], 1);
    let seconds = ended["duration_seconds"].as_u64().expect("a duration");
    assert!((7..=8).contains(&seconds), "{ended}");
    let log = server.log_text(id).await;
    assert!(
        log.starts_with(
            &format!("div: emulated H100 ×1 (DIVERGENT_EMULATE_GPUS): this run has no GPU\n{HOST_LINE}start\n")
        ),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_past_its_memory_is_killed() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run(
            "python3 -c 'x = bytearray(3 << 30); print(len(x))'",
            json!({}),
        )
        .await;
    let ended = server.wait_end(run["id"].as_str().expect("an id")).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 137);
    assert_eq!(ended["reason"], "killed (out of memory, or stopped)");
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_cancels_and_kills_the_whole_tree() {
    let server = Server::start_with(None, div_server::SandboxMode::None).await;
    let (_, run) = server
        .create_run("sleep 1000 & sleep 1000", json!({}))
        .await;
    let id = run["id"].as_str().expect("an id");
    server.wait_running(id).await;
    let pids_of = || -> Vec<u32> {
        let mut pids = Vec::new();
        for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
            if let Ok(env) = std::fs::read(e.path().join("environ"))
                && String::from_utf8_lossy(&env).contains(&format!("DIVERGENT_RUN_ID={id}"))
            {
                pids.extend(e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()));
            }
        }
        pids
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while pids_of().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the run's processes never appeared"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, stopped) = server
        .request("POST", &format!("/v1/runs/{id}/stop"), None)
        .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["status"], "canceled", "{stopped}");
    assert_eq!(pids_of(), Vec::<u32>::new(), "an orphan survived");
    let (_, again) = server
        .request("POST", &format!("/v1/runs/{id}/stop"), None)
        .await;
    assert_eq!(again, stopped);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_environment_follows_the_runtime_table() {
    let server = Server::start().await;
    let (status, _) = server
        .request(
            "PUT",
            "/v1/secrets/TOKEN",
            Some(json!({"value": "from-secret"})),
        )
        .await;
    assert_eq!(status, 200);
    server
        .request(
            "PUT",
            "/v1/secrets/ONLY_SECRET",
            Some(json!({"value": "s"})),
        )
        .await;
    server
        .request(
            "PUT",
            "/v1/secrets/DIVERGENT_RUN_NAME",
            Some(json!({"value": "nope"})),
        )
        .await;
    let code = server.code(&[("train.py", "")]).await;
    let (_, run) = server
        .create_run(
            "echo \"$PIP_BREAK_SYSTEM_PACKAGES $TOKEN $ONLY_SECRET $DIVERGENT_RUN_NAME $DIVERGENT_RESULT_PATH $DIVERGENT_TELEMETRY_PATH $PWD\"; env | grep -c CARGO || true",
            json!({"code": code, "env": [{"key": "TOKEN", "value": "a"}, {"key": "TOKEN", "value": "from-env"}, {"key": "PIP_BREAK_SYSTEM_PACKAGES", "value": "0"}]}),
        )
        .await;
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    let name = ended["name"].as_str().expect("a name");
    assert_eq!(
        server.log_text(id).await,
        format!(
            "{HOST_LINE}0 from-env s {name} /tmp/divergent/result.json /tmp/divergent/telemetry.jsonl /workspace\n0\n"
        )
    );
    let (_, secrets) = server.request("GET", "/v1/secrets", None).await;
    assert!(!secrets.to_string().contains("from-secret"), "{secrets}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_keeps_writes_off_the_host() {
    let server = Server::start().await;
    let host_marker = format!("/var/tmp/div-sandbox-{}", std::process::id());
    let command = format!(
        "touch {host_marker} 2>/dev/null && echo wrote-var; touch /etc/div-x 2>/dev/null && echo wrote-etc; touch /div-root && echo root-is-private; ls {} >/dev/null 2>&1 && echo saw-home; echo ok > /workspace/w && echo workspace; echo ok > /tmp/t && echo tmp",
        server.home.display()
    );
    let (_, run) = server.create_run(&command, json!({})).await;
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(
        server.log_text(id).await,
        format!("{HOST_LINE}root-is-private\nworkspace\ntmp\n")
    );
    assert!(!std::path::Path::new(&host_marker).exists());
    assert!(!std::path::Path::new("/etc/div-x").exists());
    assert!(!std::path::Path::new("/div-root").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_sandbox_the_log_says_so_and_paths_are_real() {
    let server = Server::start_with(None, div_server::SandboxMode::None).await;
    let code = server.code(&[("train.py", "")]).await;
    let (_, run) = server
        .create_run(
            "echo {\\\"ok\\\": true} > $DIVERGENT_RESULT_PATH; pwd",
            json!({"code": code, "checks": ["ok==true"]}),
        )
        .await;
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let log = server.log_text(id).await;
    let run_dir = server.home.join("runs").join(id);
    assert_eq!(
        log,
        format!(
            "{HOST_LINE}div: no sandbox (bubblewrap is missing or turned off): this run sees and can write this machine's files; /workspace and /tmp/divergent are directories under the state directory, and no volume is at /mnt\n{}\ncheck passed: ok == true (found true)\n",
            run_dir.join("workspace").display()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_run_leaves_under_mnt_outside_a_volume_is_named() {
    let server = Server::start().await;
    let (_, v) = server
        .request("POST", "/v1/volumes", Some(json!({"name": "kept"})))
        .await;
    assert_eq!(v["name"], "kept");
    let (_, run) = server
        .create_run(
            "d=mask-models; mkdir -p /mnt/$d && head -c 1100000 /dev/zero > /mnt/$d/w.bin && echo saved > /mnt/kept/note",
            json!({}),
        )
        .await;
    let id = run["id"].as_str().expect("an id");
    server.wait_end(id).await;
    assert_eq!(
        server.log_text(id).await,
        format!(
            "{HOST_LINE}/mnt/mask-models is not a volume, so the 1.1M the run wrote there went with the container. Volumes are mounted when a run starts: make mask-models first with div storage put mask-models <path>, or name /mnt/mask-models in the command.\n"
        )
    );
    assert_eq!(
        std::fs::read_to_string(server.home.join("volumes/kept/note")).expect("kept"),
        "saved\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_the_command_names_is_made_before_the_run_is_queued() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run(
            "mkdir -p /mnt/mask-models/base && echo w > /mnt/mask-models/base/x",
            json!({}),
        )
        .await;
    server.wait_end(run["id"].as_str().expect("an id")).await;
    let (_, tree) = server
        .request("GET", "/v1/volumes/mask-models/tree?path=", None)
        .await;
    assert_eq!(tree["entries"][1]["path"], "base/x", "{tree}");
}

/// A `/mnt/<volume>` in an `env` value names the volume as one in the command does, for any
/// client that places runs itself: it is made before the run is queued, and what the run
/// writes there is kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_volume_an_env_value_names_is_made_before_the_run_is_queued() {
    let server = Server::start().await;
    let (status, run) = server
        .create_run(
            "mkdir -p \"$CKPT_DIR\" && echo w > \"$CKPT_DIR/x\"",
            json!({"env": [{"key": "CKPT_DIR", "value": "/mnt/ckpt-vol/ckpt"}]}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    server.wait_end(run["id"].as_str().expect("an id")).await;
    let (_, tree) = server
        .request("GET", "/v1/volumes/ckpt-vol/tree?path=", None)
        .await;
    let paths: Vec<&str> = tree["entries"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["path"].as_str()).collect())
        .unwrap_or_default();
    assert!(paths.contains(&"ckpt/x"), "{tree}");
}

/// A stop that lands while the supervisor is still starting (before it can handle a signal)
/// cancels the run; it never reads as a lost supervisor.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_while_the_supervisor_starts_cancels_the_run() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut options = crate::harness::options(
        &dir.path().join("home"),
        None,
        div_server::SandboxMode::None,
    );
    // A supervisor slow to start: the shell waits, then becomes the real one.
    let real = options.supervisor.program.clone();
    options.supervisor = div_server::SupervisorCommand {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "sleep 0.5; exec \"$0\" \"$1\"".into(),
            real.display().to_string(),
        ],
    };
    let server = Server::at(options).await;
    let (_, run) = server.create_run("sleep 1000", json!({})).await;
    let id = run["id"].as_str().expect("an id");
    server.wait_running(id).await;
    let (status, stopped) = server
        .request("POST", &format!("/v1/runs/{id}/stop"), None)
        .await;
    assert_eq!(status, 200, "{stopped}");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "canceled", "{ended}");
}

/// With the scheduler's tick an hour long, a run still starts as soon as it is placed, and
/// a following log stream still ends as soon as the run does: both wake the scheduler.
#[tokio::test(flavor = "multi_thread")]
async fn placing_a_run_and_following_it_to_its_end_wake_the_scheduler() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut options = crate::harness::options(
        &dir.path().join("home"),
        Some("h100:2"),
        div_server::SandboxMode::Auto,
    );
    options.tick = std::time::Duration::from_secs(3600);
    let server = Server::at(options).await;
    let (status, run) = server.create_run("echo woken", json!({})).await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id");
    let followed = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        server.try_request(
            "GET",
            &format!("/v1/runs/{id}/log?offset=0&follow=true"),
            None,
            &[],
        ),
    )
    .await
    .expect("the run started and its end was seen without waiting for a tick")
    .expect("the log request went through");
    let stream = String::from_utf8_lossy(&followed.1).into_owned();
    assert!(
        stream.lines().any(|l| l.starts_with("end ")),
        "an end frame: {stream}"
    );
    assert_eq!(
        crate::harness::decode_chunks(&followed.1),
        format!("{HOST_LINE}woken\n")
    );
    let (_, ended) = server.request("GET", &format!("/v1/runs/{id}"), None).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
}

/// A run that shipped nothing (`--no-upload`) runs the image as it is, in its working
/// directory: here the image is this machine's own system, and that directory is `/`. A run
/// with code starts in `/workspace`, which holds it.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_without_code_starts_in_the_images_working_directory() {
    let server = Server::start().await;
    let (_, bare) = server
        .create_run("pwd; ls /workspace | wc -l", json!({}))
        .await;
    let bare = bare["id"].as_str().expect("an id").to_owned();
    let code = server
        .code(&[("train.py", "print('hi')\n"), ("data/x.csv", "1\n")])
        .await;
    let (_, shipped) = server.create_run("pwd; ls", json!({"code": code})).await;
    let shipped = shipped["id"].as_str().expect("an id").to_owned();
    for id in [&bare, &shipped] {
        let ended = server.wait_end(id).await;
        assert_eq!(ended["status"], "succeeded", "{ended}");
    }
    assert_eq!(server.log_text(&bare).await, format!("{HOST_LINE}/\n0\n"));
    assert_eq!(
        server.log_text(&shipped).await,
        format!("{HOST_LINE}/workspace\ndata\ntrain.py\n")
    );
}

/// A server killed between starting a run's supervisor and sending it the secrets leaves a
/// supervisor that reads not a byte: it runs nothing, and the run is placed again, with its
/// secrets, rather than ending as lost or running without them. Here every supervisor of the
/// first server gets its stdin closed (a wrapper), as the killed server's would.
#[tokio::test(flavor = "multi_thread")]
async fn a_supervisor_whose_secrets_never_came_runs_nothing_and_the_run_is_placed_again() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().join("home");
    let mut options = crate::harness::options(&home, Some("h100:2"), div_server::SandboxMode::Auto);
    options.supervisor = div_server::SupervisorCommand {
        program: std::path::PathBuf::from("/bin/sh"),
        args: vec![
            "-c".into(),
            "exec \"$0\" \"$@\" < /dev/null".into(),
            env!("CARGO_BIN_EXE_div-supervise").into(),
        ],
    };
    let server = Server::at(options).await;
    let (status, _) = server
        .request(
            "PUT",
            "/v1/secrets/API_KEY",
            Some(json!({"value": "k-12345"})),
        )
        .await;
    assert!(status < 300, "the secret is set");
    let (_, run) = server
        .create_run("echo \"key=$API_KEY\"; exit 3", json!({}))
        .await;
    let id = run["id"].as_str().expect("an id").to_owned();
    let run_dir = home.join("runs").join(&id);
    // Its supervisors get nothing, mark the run and leave; it is never ended, never run.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !run_dir.join("secrets.unsent").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no supervisor left its mark"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for _ in 0..10 {
        let (_, now) = server.request("GET", &format!("/v1/runs/{id}"), None).await;
        assert!(
            now["status"] == "running" || now["status"] == "queued",
            "{now}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!run_dir.join("end.json").exists());
    let (home, _) = server.kill().await;
    // Restarted as usual, the server places it again and sends the secrets.
    let server = restart(&home).await;
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 3, "{ended}");
    assert!(
        server.log_text(&id).await.contains("key=k-12345\n"),
        "{}",
        server.log_text(&id).await
    );
    drop(server);
    drop(dir);
}
