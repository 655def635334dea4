//! The models' pages: the list with each model's latest version, a model's versions with
//! their digests and sizes, its evaluations as one table with a column per check and per
//! metric (two versions side by side), and an eval run's page linking both.

use super::{origin, text_of, with_browser};
use crate::eval::{EVAL_PY, model_folder, push};
use crate::support::Local;

/// The cells of each row of the table body `id`, as text.
const ROWS_FN: &str = "function rows(id) { return [...document.getElementById(id).rows]\
    .map(r => [...r.cells].map(c => c.textContent)); }";

#[test]
fn the_models_pages_show_versions_and_evaluations_side_by_side() {
    let local = Local::new("evals", &[("eval.py", EVAL_PY)]);
    let (one, two) = (local.tmp.path().join("v1"), local.tmp.path().join("v2"));
    model_folder(&one, "weights-v1");
    model_folder(&two, "weights-v2");
    let (_, d1) = push(&local, "mask-rcnn", &one);
    let (_, d2) = push(&local, "mask-rcnn", &two);
    let checks = [
        "--check",
        "metrics.accuracy>=0.8",
        "--check",
        "metrics.loss<0.5",
    ];
    for (model, name) in [("mask-rcnn:v1", "eval-one"), ("mask-rcnn:v2", "eval-two")] {
        let mut args = vec!["eval", model, "--gpu", "cpu", "--name", name, "eval.py"];
        args.extend_from_slice(&checks);
        local.ok(&args);
    }
    let url = local.dashboard();
    let at = origin(&url);
    with_browser(|b| async move {
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
    });
}
