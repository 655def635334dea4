//! `div_core::run`: checked, shipped, placed, followed.

use std::sync::Arc;

use div_api::{ControlPlane, RunStatus};
use div_core::{Event, FailureKind, RunError, RunOptions, RunOutcome};
use div_test_support::FakeControlPlane;

use crate::{Events, dir, project};

fn options(tmp: &tempfile::TempDir) -> RunOptions {
    RunOptions::new(dir(tmp), vec!["train.py::run".into()])
}

#[tokio::test]
async fn a_run_is_shipped_placed_and_followed_to_its_end() {
    let tmp = project();
    let cp = Arc::new(FakeControlPlane::new());
    let mut options = options(&tmp);
    options.checks = vec!["metrics.accuracy>=0.8".parse().expect("a check")];
    options.max_spend = Some("5.00".parse().expect("money"));
    let (tx, mut placed) = tokio::sync::mpsc::unbounded_channel();
    let running = {
        let cp = Arc::clone(&cp);
        tokio::spawn(async move {
            let mut events = Vec::new();
            let mut sink = |e: Event| {
                if let Event::Placed { run, .. } = &e {
                    tx.send(run.id.clone()).expect("the test listens");
                }
                events.push(e);
            };
            let outcome = div_core::run(&*cp, &options, &mut sink).await;
            (outcome, events)
        })
    };
    // The run is placed and followed; it writes two pieces of log, then ends.
    let id = placed.recv().await.expect("the run was placed");
    cp.append_log(&id, b"step 0\n").expect("the run exists");
    cp.finish_run(&id, b"step 0\nstep 1\n", 0)
        .expect("the run exists");
    let (outcome, events) = running.await.expect("no panic");
    let Ok(RunOutcome::Ended(run)) = outcome else {
        panic!("the run ended: {outcome:?}");
    };
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.project, "very-cool-classifier");
    assert_eq!(run.checks, vec!["metrics.accuracy >= 0.8".to_string()]);
    assert_eq!(run.max_spend_cents, Some(500));
    let events = Events(events);
    assert_eq!(
        events.log(),
        b"step 0\nstep 1\n",
        "each byte once, in order"
    );
    let header = events
        .0
        .iter()
        .find_map(|e| match e {
            Event::Placed { header, .. } => Some(header.clone()),
            _ => None,
        })
        .expect("a header");
    assert!(header.contains("$4.95/h"), "{header}");
    // The code is in the project's code volume, where the run says it is.
    let code = run.code.expect("the run names its code");
    assert_eq!(code.volume, "very-cool-classifier-code");
    let files: Vec<String> = cp
        .list_tree(&code.volume, &code.path)
        .await
        .expect("the code is there")
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(
        files,
        vec![
            format!("{}/data/labels.csv", code.path),
            format!("{}/train.py", code.path)
        ]
    );
}

#[tokio::test]
async fn the_placed_price_is_div_pricings_for_the_size_asked() {
    let tmp = project();
    let cp = FakeControlPlane::new();
    let mut options = options(&tmp);
    // One H100 comes with 8 cores and 96 GiB; 4 more cores at 3¢ and 8 more GiB at 1¢ an hour.
    options.cpu = Some(12);
    options.memory = Some("104".parse().expect("memory"));
    options.dry_run = true;
    let Ok(RunOutcome::DryRun(dry)) = div_core::run(&cp, &options, &mut |_: Event| {}).await else {
        panic!("a dry run");
    };
    assert_eq!(dry.cents_per_hour, 495 + 4 * 3 + 8);
    options.dry_run = false;
    options.detach = true;
    let Ok(RunOutcome::Detached(run)) = div_core::run(&cp, &options, &mut |_: Event| {}).await
    else {
        panic!("a detached run");
    };
    assert_eq!(
        (run.cores, run.memory_gib, run.cents_per_hour),
        (12, 104, dry.cents_per_hour),
        "the control plane prices the run as the client quoted it"
    );
}

#[tokio::test]
async fn a_dry_run_creates_nothing() {
    let tmp = project();
    let cp = FakeControlPlane::new();
    let mut options = options(&tmp);
    options.dry_run = true;
    let outcome = div_core::run(&cp, &options, &mut |_: Event| {}).await;
    let Ok(RunOutcome::DryRun(dry)) = outcome else {
        panic!("a dry run: {outcome:?}");
    };
    assert_eq!(dry.project.slug, "very-cool-classifier");
    assert_eq!(dry.shipment.expect("code is shipped").files, 2);
    assert!(cp.list_volumes().await.expect("volumes").is_empty());
    let runs = cp.list_runs(&Default::default()).await.expect("runs");
    assert!(runs.runs.is_empty());
}

#[tokio::test]
async fn an_unknown_sku_is_refused_before_anything_is_created() {
    let tmp = project();
    let cp = FakeControlPlane::new();
    let mut options = options(&tmp);
    options.gpu = "b300".into();
    let err = div_core::run(&cp, &options, &mut |_: Event| {})
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), FailureKind::Refused, "{err}");
    assert!(cp.list_volumes().await.expect("volumes").is_empty());
}

/// What only the control plane can refuse (here, as on Slurm, a count of GPUs that is not
/// whole nodes) is refused by its validation before anything is shipped, made or placed,
/// `--dry-run` included, with the refusal `create_run` itself gives.
#[tokio::test]
async fn a_run_only_the_control_plane_refuses_is_refused_before_anything_is_shipped() {
    let tmp = project();
    let cp = FakeControlPlane::new().with_nodes_of(2);
    let refusal = "`--gpus 3`: past 2 GPUs a run takes whole nodes of 2 GPUs; ask for `--gpus 2` or `--gpus 4`";
    for dry_run in [false, true] {
        let mut options = options(&tmp);
        options.gpus = 3;
        options.dry_run = dry_run;
        let mut events = Vec::new();
        let err = div_core::run(&cp, &options, &mut |e: Event| events.push(e))
            .await
            .expect_err("refused");
        assert_eq!(err.kind(), FailureKind::Refused, "{err}");
        let RunError::Api { during, source } = &err else {
            panic!("the control plane's refusal: {err:?}");
        };
        assert_eq!((*during, source.message()), ("place the run", refusal));
        assert!(
            !events.iter().any(|e| matches!(
                e,
                Event::Shipping { .. } | Event::UploadStarted { .. } | Event::Placing
            )),
            "{events:?}"
        );
        assert!(cp.list_volumes().await.expect("volumes").is_empty());
        let runs = cp.list_runs(&Default::default()).await.expect("runs");
        assert!(runs.runs.is_empty());
    }
    // `create_run` refuses it with the same words, and what fits on a node is placed.
    let mut request =
        div_test_support::quick_run(&div_test_support::ConformanceContext::default(), None);
    (request.sku, request.gpus) = ("h100".into(), 3);
    let created = cp.create_run("k", &request).await.expect_err("refused");
    assert_eq!(created.message(), refusal);
    let mut options = options(&tmp);
    (options.gpus, options.detach) = (2, true);
    let placed = div_core::run(&cp, &options, &mut |_: Event| {}).await;
    assert!(matches!(placed, Ok(RunOutcome::Detached(_))), "{placed:?}");
}

#[tokio::test]
async fn an_entrypoint_that_is_not_shipped_is_refused() {
    let tmp = project();
    let cp = FakeControlPlane::new();
    let options = RunOptions::new(dir(&tmp), vec!["missing.py::run".into()]);
    let err = div_core::run(&cp, &options, &mut |_: Event| {})
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), FailureKind::Refused, "{err}");
    assert!(err.to_string().contains("missing.py"), "{err}");
    assert!(cp.list_volumes().await.expect("volumes").is_empty());
}

#[tokio::test]
async fn a_second_run_of_the_same_code_sends_nothing_new() {
    let tmp = project();
    let cp = FakeControlPlane::new();
    let mut options = options(&tmp);
    options.detach = true;
    let mut first = crate::Events::default();
    div_core::run(&cp, &options, &mut first.sink())
        .await
        .expect("placed");
    let mut second = crate::Events::default();
    div_core::run(&cp, &options, &mut second.sink())
        .await
        .expect("placed");
    let sent = |events: &crate::Events| {
        events.0.iter().find_map(|e| match e {
            Event::UploadStarted { bytes, .. } => Some(*bytes),
            _ => None,
        })
    };
    assert!(sent(&first).is_some_and(|b| b > 0), "{first:?}");
    assert_eq!(sent(&second).unwrap_or(0), 0, "{second:?}");
}

/// Runs the project on `cp` to its end: the files of the code it was placed with.
async fn run_and_list_code(cp: Arc<FakeControlPlane>, tmp: &tempfile::TempDir) -> Vec<String> {
    let options = options(tmp);
    let (tx, mut placed) = tokio::sync::mpsc::unbounded_channel();
    let running = {
        let cp = Arc::clone(&cp);
        tokio::spawn(async move {
            let mut sink = |e: Event| {
                if let Event::Placed { run, .. } = &e {
                    tx.send(run.id.clone()).expect("the test listens");
                }
            };
            div_core::run(&*cp, &options, &mut sink).await
        })
    };
    let id = placed.recv().await.expect("the run was placed");
    cp.finish_run(&id, b"done\n", 0).expect("the run exists");
    let outcome = running.await.expect("no panic");
    let Ok(RunOutcome::Ended(run)) = outcome else {
        panic!("the run ended: {outcome:?}");
    };
    let code = run.code.expect("the run names its code");
    cp.list_tree(&code.volume, &code.path)
        .await
        .expect("the code is there")
        .into_iter()
        .map(|e| {
            e.path
                .trim_start_matches(&format!("{}/", code.path))
                .to_owned()
        })
        .collect()
}

/// Where the control plane stages trees, the code is staged and its packs go to the stage;
/// where the stage is gone when its commit comes (the control plane restarted), the code is
/// sent the other way, whole, and the run goes on.
#[tokio::test]
async fn the_code_is_staged_where_it_can_be_and_sent_the_other_way_when_the_stage_is_lost() {
    for how in [
        div_test_support::FakeStages::Kept,
        div_test_support::FakeStages::LostAtCommit,
    ] {
        let tmp = project();
        let cp = Arc::new(FakeControlPlane::new().with_stages(how));
        let files = run_and_list_code(Arc::clone(&cp), &tmp).await;
        assert_eq!(files, ["data/labels.csv", "train.py"], "{how:?}");
        let (staged, packs) = cp.staged();
        assert_eq!(staged, 1, "{how:?}: the tree staged once");
        assert!(packs >= 1, "{how:?}: its files sent to the stage");
    }
    // A control plane without stages gets the tree the other way from the start.
    let tmp = project();
    let cp = Arc::new(FakeControlPlane::new());
    let files = run_and_list_code(Arc::clone(&cp), &tmp).await;
    assert_eq!(files, ["data/labels.csv", "train.py"]);
    assert_eq!(cp.staged(), (0, 0));
}
