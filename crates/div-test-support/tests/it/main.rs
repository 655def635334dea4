//! The suite tests itself: the fake passes it, and a control plane that breaks a promise
//! fails the matching check.

use async_trait::async_trait;
use div_api::*;
use div_test_support::{
    ConformanceContext, FakeControlPlane, FakeStages, conformance, filter_snapshot,
};

#[tokio::test]
async fn the_fake_passes_the_suite() {
    let report = conformance(&FakeControlPlane::new(), &ConformanceContext::default()).await;
    report.assert_passed();
    assert_eq!(report.passed.len(), 20);
}

/// The fake, but creating a run twice for one key.
struct ForgetsKeys(FakeControlPlane);

#[async_trait]
impl ControlPlane for ForgetsKeys {
    async fn catalogue(&self) -> Result<Catalogue, ApiError> {
        self.0.catalogue().await
    }
    async fn list_volumes(&self) -> Result<Vec<Volume>, ApiError> {
        self.0.list_volumes().await
    }
    async fn create_volume(&self, n: &str) -> Result<Volume, ApiError> {
        self.0.create_volume(n).await
    }
    async fn delete_volume(&self, n: &str) -> Result<(), ApiError> {
        self.0.delete_volume(n).await
    }
    async fn missing_blobs(&self, v: &str, h: &[String]) -> Result<MissingBlobs, ApiError> {
        self.0.missing_blobs(v, h).await
    }
    async fn upload_blob(
        &self,
        v: &str,
        h: &str,
        o: u64,
        t: u64,
        d: BlobSource,
    ) -> Result<(), ApiError> {
        self.0.upload_blob(v, h, o, t, d).await
    }
    async fn commit_tree(&self, v: &str, t: &CommitTree) -> Result<CommittedTree, ApiError> {
        self.0.commit_tree(v, t).await
    }
    async fn list_tree(&self, v: &str, p: &str) -> Result<Vec<VolumeEntry>, ApiError> {
        self.0.list_tree(v, p).await
    }
    async fn read_file(&self, v: &str, p: &str, s: ByteSink<'_>) -> Result<u64, ApiError> {
        self.0.read_file(v, p, s).await
    }
    async fn validate_run(&self, r: &CreateRun) -> Result<(), ApiError> {
        self.0.validate_run(r).await
    }
    async fn create_run(&self, k: &str, r: &CreateRun) -> Result<Run, ApiError> {
        let fresh = format!(
            "{k}-{}",
            self.0.list_runs(&ListRuns::default()).await?.runs.len()
        );
        self.0.create_run(&fresh, r).await
    }
    async fn get_run(&self, r: &str) -> Result<Run, ApiError> {
        self.0.get_run(r).await
    }
    async fn list_runs(&self, q: &ListRuns) -> Result<RunList, ApiError> {
        self.0.list_runs(q).await
    }
    async fn stop_run(&self, r: &str) -> Result<Run, ApiError> {
        self.0.stop_run(r).await
    }
    async fn log(&self, r: &str, o: u64, f: bool) -> Result<Box<dyn LogStream>, ApiError> {
        self.0.log(r, o, f).await
    }
    async fn node_log(
        &self,
        r: &str,
        n: u32,
        o: u64,
        f: bool,
    ) -> Result<Box<dyn LogStream>, ApiError> {
        self.0.node_log(r, n, o, f).await
    }
    async fn result(&self, r: &str) -> Result<RunResult, ApiError> {
        self.0.result(r).await
    }
    async fn telemetry(&self, r: &str, a: u64) -> Result<Telemetry, ApiError> {
        self.0.telemetry(r, a).await
    }
    async fn set_secret(&self, n: &str, v: &str) -> Result<SecretInfo, ApiError> {
        self.0.set_secret(n, v).await
    }
    async fn list_secrets(&self) -> Result<Vec<SecretInfo>, ApiError> {
        self.0.list_secrets().await
    }
    async fn delete_secret(&self, n: &str) -> Result<(), ApiError> {
        self.0.delete_secret(n).await
    }
    async fn list_models(&self) -> Result<ModelList, ApiError> {
        self.0.list_models().await
    }
    async fn get_model(&self, n: &str) -> Result<Model, ApiError> {
        self.0.get_model(n).await
    }
    async fn push_model(&self, n: &str, p: &PushModel) -> Result<ModelVersion, ApiError> {
        self.0.push_model(n, p).await
    }
    async fn delete_model(&self, n: &str, v: Option<u32>) -> Result<(), ApiError> {
        self.0.delete_model(n, v).await
    }
    async fn list_evaluations(&self, m: Option<&str>) -> Result<EvaluationList, ApiError> {
        self.0.list_evaluations(m).await
    }
    async fn get_evaluation(&self, id: &str) -> Result<Evaluation, ApiError> {
        self.0.get_evaluation(id).await
    }
}

/// Routes the fake answers as a control plane without them (the trait's defaults), or that are
/// no operation of the trait; every other route of the table is counted by the operation
/// that answers it.
const NOT_COUNTED: &[Route] = &[
    Route::Health,
    Route::OpenDashboard,
    Route::PullImage,
    Route::TreeHeld,
    // A team's (docs/team.md): the fake has no members (`ControlPlane::team` is `None`).
    Route::WhoAmI,
    Route::ListMembers,
    Route::CreateMember,
    Route::RevokeMember,
    Route::SetMemberLimit,
    Route::SetMemberSlurmAccount,
    Route::SetOrgLimit,
    Route::Audit,
];

/// The fake answers the route table: each operation counts its route, so a route the table
/// gains is missed here until the fake answers it (or says it answers it as a control plane
/// without it).
#[tokio::test]
async fn the_fake_counts_every_route_of_the_table() {
    let fake = FakeControlPlane::new().with_stages(FakeStages::Kept);
    conformance(&fake, &ConformanceContext::default())
        .await
        .assert_passed();
    // What the suite does not ask.
    let cp: &dyn ControlPlane = &fake;
    let _ = cp.list_images().await;
    let _ = cp.prune_images(&PruneImages::default()).await;
    let _ = cp.pull_image("busybox", &|_| {}).await;
    let _ = cp.tree_held("conf-code", "code/x", "d").await;
    let tree = CommitTree {
        path: "code/staged".into(),
        entries: Vec::new(),
    };
    cp.create_volume("staged").await.expect("a volume");
    if let Some(stage) = cp.stage_tree("staged", &tree).await.expect("staged") {
        cp.upload_staged_pack("staged", &stage.id, &[])
            .await
            .expect("a pack");
        cp.commit_stage("staged", &stage.id)
            .await
            .expect("committed");
    }
    let runs = cp.list_runs(&ListRuns::default()).await.expect("runs");
    let run = &runs.runs[0].id;
    let _ = cp.node_log(run, 0, 0, false).await;
    let _ = cp.telemetry(run, 0).await;
    let _ = cp.result(run).await;
    for &route in Route::ALL {
        let counted = fake.calls(route) > 0;
        let expected = !NOT_COUNTED.contains(&route);
        assert_eq!(
            counted,
            expected,
            "{route:?} ({} {}) was {}counted",
            route.method(),
            route.template(),
            if counted { "" } else { "not " }
        );
    }
}

/// The fake's image cache: a prune removes the images no queued or running run uses, and
/// keeps the others.
#[tokio::test]
async fn the_fakes_prune_keeps_the_images_of_runs_going() {
    let fake = FakeControlPlane::new();
    fake.add_image("busybox", 10, 20);
    fake.add_image("python:3.12", 30, 40);
    let mut run = div_test_support::quick_run(&ConformanceContext::default(), None);
    run.image = Some("busybox".into());
    fake.create_run("k", &run).await.expect("placed");
    let pruned = fake
        .prune_images(&PruneImages::default())
        .await
        .expect("pruned");
    assert_eq!((pruned.images.len(), pruned.kept, pruned.bytes), (1, 1, 40));
    let cache = fake.list_images().await.expect("listed");
    let left: Vec<&[String]> = cache.images.iter().map(|i| &i.references[..]).collect();
    assert_eq!(left, [["busybox".to_owned()]]);
    assert_eq!(cache.disk.total(), 30);
}

#[tokio::test]
async fn a_control_plane_that_forgets_keys_fails_the_suite() {
    let cp = ForgetsKeys(FakeControlPlane::new());
    let report = conformance(&cp, &ConformanceContext::default()).await;
    let failed: Vec<&str> = report.failed.iter().map(|(name, _)| *name).collect();
    assert_eq!(failed, ["create_run_idempotent"]);
    assert!(
        report.failed[0]
            .1
            .starts_with("the same key placed two runs"),
        "{}",
        report.failed[0].1
    );
}

/// The OpenAPI document's patterns and lengths for names (`ProjectName`, `RunName`,
/// `VolumeName`) say exactly div-spec's rules, which the server and the fake refuse by: tried
/// on every string of up to four characters of an alphabet that reaches each rule's edges, and
/// on long ones.
#[test]
fn the_documents_name_patterns_are_div_specs_rules() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/api/openapi.yaml"
    ))
    .expect("the OpenAPI document");
    let schema = |name: &str| -> (regex::Regex, usize) {
        let at = doc
            .find(&format!("\n    {name}:\n      type: string\n"))
            .unwrap_or_else(|| panic!("no string schema `{name}`"));
        let block = &doc[at..];
        let field = |key: &str| -> &str {
            let from = block.find(&format!("\n      {key}: ")).expect(key) + key.len() + 9;
            block[from..].lines().next().expect("a value")
        };
        let pattern = field("pattern").trim_matches('"').replace("\\\\", "\\");
        let max: usize = field("maxLength").parse().expect("a length");
        assert_eq!(field("minLength"), "1", "{name}");
        (regex::Regex::new(&pattern).expect("a pattern"), max)
    };
    type Rule = fn(&str) -> bool;
    let rules: [(&str, Rule); 3] = [
        ("ProjectName", |s| div_spec::check_project_name(s).is_ok()),
        ("RunName", |s| div_spec::check_run_name(s).is_ok()),
        ("VolumeName", |s| s.parse::<div_spec::VolumeName>().is_ok()),
    ];
    let alphabet = ['a', 'r', '0', '-', '_', '.', 'A', '/', '<'];
    let mut tried: Vec<String> = vec![String::new()];
    for _ in 0..4 {
        let longer: Vec<String> = tried
            .iter()
            .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
            .collect();
        tried.extend(longer);
    }
    tried.sort();
    tried.dedup();
    for n in [62, 63, 64, 300] {
        tried.push("a".repeat(n));
        tried.push(format!("{}-b", "a".repeat(n - 2)));
    }
    for (name, rule) in rules {
        let (pattern, max) = schema(name);
        for s in &tried {
            let documented = !s.is_empty() && s.len() <= max && pattern.is_match(s);
            assert_eq!(documented, rule(s), "{name}: `{s}`");
        }
    }
}

#[test]
fn snapshot_filter() {
    fn check(input: &str, expect: &str) {
        assert_eq!(filter_snapshot(input), expect);
    }
    check(
        "at `http://127.0.0.1:41234` after 3 tries",
        "at `http://127.0.0.1:[PORT]` after 3 tries",
    );
    check("over 1.5s: x", "over [DURATION]: x");
    check("within 30s (1 try)", "within [DURATION] (1 try)");
    check("took 250ms", "took [DURATION]");
    check("wrote `/tmp/.tmpAbC123/train.py`", "wrote `[TEMP]`");
    check("run-k4t9 exited 3", "run-k4t9 exited 3");
}

/// A wait asks again until the check says yes, and past its patience says what it waited for
/// and what the check saw last.
#[test]
fn a_wait_asks_until_yes_and_says_what_it_saw_last() {
    use std::time::Duration;
    let mut asked = 0;
    let found = div_test_support::poll_until(Duration::from_secs(60), || {
        asked += 1;
        if asked == 3 { Ok(asked) } else { Err(asked) }
    });
    assert_eq!(found, Ok(3));
    let never = div_test_support::poll_until(Duration::ZERO, || Err::<(), _>("not yet"));
    assert_eq!(never, Err("not yet"));
    let panic = std::panic::catch_unwind(|| {
        div_test_support::wait_until("the moon", Duration::ZERO, || Err::<(), _>("cheese"))
    })
    .expect_err("it gives up");
    assert_eq!(
        panic.downcast_ref::<String>().map(String::as_str),
        Some("the moon: not within 0ns; last seen: cheese")
    );
}
