//! The models' pages: the list with each model's latest version, a model's versions with
//! their digests and sizes, its evaluations as one table with a column per check and per
//! metric (two versions side by side), and an eval run's page linking both.

use div_test_support::dashboard::{Browser, on_runtime, origin, text_of};
use serde_json::json;

use super::Local;

/// An evaluation: reads the model's weights and reports how they did (v2 better than v1).
const EVAL_PY: &str = r#"import json, os, pathlib, sys
p = pathlib.Path(os.environ["DIVERGENT_MODEL_PATH"])
w = (p / "weights.bin").read_text().strip()
for k in ["DIVERGENT_MODEL", "DIVERGENT_MODEL_VERSION_ID", "DIVERGENT_MODEL_PATH", "DIVERGENT_MODEL_DIGEST", "DIVERGENT_EVALUATION"]:
    print(f"{k}={os.environ[k]}")
print("weights", w)
acc = 0.91 if w == "weights-v2" else 0.72
json.dump({"metrics": {"accuracy": acc, "loss": 0.3}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
"#;

/// A model folder at `dir`: `weights.bin` holding `weights`, a nested config and an
/// executable script.
fn model_folder(dir: &std::path::Path, weights: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("weights.bin"), format!("{weights}\n")).expect("write");
    std::fs::write(dir.join("sub/config.json"), "{\"layers\": 50}\n").expect("write");
    std::fs::write(dir.join("load.sh"), "#!/bin/sh\necho load\n").expect("write");
    std::fs::set_permissions(dir.join("load.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
}

/// `name`'s next version, pushed from the folder `path` of the volume `weights` (as
/// `div models push NAME --from weights/PATH` asks): its digest.
async fn push(local: &Local, name: &str, path: &str) -> String {
    let (status, version) = local
        .server
        .request(
            "POST",
            &format!("/v1/models/{name}/versions"),
            Some(json!({"volume": "weights", "path": path})),
        )
        .await;
    assert!(matches!(status, 200 | 201), "{status} {version}");
    version["digest"].as_str().expect("a digest").to_owned()
}

/// The cells of each row of the table body `id`, as text.
const ROWS_FN: &str = "function rows(id) { return [...document.getElementById(id).rows]\
    .map(r => [...r.cells].map(c => c.textContent)); }";

#[test]
fn the_models_pages_show_versions_and_evaluations_side_by_side() {
    on_runtime(async {
        let local = Local::start("evals", &[("eval.py", EVAL_PY)]).await;
        let (status, volume) = local
            .server
            .request("POST", "/v1/volumes", Some(json!({"name": "weights"})))
            .await;
        assert_eq!(status, 201, "{volume}");
        let weights = local.server.home.join("volumes/weights");
        model_folder(&weights.join("v1"), "weights-v1");
        model_folder(&weights.join("v2"), "weights-v2");
        let d1 = push(&local, "mask-rcnn", "v1").await;
        let d2 = push(&local, "mask-rcnn", "v2").await;
        // As `div eval MODEL --gpu cpu --name NAME eval.py --check … --check …` places them.
        for (model, name) in [("mask-rcnn:v1", "eval-one"), ("mask-rcnn:v2", "eval-two")] {
            let run = local
                .place_and_wait(
                    &["eval.py"],
                    json!({"model": model, "name": name,
                       "checks": ["metrics.accuracy >= 0.8", "metrics.loss < 0.5"]}),
                )
                .await;
            assert_eq!(run["status"], "succeeded", "{run}");
        }
        let url = local.dashboard().await;
        let at = origin(&url);
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.goto(&format!("{at}/models")).await;
            b.until(
                "the model in the list",
                "return document.getElementById('model-rows').rows.length === 1",
            )
            .await;
            let rows = b.js(&format!("{ROWS_FN} return rows('model-rows');")).await;
            let rows: Vec<Vec<String>> = serde_json::from_value(rows).expect("rows");
            assert_eq!(rows[0][..3], ["mask-rcnn", "2", "v2"], "{rows:?}");
            assert!(d2.starts_with(rows[0][3].trim_end_matches('…')), "{rows:?}");
            assert_eq!(rows[0][4], "3", "{rows:?}");
            b.screenshot("models").await;

            b.goto(&format!("{at}/models/mask-rcnn")).await;
            b.until(
                "two versions and two evaluations",
                "return document.getElementById('version-rows').rows.length === 2 && \
             document.getElementById('evaluation-rows').rows.length === 2",
            )
            .await;
            let versions = b
                .js(&format!("{ROWS_FN} return rows('version-rows');"))
                .await;
            let versions: Vec<Vec<String>> = serde_json::from_value(versions).expect("rows");
            let said: Vec<(&str, &str, &str)> = versions
                .iter()
                .map(|r| (r[0].as_str(), r[1].as_str(), r[7].as_str()))
                .collect();
            assert_eq!(said, [("v1", d1.as_str(), "1"), ("v2", d2.as_str(), "1")]);
            let head = b
            .js("return [...document.getElementById('evaluation-head').cells].map(c => c.textContent)")
            .await;
            let head: Vec<String> = serde_json::from_value(head).expect("head");
            assert_eq!(
                head[..8],
                [
                    "Evaluation",
                    "Version",
                    "Run",
                    "Status",
                    "metrics.accuracy >= 0.8",
                    "metrics.loss < 0.5",
                    "accuracy",
                    "loss"
                ],
                "{head:?}"
            );
            let evaluations = b
                .js(&format!("{ROWS_FN} return rows('evaluation-rows');"))
                .await;
            let evaluations: Vec<Vec<String>> = serde_json::from_value(evaluations).expect("rows");
            let compared: Vec<&[String]> = evaluations.iter().map(|r| &r[1..8]).collect();
            assert_eq!(
                compared,
                [
                    &[
                        "v2",
                        "eval-two",
                        "succeeded",
                        "passed (0.91)",
                        "passed (0.3)",
                        "0.91",
                        "0.3"
                    ]
                    .map(String::from)[..],
                    &[
                        "v1",
                        "eval-one",
                        "succeeded",
                        "failed (0.72)",
                        "passed (0.3)",
                        "0.72",
                        "0.3"
                    ]
                    .map(String::from)[..],
                ],
                "{evaluations:?}"
            );
            b.screenshot("model").await;

            // An eval run's page links its model version and its evaluation.
            b.goto(&format!("{at}/runs/eval-one")).await;
            b.until(
                "the model the run evaluates",
                "return !document.getElementById('model-fact').hidden",
            )
            .await;
            assert_eq!(text_of(&b, "model-link").await, "mask-rcnn:v1");
            assert_eq!(text_of(&b, "model-digest").await, d1);
            let evaluation = text_of(&b, "evaluation-link").await;
            assert!(evaluation.starts_with("ev_"), "{evaluation}");
            let href = b
                .js("return document.getElementById('evaluation-link').getAttribute('href')")
                .await;
            assert_eq!(href, format!("/models/mask-rcnn#{evaluation}"));
            let replay = text_of(&b, "replay").await;
            assert!(
                replay.contains(&format!("--model mask-rcnn@{d1}")),
                "{replay}"
            );

            // Followed, the link lands on the model's page with that evaluation marked.
            b.goto(&format!("{at}/models/mask-rcnn#{evaluation}")).await;
            b.until(
                "the evaluation marked",
                &format!(
                    "const r = document.getElementById('{evaluation}'); \
                 return !!r && r.classList.contains('target')"
                ),
            )
            .await;
        }
    });
}
