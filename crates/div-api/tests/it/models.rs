//! Fully populated examples of every model, and the promise that unknown fields survive.

use div_api::*;
use serde_json::{Value, json};

pub(crate) mod examples {
    use super::*;
    use div_test_support::mock::sample_run;

    pub(crate) fn health() -> Health {
        serde_json::from_value(json!({"ok": true, "version": "0.1.0"})).expect("a health")
    }
    pub(crate) fn catalogue() -> Catalogue {
        let mut c = div_test_support::sample_catalogue();
        for sku in &mut c.skus {
            sku.capacity = Some(8);
            sku.emulated = true;
        }
        // Sent by a control plane with an org usage limit.
        c.extra.insert(
            "org_usage".into(),
            json!({"limit_cents": 50000, "spent_cents": 310, "month": "2026-11", "reached": false}),
        );
        c
    }
    pub(crate) fn volume() -> Volume {
        Volume {
            name: "data".into(),
            created_at: "2025-01-01T00:00:00Z".into(),
            size_bytes: 3,
            extra: Extra::new(),
        }
    }
    pub(crate) fn missing_blobs() -> MissingBlobs {
        MissingBlobs {
            missing: vec!["ab".into()],
            partial: [("ab".to_owned(), 3)].into(),
            extra: Extra::new(),
        }
    }
    pub(crate) fn commit_tree() -> CommitTree {
        CommitTree {
            path: "code/9f31c2ab".into(),
            entries: vec![TreeEntry {
                path: "a".into(),
                kind: EntryKind::Symlink,
                executable: true,
                size: 1,
                hash: Some("ab".into()),
                target: Some("b".into()),
            }],
        }
    }
    pub(crate) fn committed_tree() -> CommittedTree {
        CommittedTree {
            volume: "v".into(),
            path: "code/x".into(),
            files: 1,
            bytes: 2,
            digest: Some("af13".into()),
            extra: Extra::new(),
        }
    }
    pub(crate) fn volume_entry() -> VolumeEntry {
        VolumeEntry {
            path: "code/x/a".into(),
            kind: "symlink".into(),
            size: 1,
            executable: true,
            target: Some("b".into()),
            extra: Extra::new(),
        }
    }
    pub(crate) fn verdict() -> CheckVerdict {
        CheckVerdict {
            check: "metrics.accuracy >= 0.8".into(),
            outcome: CheckOutcome::Passed,
            found: Some(json!(0.91)),
            line: "check passed: metrics.accuracy >= 0.8 (found 0.91)".into(),
            extra: Extra::new(),
        }
    }
    pub(crate) fn code() -> CodeRef {
        CodeRef {
            volume: "c".into(),
            path: "code/x".into(),
            extra: Extra::new(),
        }
    }
    pub(crate) fn create_run() -> CreateRun {
        CreateRun {
            project: "p".into(),
            name: Some("n".into()),
            entrypoint: "train.py::run".into(),
            command: "python -u train.py".into(),
            sku: "h100".into(),
            gpus: 1,
            cpu: Some(8),
            memory_gib: Some(64),
            max_spend_cents: Some(500),
            image: Some("img".into()),
            pull: Some(div_api::PullPolicy::Always),
            env: vec![EnvVar {
                key: "A".into(),
                value: "1".into(),
            }],
            checks: vec!["metrics.accuracy >= 0.8".into()],
            code: Some(code()),
            telemetry_layout: Some("[x]".into()),
            model: Some("mask-rcnn:v3".into()),
            extra: Extra::new(),
        }
    }
    pub(crate) fn run() -> Run {
        let mut r = sample_run("run-k4t9", RunStatus::Failed);
        r.env = vec![EnvVar {
            key: "A".into(),
            value: "1".into(),
        }];
        r.checks = vec!["metrics.accuracy >= 0.8".into()];
        r.verdicts = vec![verdict()];
        r.exit_code = Some(3);
        r.reason = Some("boom".into());
        r.code = Some(code());
        r.telemetry_layout = Some("[x]".into());
        r.model = Some(run_model());
        r.placed_by = Some("alice".into());
        // Sent while a run is queued and cannot start yet.
        r.extra.insert(
            "queue".into(),
            json!({"reason": "waiting for 2 cores, 1 run ahead", "ahead": 1}),
        );
        r
    }
    pub(crate) fn member() -> Member {
        Member {
            name: "alice".into(),
            role: Role::Member,
            kind: MemberKind::User,
            created_at: "2026-01-01T00:00:00Z".into(),
            last_used_at: Some("2026-01-02T00:00:00Z".into()),
            revoked_at: Some("2026-01-03T00:00:00Z".into()),
            monthly_limit_cents: Some(5000),
            slurm_account: Some("vision".into()),
            extra: Extra::new(),
        }
    }
    pub(crate) fn audit_entry() -> AuditEntry {
        AuditEntry {
            seq: 1,
            at: "2026-01-01T00:00:00Z".into(),
            member: "alice".into(),
            action: "run.place".into(),
            target: "run-k4t9".into(),
            from: "127.0.0.1".into(),
            extra: Extra::new(),
        }
    }
    pub(crate) fn run_list() -> RunList {
        RunList {
            runs: vec![run()],
            next_cursor: Some("c".into()),
            extra: Extra::new(),
        }
    }
    pub(crate) fn run_result() -> RunResult {
        RunResult {
            run: "r_1".into(),
            result: Some(json!({"metrics": {"accuracy": 0.9}})),
            problem: Some("none".into()),
            verdicts: vec![verdict()],
            extra: Extra::new(),
        }
    }
    pub(crate) fn telemetry() -> Telemetry {
        Telemetry {
            run: "r_1".into(),
            points: vec![TelemetryPoint {
                line: 1,
                point: json!({"step": 1}),
            }],
            bad_lines: vec![BadLine {
                line: 2,
                error: "not an object".into(),
            }],
            extra: Extra::new(),
        }
    }
    pub(crate) fn secret() -> SecretInfo {
        SecretInfo {
            name: "HF_TOKEN".into(),
            updated_at: "2025-01-01T00:00:00Z".into(),
            extra: Extra::new(),
        }
    }
    pub(crate) fn image_cache() -> ImageCache {
        ImageCache {
            path: "/home/me/.local/share/div/images".into(),
            images: vec![CachedImage {
                digest: format!("sha256:{}", "ab".repeat(32)),
                references: vec!["docker.io/library/busybox:latest".into()],
                compressed_bytes: 2_000_000,
                downloaded_bytes: Some(1_500_000),
                resolved: vec![div_api::ResolvedReference {
                    reference: "docker.io/library/busybox:latest".into(),
                    resolved_at: "2026-12-02T00:31:07Z".into(),
                }],
                unpacked_bytes: 4_000_000,
                extra: Extra::new(),
            }],
            disk: ImageDisk {
                blobs: 2_000_000,
                images: 4_000_000,
                tmp: 0,
            },
            extra: Extra::new(),
        }
    }
    pub(crate) fn pruned_images() -> PrunedImages {
        PrunedImages {
            images: vec![format!("sha256:{}", "ab".repeat(32))],
            blobs: 3,
            bytes: 6_000_000,
            kept: 1,
            extra: Extra::new(),
        }
    }
    pub(crate) fn run_model() -> RunModel {
        RunModel {
            name: "mask-rcnn".into(),
            version: 3,
            digest: format!("sha256:{}", "cd".repeat(32)),
            path: "/mnt/div-models/code/mask-rcnn/9f31c2ab".into(),
            evaluation: "ev_84lyqfw3d4xht5n3".into(),
            extra: Extra::new(),
        }
    }
    pub(crate) fn model_version() -> ModelVersion {
        ModelVersion {
            model: "mask-rcnn".into(),
            version: 3,
            digest: format!("sha256:{}", "cd".repeat(32)),
            volume: "div-models".into(),
            path: "code/mask-rcnn/9f31c2ab".into(),
            mount: "/mnt/div-models/code/mask-rcnn/9f31c2ab".into(),
            files: 2,
            bytes: 25,
            created_at: "2026-12-06T11:14:19.666Z".into(),
            created_by: Some("ada@example.com".into()),
            from: Some("ckpt/run-k4t9/best".into()),
            extra: Extra::new(),
        }
    }
    pub(crate) fn evaluation() -> Evaluation {
        Evaluation {
            id: "ev_84lyqfw3d4xht5n3".into(),
            model: "mask-rcnn".into(),
            version: 3,
            digest: format!("sha256:{}", "cd".repeat(32)),
            run: "r_1".into(),
            run_name: "run-k4t9".into(),
            status: RunStatus::Succeeded,
            code: Some(code()),
            image: "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime".into(),
            image_digest: Some(format!("sha256:{}", "ab".repeat(32))),
            checks: vec!["metrics.accuracy >= 0.8".into()],
            verdicts: vec![verdict()],
            metrics: Some(json!({"accuracy": 0.91})),
            exit_code: Some(0),
            spent_cents: 3,
            placed_by: Some("ada@example.com".into()),
            created_at: "2026-12-06T11:15:02.546Z".into(),
            ended_at: Some("2026-12-06T11:15:02.690Z".into()),
            extra: Extra::new(),
        }
    }
    pub(crate) fn error_body() -> ApiErrorBody {
        ApiErrorBody {
            error: ApiErrorDetail {
                code: "unknown_sku".into(),
                message: "unknown SKU `z`".into(),
                details: json!({"accepted": ["cpu"]}),
            },
        }
    }
}

/// Deserialize `value` with a few unknown fields added as `T`, serialize it back, and
/// check the unknown fields came through unchanged.
fn survives<T: serde::Serialize + serde::de::DeserializeOwned>(mut value: Value) {
    let extra = json!({"zeta": {"nested": [1, 2]}, "added_later": "yes"});
    for (k, v) in extra.as_object().expect("an object") {
        value[k] = v.clone();
    }
    let model: T = serde_json::from_value(value.clone()).expect("the model reads it");
    let back = serde_json::to_value(&model).expect("the model writes it");
    assert_eq!(back["zeta"], extra["zeta"]);
    assert_eq!(back["added_later"], extra["added_later"]);
}

#[test]
fn unknown_fields_survive_a_round_trip() {
    use examples as ex;
    let v = |x: &dyn erased::ToValue| x.to_value();
    survives::<Run>(v(&ex::run()));
    survives::<Catalogue>(v(&ex::catalogue()));
    survives::<SkuOffer>(v(&ex::catalogue().skus[0]));
    survives::<Volume>(v(&ex::volume()));
    survives::<MissingBlobs>(v(&ex::missing_blobs()));
    survives::<CommittedTree>(v(&ex::committed_tree()));
    survives::<VolumeEntry>(v(&ex::volume_entry()));
    survives::<CheckVerdict>(v(&ex::verdict()));
    survives::<CodeRef>(v(&ex::code()));
    survives::<CreateRun>(v(&ex::create_run()));
    survives::<RunList>(v(&ex::run_list()));
    survives::<RunResult>(v(&ex::run_result()));
    survives::<Telemetry>(v(&ex::telemetry()));
    survives::<SecretInfo>(v(&ex::secret()));
    survives::<Health>(v(&ex::health()));
    survives::<RunModel>(v(&ex::run_model()));
    survives::<ModelVersion>(v(&ex::model_version()));
    survives::<Evaluation>(v(&ex::evaluation()));
    survives::<PushModel>(json!({"volume": "div-models", "path": "code/m/1"}));
}

#[test]
fn unknown_fields_inside_a_run_survive() {
    let mut value = serde_json::to_value(examples::run()).expect("a run serializes");
    value["verdicts"][0]["weight"] = json!(2);
    value["code"]["commit"] = json!("abc");
    value["new_top_level"] = json!({"x": 1});
    let run: Run = serde_json::from_value(value.clone()).expect("a run reads");
    assert_eq!(serde_json::to_value(&run).expect("a run writes"), value);
}

mod erased {
    pub(crate) trait ToValue {
        fn to_value(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> ToValue for T {
        fn to_value(&self) -> serde_json::Value {
            serde_json::to_value(self).expect("the models serialize")
        }
    }
}

/// The catalogue as div-pricing sizes with it: the SKUs it knows, their prices and the limits;
/// a SKU of a newer control plane is left out, not refused.
#[test]
fn a_catalogue_reads_into_div_pricings() {
    let mut catalogue = examples::catalogue();
    let mut newer = catalogue.skus[0].clone();
    newer.name = "x900".into();
    catalogue.skus.push(newer);
    let pricing = catalogue.pricing();
    let names: Vec<String> = pricing.skus.iter().map(|s| s.sku.to_string()).collect();
    let known: Vec<String> = catalogue.skus[..catalogue.skus.len() - 1]
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(names, known);
    for (priced, offered) in pricing.skus.iter().zip(&catalogue.skus) {
        assert_eq!(
            (
                priced.cents_per_hour,
                priced.cores_per_unit,
                priced.memory_gib_per_unit
            ),
            (
                offered.cents_per_hour,
                offered.cores_per_unit,
                offered.memory_gib_per_unit
            )
        );
    }
    assert_eq!(
        (
            pricing.extra_core_cents_per_hour,
            pricing.extra_gib_cents_per_hour,
            pricing.max_cores,
            pricing.max_memory_gib,
            pricing.max_run_seconds
        ),
        (
            catalogue.extra_core_cents_per_hour,
            catalogue.extra_gib_cents_per_hour,
            catalogue.max_cores,
            catalogue.max_memory_gib,
            catalogue.max_run_seconds
        )
    );
}
