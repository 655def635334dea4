//! `div run` while attached, from the real binary: a lost log connection resumed, Ctrl-C while
//! the run is being placed, a second Ctrl-C, the upload progress bar on a terminal, a reader
//! that goes away.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use div_api::{Run, RunStatus, logframe};
use div_test_support::wait_until_async;
use insta::assert_snapshot;
use tokio::io::{AsyncBufReadExt, BufReader};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::{DIV, World, run};

/// A log endpoint whose first `cuts` answers stop part-way (mid-frame, mid-line); each answer
/// starts at the `offset` asked, as the API says.
struct Cutting {
    log: Vec<u8>,
    ended: Run,
    cuts: usize,
    calls: AtomicUsize,
}

impl Respond for Cutting {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let offset = request
            .url
            .query_pairs()
            .find(|(k, _)| k == "offset")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0)
            .min(self.log.len());
        let mut body = Vec::new();
        let mut at = offset;
        for chunk in self.log[offset..].chunks(37) {
            body.extend_from_slice(&logframe::encode_chunk(at as u64, chunk));
            at += chunk.len();
        }
        body.extend_from_slice(&logframe::encode_end(&self.ended));
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.cuts {
            body.truncate(body.len() / 3);
        }
        ResponseTemplate::new(200).set_body_raw(body, logframe::MEDIA_TYPE)
    }
}

#[tokio::test]
async fn a_lost_log_connection_is_resumed_with_no_line_lost_or_repeated() {
    let world = World::new().await;
    let mut ended = run(RunStatus::Succeeded);
    ended.duration_seconds = 760;
    ended.spent_cents = 105;
    let log: Vec<u8> = (1..=300)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect();
    world
        .mount_placing(&run(RunStatus::Queued), &[], &ended)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/runs/r_run-k4t9/log"))
        .respond_with(Cutting {
            log: log.clone(),
            ended: ended.clone(),
            cuts: 3,
            calls: AtomicUsize::new(0),
        })
        .with_priority(1)
        .mount(&world.server)
        .await;
    let done = world.div(&["run", "train.py"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(
        done.stdout.as_bytes() == log.as_slice(),
        "every line exactly once, in order:\n{}",
        done.stdout
    );
    assert_eq!(
        done.stderr.lines().last(),
        Some("run-k4t9 finished in 12m 40s and spent $1.05")
    );
    let asked = world
        .requests()
        .await
        .iter()
        .filter(|r| r.ends_with("/log"))
        .count();
    assert_eq!(asked, 4, "three cut answers, each resumed, then the rest");
}

/// Mount a `POST /v1/runs` that answers after `delay`.
async fn slow_placing(world: &World, delay: Duration) {
    Mock::given(method("POST"))
        .and(path("/v1/runs"))
        .respond_with(
            div_test_support::mock::json_response(201, &run(RunStatus::Queued)).set_delay(delay),
        )
        .with_priority(1)
        .mount(&world.server)
        .await;
}

/// Start `div run train.py` (with a long API deadline), and return once the request that
/// places the run has reached the control plane.
async fn started_placing(
    world: &World,
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
) {
    let mut child = world
        .command(&["run", "train.py"])
        .env("DIVERGENT_API_TIMEOUT", "120")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    let stderr = BufReader::new(child.stderr.take().expect("piped")).lines();
    wait_until_async("the run placed", Duration::from_secs(30), || async {
        let requests = world.requests().await;
        match requests.iter().any(|r| r == "POST /v1/runs") {
            true => Ok(()),
            false => Err(requests.join(", ")),
        }
    })
    .await;
    (child, stderr)
}

fn interrupt(child: &tokio::process::Child) {
    let pid = child.id().expect("running") as i32;
    let pid = rustix::process::Pid::from_raw(pid).expect("a positive pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT sent");
}

#[tokio::test]
async fn ctrl_c_while_the_run_is_being_placed_waits_for_it_then_detaches() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    slow_placing(&world, Duration::from_secs(3)).await;
    let (mut child, mut stderr) = started_placing(&world).await;
    interrupt(&child);
    let mut seen = Vec::new();
    while let Some(line) = stderr.next_line().await.expect("reads") {
        seen.push(line);
    }
    let status = child.wait().await.expect("exits");
    assert_eq!(status.code(), Some(208));
    // Outside a repository, said first; then the shipping line.
    assert_eq!(
        seen[0],
        "not a git repository: shipping every file but the skip list (1 file)"
    );
    assert_snapshot!(seen[2..].join("\n"), @r"
    waiting to hear whether the run was placed, to say how to follow it; Ctrl-C again to exit now
    run-k4t9  H100  $4.95/h  no ceiling
    detached from run-k4t9; it goes on
      follow it again: div logs run-k4t9 --follow
      stop it:         div stop run-k4t9
    ");
}

#[tokio::test]
async fn a_second_ctrl_c_exits_at_once() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    // An answer that would come long after the test's own deadline.
    slow_placing(&world, Duration::from_secs(600)).await;
    let (mut child, mut stderr) = started_placing(&world).await;
    interrupt(&child);
    let mut seen = Vec::new();
    while let Some(line) = stderr.next_line().await.expect("reads") {
        let waiting = line.starts_with("waiting to hear");
        seen.push(line);
        if waiting {
            break;
        }
    }
    interrupt(&child);
    while let Some(line) = stderr.next_line().await.expect("reads") {
        seen.push(line);
    }
    let status = child.wait().await.expect("exits");
    assert_eq!(status.code(), Some(208));
    // Outside a repository, said first; then the shipping line.
    assert_eq!(
        seen[0],
        "not a git repository: shipping every file but the skip list (1 file)"
    );
    assert_snapshot!(seen[2..].join("\n"), @r"
    waiting to hear whether the run was placed, to say how to follow it; Ctrl-C again to exit now
    exited before the control plane answered; the run may have been placed: `div runs` finds it
    ");
}

#[tokio::test]
async fn ctrl_c_before_placing_says_no_run_was_made() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    // The code upload hangs: the run is not being placed yet.
    Mock::given(method("POST"))
        .and(path_regex("^/v1/volumes/[^/]+/trees$"))
        .respond_with(ResponseTemplate::new(201).set_delay(Duration::from_secs(600)))
        .with_priority(1)
        .mount(&world.server)
        .await;
    let mut child = world
        .command(&["run", "train.py"])
        .env("DIVERGENT_API_TIMEOUT", "120")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped")).lines();
    wait_until_async("the code committed", Duration::from_secs(30), || async {
        let requests = world.requests().await;
        match requests.iter().any(|r| r.ends_with("/trees")) {
            true => Ok(()),
            false => Err(requests.join(", ")),
        }
    })
    .await;
    interrupt(&child);
    let mut seen = Vec::new();
    while let Some(line) = stderr.next_line().await.expect("reads") {
        seen.push(line);
    }
    assert_eq!(child.wait().await.expect("exits").code(), Some(208));
    assert_eq!(
        seen.last().map(String::as_str),
        Some("interrupted before the run was placed; no run was made")
    );
    assert!(
        !world.requests().await.iter().any(|r| r == "POST /v1/runs"),
        "nothing was placed"
    );
}

#[tokio::test]
async fn the_upload_progress_bar_shows_on_a_terminal_when_the_upload_takes_long() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    let content = std::fs::read(world.project().join("train.py")).expect("read");
    let hash = blake3::hash(&content).to_hex().to_string();
    Mock::given(method("POST"))
        .and(path_regex("^/v1/volumes/[^/]+/blobs/missing$"))
        .respond_with(div_test_support::mock::json_response(
            200,
            &serde_json::json!({ "missing": [hash] }),
        ))
        .with_priority(1)
        .mount(&world.server)
        .await;
    Mock::given(method("PUT"))
        .and(path_regex("^/v1/volumes/[^/]+/blobs/[0-9a-f]+$"))
        .respond_with(ResponseTemplate::new(204).set_delay(Duration::from_secs(2)))
        .mount(&world.server)
        .await;

    // On a terminal (a pty made by `script`), the bar is drawn while the upload goes on.
    let mut script = tokio::process::Command::new("script");
    script.env_clear();
    for (key, value) in world.command(&[]).as_std().get_envs() {
        if let Some(value) = value
            && key != "NO_COLOR"
        {
            script.env(key, value);
        }
    }
    let on_terminal = script
        .env("TERM", "xterm")
        .args(["-qfec", &format!("{DIV} run -d train.py"), "/dev/null"])
        .current_dir(world.project())
        .output()
        .await
        .expect("script runs div on a pty");
    let transcript = String::from_utf8_lossy(&on_terminal.stdout);
    assert_eq!(on_terminal.status.code(), Some(0), "{transcript}");
    assert!(transcript.contains("uploading "), "{transcript}");
    assert!(transcript.contains("run-k4t9"), "{transcript}");

    // Piped, the same upload draws nothing.
    let piped = world.div(&["run", "-d", "train.py"]).await;
    assert_eq!(piped.code, 0, "{}", piped.stderr);
    assert!(!piped.stderr.contains("uploading"), "{}", piped.stderr);
}

#[tokio::test]
async fn a_reader_that_goes_away_ends_div_quietly() {
    let world = World::new().await;
    let mut child = world
        .command(&["run", "--dry-run", "train.py"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    // Close the read end at once, like `| head -0`.
    drop(child.stdout.take());
    let out = child.wait_with_output().await.expect("exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Ended as SIGPIPE ends any program whose reader went away (13), saying nothing.
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(13),
        "{stderr}"
    );
    assert!(!stderr.contains("error"), "{stderr}");
}

/// A log this `div` cannot read (here, not sent as a log): the run goes on, and `div` says how
/// to reach it. (A control plane that does not answer is waited for instead, below.)
#[tokio::test]
async fn a_log_that_cannot_be_followed_says_the_run_goes_on_and_how_to_reach_it() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Running))
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/runs/r_run-k4t9/log"))
        .respond_with(div_test_support::mock::json_response(
            200,
            &serde_json::json!({}),
        ))
        .with_priority(1)
        .mount(&world.server)
        .await;
    let done = world
        .command(&["run", "train.py"])
        .env("DIVERGENT_API_TIMEOUT", "1")
        .output()
        .await
        .expect("div runs");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(203), "{stderr}");
    assert_eq!(
        stderr.lines().last(),
        Some(
            "hint: run-k4t9 goes on: follow it again with `div logs run-k4t9 --follow`, stop it with `div stop run-k4t9`"
        ),
        "{stderr}"
    );
}

/// `div logs --follow` of a run whose day is long over (it started on 2025-01-01) while its
/// control plane answers only 503: it cannot still be going, so `div` does not wait for the
/// control plane; it says so and exits 201, with what to do once the control plane is back.
/// (The wait itself, for a run that may still be going, runs on tokio's paused clock in
/// div-core, `follow::a_follower_waits_hours_for_a_control_plane_that_went_away_and_goes_on`,
/// and end to end in `crash::a_follower_waits_for_a_stopped_control_plane_and_goes_on_once_it_is_back`.)
#[tokio::test]
async fn a_follower_does_not_wait_for_a_run_that_cannot_still_be_going() {
    let world = World::new().await;
    div_test_support::mock::mount_run(&world.server, &run(RunStatus::Running)).await;
    Mock::given(method("GET"))
        .and(path("/v1/runs/r_run-k4t9/log"))
        .respond_with(div_test_support::mock::error_response(
            503,
            "unavailable",
            "down for maintenance",
            serde_json::Value::Null,
        ))
        .mount(&world.server)
        .await;
    let done = world
        .command(&["logs", "run-k4t9", "--follow"])
        .env("DIVERGENT_API_TIMEOUT", "1")
        .output()
        .await
        .expect("div runs");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(201), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("error: the control plane does not answer, and run-k4t9 cannot still be going"),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("caused by: ") && l.contains("down for maintenance")),
        "{stderr}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(
            "hint: once the control plane answers again, `div logs run-k4t9` shows how the run ended"
        ),
        "{stderr}"
    );
}
