//! `runs`, `secrets`, `result`, `telemetry`, the image cache.

use div_api::{ControlPlane, RunStatus};
use div_core::{RunError, RunsOptions};
use div_test_support::{ConformanceContext, FakeControlPlane, quick_run};

async fn placed(cp: &FakeControlPlane, name: &str, project: &str) -> String {
    let mut request = quick_run(&ConformanceContext::default(), Some(name.into()));
    request.project = project.into();
    cp.create_run(&format!("key-{name}"), &request)
        .await
        .expect("placed")
        .id
}

fn listing(project: Option<&str>, all: bool, limit: u32) -> RunsOptions {
    RunsOptions {
        placed_by: None,
        dir: std::env::temp_dir(),
        project: project.map(String::from),
        project_env: None,
        all,
        status: None,
        limit,
    }
}

#[tokio::test]
async fn runs_are_listed_newest_first_for_the_project_and_say_when_there_are_more() {
    let cp = FakeControlPlane::new();
    for (name, project) in [
        ("run-1", "alpha"),
        ("run-2", "beta"),
        ("run-3", "alpha"),
        ("run-4", "alpha"),
    ] {
        placed(&cp, name, project).await;
    }
    let alpha = div_core::runs(&cp, &listing(Some("alpha"), false, 2))
        .await
        .expect("listed");
    let names: Vec<&str> = alpha.runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["run-4", "run-3"]);
    assert!(alpha.more, "run-1 is left");
    let all = div_core::runs(&cp, &listing(None, true, 10))
        .await
        .expect("listed");
    assert_eq!(all.runs.len(), 4);
    assert!(!all.more);
}

#[tokio::test]
async fn secrets_are_set_listed_without_values_and_removed() {
    let cp = FakeControlPlane::new();
    div_core::secret_set(&cp, "HF_TOKEN", "hf_secret")
        .await
        .expect("set");
    let list = div_core::secret_list(&cp).await.expect("listed");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].name, "HF_TOKEN");
    let shown = serde_json::to_string(&list).expect("json");
    assert!(!shown.contains("hf_secret"), "{shown}");
    div_core::secret_remove(&cp, "HF_TOKEN")
        .await
        .expect("removed");
    let err = div_core::secret_remove(&cp, "HF_TOKEN")
        .await
        .expect_err("gone");
    assert!(
        matches!(err, RunError::SecretNotFound(ref n) if n == "HF_TOKEN"),
        "{err:?}"
    );
    let err = div_core::secret_set(&cp, "1BAD", "x")
        .await
        .expect_err("a bad name");
    assert!(matches!(err, RunError::SecretName(_)), "{err:?}");
}

#[tokio::test]
async fn telemetry_is_read_after_a_line_with_bad_lines_reported() {
    let cp = FakeControlPlane::new();
    let id = placed(&cp, "run-t", "alpha").await;
    cp.write_telemetry(
        &id,
        "{\"step\": 1, \"loss\": 0.9}\nnot json\n\n[1, 2]\n{\"step\": 2, \"loss\": 0.5}\n",
    )
    .expect("exists");
    let all = div_core::telemetry(&cp, "run-t", 0).await.expect("read");
    let lines: Vec<u64> = all.telemetry.points.iter().map(|p| p.line).collect();
    assert_eq!(lines, [1, 5]);
    let bad: Vec<(u64, &str)> = all
        .telemetry
        .bad_lines
        .iter()
        .map(|b| (b.line, b.error.as_str()))
        .collect();
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert_eq!(bad[0].0, 2);
    assert_eq!(bad[1], (4, "not a JSON object"));
    let later = div_core::telemetry(&cp, &id, 2).await.expect("read");
    let lines: Vec<u64> = later.telemetry.points.iter().map(|p| p.line).collect();
    assert_eq!(lines, [5], "only what came after line 2");
    assert_eq!(later.telemetry.bad_lines.len(), 1);
    assert_eq!(later.run.status, RunStatus::Queued);
}

#[tokio::test]
async fn a_result_that_was_never_written_judges_every_check_unknown() {
    let cp = FakeControlPlane::new();
    let id = placed(&cp, "run-r", "alpha").await;
    cp.finish_run(&id, b"", 0).expect("exists");
    let checks = vec!["metrics.accuracy>=0.8".parse().expect("a check")];
    let report = div_core::result(&cp, "run-r", &checks).await.expect("read");
    assert!(report.result.result.is_none());
    assert_eq!(report.judged.len(), 1);
    assert!(!report.all_passed());
    let runs = cp.list_runs(&Default::default()).await.expect("runs");
    assert_eq!(runs.runs.len(), 1);
}

#[tokio::test]
async fn the_image_cache_is_listed_and_pruned_through_the_control_plane() {
    let cp = FakeControlPlane::new();
    cp.add_image("busybox", 10, 20);
    let cache = div_core::image_list(&cp).await.expect("listed");
    assert_eq!(cache.images.len(), 1);
    assert_eq!(cache.images[0].references, ["busybox"]);
    let pruned = div_core::image_prune(&cp).await.expect("pruned");
    assert_eq!((pruned.images.len(), pruned.kept), (1, 0));
    assert!(
        div_core::image_list(&cp)
            .await
            .expect("listed")
            .images
            .is_empty()
    );
}

/// A control plane without an image cache (an older or a hosted one: it answers the routes
/// 404, as a wiremock server with nothing mounted does) says so, for both.
#[tokio::test]
async fn a_control_plane_without_an_image_cache_says_it_has_none() {
    let server = div_test_support::mock::mock_server().await;
    let cp = div_test_support::mock::client(&server);
    let listed = div_core::image_list(&cp).await.expect_err("no cache");
    assert!(
        matches!(listed, RunError::NoImageCache { .. }),
        "{listed:?}"
    );
    assert_eq!(
        listed.to_string(),
        "this control plane has no image cache to list"
    );
    assert_eq!(listed.kind(), div_core::FailureKind::NotFound);
    assert!(listed.hint().is_some_and(|h| h.contains("hosted")));
    let pruned = div_core::image_prune(&cp).await.expect_err("no cache");
    assert_eq!(
        pruned.to_string(),
        "this control plane has no image cache to prune"
    );
}

/// A control plane without members (the fake, like an older server) says so, and how to
/// serve a team, for every team operation.
#[tokio::test]
async fn a_control_plane_without_members_says_so() {
    let fake = div_test_support::FakeControlPlane::new();
    let err = div_core::whoami(&fake).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "this control plane has no members to say who you are"
    );
    assert!(
        err.hint().is_some_and(|h| h.contains("--listen ADDR")),
        "{:?}",
        err.hint()
    );
    let err = div_core::audit(&fake, 10).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "this control plane has no members to read the audit log of"
    );
    assert_eq!(err.kind(), div_core::FailureKind::NotFound);
}
