//! Two versions pushed and evaluated: references, the five variables and their precedence,
//! the model read-only, the evaluations kept and their gate.

use super::{documented_digest, model_folder, project, push, runs};
use crate::support::text;

/// The digest `div models push` prints is the one `docs/eval.md`'s shell recipe computes from
/// the folder (a nested file and an executable one in it; a link is left out of a push from
/// this machine, with a warning, as `div storage put` leaves it); pushing the same folder
/// again makes no version, and a changed mode makes another.
#[test]
fn the_documented_recipe_gives_the_pushed_digest() {
    use std::os::unix::fs::PermissionsExt as _;
    let local = project();
    let dir = local.tmp.path().join("ckpt");
    model_folder(&dir, "weights-v1");
    let link = dir.join("config.json");
    std::os::unix::fs::symlink("sub/config.json", &link).expect("symlink");
    let out = local.div(&["models", "push", "resnet", &dir.to_string_lossy()]);
    let (v1, digest) = super::version_line(&out);
    assert!(
        text(&out.stderr).contains("warning: `config.json` is a link, and was left out"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_file(&link).expect("rm the link");
    assert_eq!(
        (v1.as_str(), digest.clone()),
        ("v1", documented_digest(&dir))
    );

    let again = local.div(&["models", "push", "resnet", &dir.to_string_lossy()]);
    assert_eq!(
        super::version_line(&again),
        ("v1".to_owned(), digest.clone())
    );
    assert!(
        text(&again.stderr).contains("unchanged: v1 of resnet already is this tree"),
        "{}",
        text(&again.stderr)
    );

    std::fs::set_permissions(dir.join("load.sh"), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let (v2, other) = push(&local, "resnet", &dir);
    assert_eq!(
        (v2.as_str(), other.clone()),
        ("v2", documented_digest(&dir))
    );
    assert_ne!(other, digest, "a mode changed, the digest did not");
}

/// Two versions, each evaluated; `NAME`, `NAME:vN`, `NAME@sha256:…` and `div run --model`;
/// the variables win over `--env`; the model cannot be written; the evaluations are kept,
/// newest first, with their verdicts; `div evals --check` answers 0 or 210; an unknown
/// version places nothing; the run's own exit code comes back.
#[test]
fn two_versions_evaluated_and_kept() {
    let local = project();
    let (one, two) = (local.tmp.path().join("v1"), local.tmp.path().join("v2"));
    model_folder(&one, "weights-v1");
    model_folder(&two, "weights-v2");
    let (_, d1) = push(&local, "mask-rcnn", &one);
    let (v2, d2) = push(&local, "mask-rcnn", &two);
    assert_eq!(v2, "v2");

    let check = ["--check", "metrics.accuracy>=0.8"];
    let eval = |model: &str, extra: &[&str]| {
        let mut args = vec!["eval", model, "--gpu", "cpu", "eval.py"];
        args.extend_from_slice(&check);
        args.extend_from_slice(extra);
        local.div(&args)
    };
    // v1, by number, with an --env that must lose to the eval's own variables.
    let out = eval("mask-rcnn:v1", &["--env", "DIVERGENT_MODEL=x"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for line in [
        "DIVERGENT_MODEL=mask-rcnn\n".to_owned(),
        "DIVERGENT_MODEL_VERSION_ID=v1\n".to_owned(),
        format!("DIVERGENT_MODEL_DIGEST={d1}\n"),
        "DIVERGENT_MODEL_PATH=/mnt/div-models/code/mask-rcnn/".to_owned(),
        "DIVERGENT_EVALUATION=ev_".to_owned(),
        "weights weights-v1\n".to_owned(),
        "write: Read-only file system\n".to_owned(),
        "check failed: metrics.accuracy >= 0.8 (found 0.72)\n".to_owned(),
    ] {
        assert!(stdout.contains(&line), "`{line}` in:\n{stdout}");
    }
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.ends_with(" · missed 1 of 1 check"), "{stderr}");

    // The latest, by name alone: v2, which passes.
    let out = eval("mask-rcnn", &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains("DIVERGENT_MODEL_VERSION_ID=v2\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("DIVERGENT_MODEL_DIGEST={d2}\n")),
        "{stdout}"
    );
    assert!(stdout.contains("check passed: metrics.accuracy >= 0.8 (found 0.91)\n"));

    // v1 by its digest, failing with its own code: div eval exits with it.
    let out = eval(&format!("mask-rcnn@{d1}"), &["--env", "EXIT_WITH=3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("weights weights-v1\n"));

    // `div run --model` is the same thing.
    let out = local.div(&["run", "--model", "mask-rcnn:v2", "--gpu", "cpu", "eval.py"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("weights weights-v2\n"));

    // Unknown references place nothing, and say what there is.
    let before = runs(&local).len();
    for (model, says) in [
        (
            "mask-rcnn:v9",
            "`mask-rcnn` has no version 9; its versions are v1, v2",
        ),
        ("nope", "no model `nope`; the models are mask-rcnn"),
        (
            &format!("mask-rcnn@sha256:{}", "0".repeat(64)),
            "no version of `mask-rcnn` has the digest",
        ),
    ] {
        let out = eval(model, &[]);
        assert_eq!(
            out.status.code(),
            Some(200),
            "{model}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(says),
            "{model}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(runs(&local).len(), before, "a refused eval run was placed");

    evaluations_kept(&local, &d1, &d2);
}

/// What `div evals` says after `two_versions_evaluated_and_kept`'s four eval runs.
fn evaluations_kept(local: &crate::support::Local, d1: &str, d2: &str) {
    let out = local.div(&["evals", "mask-rcnn"]);
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let said: Vec<(&str, &str, String)> = rows
        .iter()
        .map(|r| {
            let checks: Vec<&str> = r[4..r.len() - 1]
                .iter()
                .copied()
                .filter(|w| !w.contains('='))
                .collect();
            (r[1], r[3], checks.join(" "))
        })
        .collect();
    assert_eq!(
        said,
        [
            ("mask-rcnn:v2", "succeeded", "no checks".to_owned()),
            ("mask-rcnn:v1", "failed", "missed 1 of 1 check".to_owned()),
            (
                "mask-rcnn:v2",
                "succeeded",
                "passed 1 of 1 check".to_owned()
            ),
            (
                "mask-rcnn:v1",
                "succeeded",
                "missed 1 of 1 check".to_owned()
            ),
        ],
        "{table}"
    );
    assert!(table.starts_with("EVALUATION "), "{table}");

    let out = local.div(&["evals", "mask-rcnn:v1", "--json"]);
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(records.len(), 2, "{}", text(&out.stdout));
    let failed = &records[0];
    assert_eq!(failed["digest"], d1);
    assert_eq!(failed["exit_code"], 3);
    assert_eq!(failed["metrics"]["accuracy"], 0.72);
    assert_eq!(failed["checks"][0], "metrics.accuracy >= 0.8");
    assert_eq!(failed["verdicts"][0]["outcome"], "failed");
    assert_eq!(failed["verdicts"][0]["found"], 0.72);
    assert!(
        failed["code"]["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("code/"))
    );
    assert!(failed["image"].as_str().is_some_and(|i| !i.is_empty()));
    assert!(failed["spent_cents"].is_i64() && failed["created_at"].is_string());
    assert!(failed["ended_at"].is_string());

    // The gate: the latest evaluation of each, judged.
    let gate = |model: &str, check: &str| local.div(&["evals", model, "--check", check]);
    let out = gate("mask-rcnn", "metrics.accuracy>=0.9");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "check passed: metrics.accuracy >= 0.9 (found 0.91)\n"
    );
    let out = gate("mask-rcnn:v1", "metrics.accuracy>=0.8");
    assert_eq!(out.status.code(), Some(210), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "check failed: metrics.accuracy >= 0.8 (found 0.72)\n"
    );
    let out = gate("mask-rcnn", "metrics.f1>=0.5");
    assert_eq!(out.status.code(), Some(210), "an absent metric is no pass");

    let out = local.div(&["models", "show", "mask-rcnn"]);
    let show = text(&out.stdout);
    assert!(show.contains(d1) && show.contains(d2), "{show}");
}

/// What is not a model's version is refused before anything is made, saying what was wrong.
#[test]
fn bad_input_is_refused_before_anything_is_made() {
    let local = project();
    let empty = local.tmp.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let missing = local.tmp.path().join("missing");
    let (empty, missing) = (empty.to_string_lossy(), missing.to_string_lossy());
    let cases: &[(&[&str], &str)] = &[
        (
            &["models", "push", "bad", "/dev/null"],
            "`/dev/null` is a device; a model's version is a folder or a file",
        ),
        (&["models", "push", "bad", &missing], "could not read"),
        (&["models", "push", "bad", &empty], "holds no file to push"),
        (
            &["models", "push", "Bad_Name", &empty],
            "`Bad_Name` is not a model's name",
        ),
        (
            &["models", "push", "bad", "--from", "nosuchvol/x"],
            "no volume `nosuchvol`",
        ),
        (
            &["models", "rm", "bad"],
            "no model `bad`; there are no models yet",
        ),
        (&["models", "show", "bad"], "no model `bad`"),
        (&["evals", "bad"], "no model `bad`"),
        (
            &["evals", "--check", "metrics.a>=1"],
            "there is no evaluation to judge",
        ),
    ];
    for (args, says) in cases {
        let out = local.div(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(200), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let out = local.div(&["models", "ls", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        list["models"],
        serde_json::json!([]),
        "a refused push made a model"
    );
}
