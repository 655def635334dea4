//! `logs` and `stop`: a followed log waits for the run's end, and for a control plane that
//! went away while the run may still be going; a stop ends a run once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use div_api::{
    ApiError, BlobSource, ByteSink, Catalogue, CommitTree, CommittedTree, ControlPlane, CreateRun,
    ErrorKind, ListRuns, LogStream, MissingBlobs, Run, RunList, RunResult, RunStatus, SecretInfo,
    Telemetry, Volume, VolumeEntry,
};
use div_core::{Event, FailureKind, LogsOptions, RunError, StopOutcome};
use div_test_support::{ConformanceContext, FakeControlPlane, quick_run};

use crate::Events;

async fn placed(cp: &FakeControlPlane, name: &str) -> String {
    let request: CreateRun = quick_run(&ConformanceContext::default(), Some(name.into()));
    cp.create_run(&format!("key-{name}"), &request)
        .await
        .expect("placed")
        .id
}

#[tokio::test]
async fn a_followed_log_has_every_byte_once_and_ends_with_the_run() {
    let cp = Arc::new(FakeControlPlane::new());
    let id = placed(&cp, "run-a").await;
    cp.append_log(&id, b"one\n").expect("exists");
    let following = {
        let cp = Arc::clone(&cp);
        tokio::spawn(async move {
            let mut events = Events::default();
            let options = LogsOptions {
                run: "run-a".into(),
                follow: true,
                node: None,
            };
            let run = div_core::logs(&*cp, &options, &mut events.sink()).await;
            (run, events)
        })
    };
    cp.append_log(&id, b"two\n").expect("exists");
    cp.finish_run(&id, b"one\ntwo\nthree\n", 3).expect("exists");
    let (run, events) = following.await.expect("no panic");
    let run = run.expect("followed");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.exit_code, Some(3));
    assert_eq!(events.log(), b"one\ntwo\nthree\n");
}

#[tokio::test]
async fn logs_without_follow_say_where_a_running_run_stands() {
    let cp = FakeControlPlane::new();
    let id = placed(&cp, "run-b").await;
    cp.append_log(&id, b"so far\n").expect("exists");
    let mut events = Events::default();
    let options = LogsOptions {
        run: id.clone(),
        follow: false,
        node: None,
    };
    let run = div_core::logs(&cp, &options, &mut events.sink())
        .await
        .expect("read");
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(events.log(), b"so far\n");
}

#[tokio::test]
async fn a_stop_ends_a_run_and_a_second_says_it_had_ended() {
    let cp = FakeControlPlane::new();
    placed(&cp, "run-c").await;
    let StopOutcome::Stopped(run) = div_core::stop(&cp, "run-c").await.expect("stopped") else {
        panic!("stopped now");
    };
    assert_eq!(run.status, RunStatus::Canceled);
    let again = div_core::stop(&cp, "run-c").await.expect("answered");
    assert!(
        matches!(again, StopOutcome::AlreadyEnded(ref r) if r.id == run.id),
        "{again:?}"
    );
    let err = div_core::stop(&cp, "run-zzz")
        .await
        .expect_err("no such run");
    assert!(
        matches!(err, RunError::RunNotFound(ref r) if r == "run-zzz"),
        "{err:?}"
    );
}

/// The fake, but able to go away: while `down`, every call answers `Unavailable`, as a client
/// does once its retries for a control plane that does not answer ran out, and a followed log
/// open on it breaks off. While it is up, the runs it shows started when `started_at` says.
struct Away {
    fake: FakeControlPlane,
    down: AtomicBool,
    went_down: tokio::sync::Notify,
    started_at: Option<String>,
}

impl Away {
    fn new(fake: FakeControlPlane, started_at: Option<String>) -> Away {
        Away {
            fake,
            down: AtomicBool::new(false),
            went_down: tokio::sync::Notify::new(),
            started_at,
        }
    }

    fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.went_down.notify_waiters();
    }

    fn come_back(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    fn up(&self) -> Result<(), ApiError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                "could not reach the control plane at `fake` after 9 tries over 30s",
            ));
        }
        Ok(())
    }

    fn shown(&self, mut run: Run) -> Run {
        if run.started_at.is_some()
            && let Some(at) = &self.started_at
        {
            run.started_at = Some(at.clone());
        }
        run
    }
}

#[async_trait]
impl ControlPlane for Away {
    async fn catalogue(&self) -> Result<Catalogue, ApiError> {
        self.up()?;
        self.fake.catalogue().await
    }
    async fn list_volumes(&self) -> Result<Vec<Volume>, ApiError> {
        self.up()?;
        self.fake.list_volumes().await
    }
    async fn create_volume(&self, n: &str) -> Result<Volume, ApiError> {
        self.up()?;
        self.fake.create_volume(n).await
    }
    async fn delete_volume(&self, n: &str) -> Result<(), ApiError> {
        self.up()?;
        self.fake.delete_volume(n).await
    }
    async fn missing_blobs(&self, v: &str, h: &[String]) -> Result<MissingBlobs, ApiError> {
        self.up()?;
        self.fake.missing_blobs(v, h).await
    }
    async fn upload_blob(
        &self,
        v: &str,
        h: &str,
        o: u64,
        t: u64,
        d: BlobSource,
    ) -> Result<(), ApiError> {
        self.up()?;
        self.fake.upload_blob(v, h, o, t, d).await
    }
    async fn commit_tree(&self, v: &str, t: &CommitTree) -> Result<CommittedTree, ApiError> {
        self.up()?;
        self.fake.commit_tree(v, t).await
    }
    async fn list_tree(&self, v: &str, p: &str) -> Result<Vec<VolumeEntry>, ApiError> {
        self.up()?;
        self.fake.list_tree(v, p).await
    }
    async fn read_file(&self, v: &str, p: &str, s: ByteSink<'_>) -> Result<u64, ApiError> {
        self.up()?;
        self.fake.read_file(v, p, s).await
    }
    async fn create_run(&self, k: &str, r: &CreateRun) -> Result<Run, ApiError> {
        self.up()?;
        self.fake.create_run(k, r).await
    }
    async fn get_run(&self, r: &str) -> Result<Run, ApiError> {
        self.up()?;
        Ok(self.shown(self.fake.get_run(r).await?))
    }
    async fn list_runs(&self, q: &ListRuns) -> Result<RunList, ApiError> {
        self.up()?;
        self.fake.list_runs(q).await
    }
    async fn stop_run(&self, r: &str) -> Result<Run, ApiError> {
        self.up()?;
        self.fake.stop_run(r).await
    }
    async fn log(&self, r: &str, o: u64, f: bool) -> Result<Box<dyn LogStream>, ApiError> {
        // Armed before the look, so going down between the two is not missed.
        let went_down = self.went_down.notified();
        tokio::pin!(went_down);
        went_down.as_mut().enable();
        self.up()?;
        tokio::select! {
            opened = self.fake.log(r, o, f) => opened,
            () = went_down => self.up().map(|()| unreachable!("it went down")),
        }
    }
    async fn node_log(
        &self,
        r: &str,
        n: u32,
        o: u64,
        f: bool,
    ) -> Result<Box<dyn LogStream>, ApiError> {
        self.up()?;
        self.fake.node_log(r, n, o, f).await
    }
    async fn result(&self, r: &str) -> Result<RunResult, ApiError> {
        self.up()?;
        self.fake.result(r).await
    }
    async fn telemetry(&self, r: &str, a: u64) -> Result<Telemetry, ApiError> {
        self.up()?;
        self.fake.telemetry(r, a).await
    }
    async fn set_secret(&self, n: &str, v: &str) -> Result<SecretInfo, ApiError> {
        self.up()?;
        self.fake.set_secret(n, v).await
    }
    async fn list_secrets(&self) -> Result<Vec<SecretInfo>, ApiError> {
        self.up()?;
        self.fake.list_secrets().await
    }
    async fn delete_secret(&self, n: &str) -> Result<(), ApiError> {
        self.up()?;
        self.fake.delete_secret(n).await
    }
}

/// `t` as the API writes it (`2026-11-14T22:13:20Z`).
fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `div logs --follow` of `run` on `cp`, on a task of its own; each event goes to the channel
/// as it comes, then the outcome.
fn follow(
    cp: Arc<Away>,
    run: &str,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<Event>,
    tokio::task::JoinHandle<Result<Run, RunError>>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let options = LogsOptions {
        run: run.into(),
        follow: true,
        node: None,
    };
    let task = tokio::spawn(async move {
        let mut sink = move |e: Event| drop(tx.send(e));
        div_core::logs(&*cp, &options, &mut sink).await
    });
    (rx, task)
}

/// Takes events until one is `Log(want)`; returns the others.
async fn until_log(events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>, want: &[u8]) {
    loop {
        match events.recv().await.expect("the follower goes on") {
            Event::Log(bytes) if bytes.as_ref() == want => return,
            Event::Log(_) => {}
            other => panic!("before `{}`: {other:?}", String::from_utf8_lossy(want)),
        }
    }
}

/// The control plane goes away for three hours (of tokio's paused clock) while a run started an
/// hour ago goes on, then comes back: the follower said once that it waits, and for how long
/// at most (what is left of the run's day, its grace and the margin), said it is back, and
/// handed on the rest of the log, each byte once, and the run's end. The log stream's own
/// budget is 30 seconds.
#[tokio::test(start_paused = true)]
async fn a_follower_waits_hours_for_a_control_plane_that_went_away_and_goes_on() {
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let cp = Arc::new(Away::new(
        FakeControlPlane::new(),
        Some(rfc3339(an_hour_ago)),
    ));
    let id = placed(&cp.fake, "run-a").await;
    cp.fake.append_log(&id, b"one\n").expect("exists");
    let (mut events, following) = follow(Arc::clone(&cp), "run-a");
    until_log(&mut events, b"one\n").await;

    cp.go_down();
    let Some(Event::ControlPlaneAway {
        run,
        cause,
        at_most,
    }) = events.recv().await
    else {
        panic!("the follower says it waits");
    };
    assert_eq!(run, "run-a");
    assert_eq!(
        cause,
        "could not reach the control plane at `fake` after 9 tries over 30s"
    );
    let day_grace_margin = Duration::from_secs(86_400 - 3600 + 600 + 300);
    assert!(
        at_most <= day_grace_margin && at_most > day_grace_margin - Duration::from_secs(600),
        "{at_most:?}"
    );
    tokio::time::sleep(Duration::from_secs(3 * 3600)).await;
    assert!(!following.is_finished(), "it waits on");
    // The run went on meanwhile, and ended.
    cp.fake.finish_run(&id, b"one\ntwo\n", 3).expect("exists");
    cp.come_back();

    let mut rest = Vec::new();
    while let Some(event) = events.recv().await {
        rest.push(event);
    }
    let run = following
        .await
        .expect("no panic")
        .expect("followed to the end");
    assert_eq!(run.exit_code, Some(3));
    let rest = Events(rest);
    assert_eq!(rest.log(), b"two\n", "the rest, each byte once");
    let back: Vec<Duration> = rest
        .0
        .iter()
        .filter_map(|e| match e {
            Event::ControlPlaneBack { after, .. } => Some(*after),
            _ => None,
        })
        .collect();
    assert!(
        matches!(back[..], [after] if after >= Duration::from_secs(3 * 3600)),
        "said once that it is back: {back:?}"
    );
    assert!(
        !rest
            .0
            .iter()
            .any(|e| matches!(e, Event::ControlPlaneAway { .. })),
        "said once that it waits: {:?}",
        rest.0
    );
}

/// A run whose day ends in a minute (no grace of its own: the most a control plane gives, 10
/// minutes) may go on 16 minutes more, margin included: a follower whose control plane goes
/// away waits that long for it, then gives up with an error that says so (`Unreachable`:
/// `div` exits 201).
#[tokio::test(start_paused = true)]
async fn past_the_runs_latest_end_a_follower_gives_up() {
    let started = SystemTime::now() - Duration::from_secs(86_400 - 60);
    let cp = Arc::new(Away::new(FakeControlPlane::new(), Some(rfc3339(started))));
    let id = placed(&cp.fake, "run-b").await;
    cp.fake.append_log(&id, b"one\n").expect("exists");
    let (mut events, following) = follow(Arc::clone(&cp), "run-b");
    until_log(&mut events, b"one\n").await;

    cp.go_down();
    let Some(Event::ControlPlaneAway { at_most, .. }) = events.recv().await else {
        panic!("the follower says it waits");
    };
    // (The start is in whole seconds: a second may pass between the two looks at the clock.)
    let sixteen = Duration::from_secs(60 + 600 + 300);
    assert!(
        at_most == sixteen || at_most == sixteen - Duration::from_secs(1),
        "{at_most:?}"
    );
    let err = following.await.expect("no panic").expect_err("it gave up");
    assert_eq!(err.kind(), FailureKind::Unreachable);
    assert_eq!(
        err.to_string(),
        format!(
            "the control plane has not answered in {}, and run-b cannot still be going",
            div_spec::format_duration(at_most.as_secs())
        )
    );
    assert_eq!(
        err.hint().as_deref(),
        Some("once the control plane answers again, `div logs run-b` shows how the run ended")
    );
}

/// A run that started long ago (the fake's runs start on 2025-01-01) cannot still be going: a
/// follower whose control plane goes away gives up at once, saying so, without a wait.
#[tokio::test(start_paused = true)]
async fn a_follower_does_not_wait_for_a_run_that_cannot_still_be_going() {
    let cp = Arc::new(Away::new(FakeControlPlane::new(), None));
    let id = placed(&cp.fake, "run-c").await;
    cp.fake.append_log(&id, b"one\n").expect("exists");
    let (mut events, following) = follow(Arc::clone(&cp), "run-c");
    until_log(&mut events, b"one\n").await;

    cp.go_down();
    let err = following.await.expect("no panic").expect_err("it gave up");
    assert_eq!(
        err.to_string(),
        "the control plane does not answer, and run-c cannot still be going"
    );
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(event, Event::ControlPlaneAway { .. }),
            "no wait to say"
        );
    }
}
