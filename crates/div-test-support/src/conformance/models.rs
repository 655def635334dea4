//! Models and evaluations: a committed tree pushed as a version whose digest anyone can
//! compute, the same tree pushed again making no version, an eval run pinned to a version and
//! making an evaluation, unknown versions refused before anything is placed, and versions
//! removed once no run of them is going.

use bytes::Bytes;
use div_api::{CommitTree, ControlPlane, ErrorKind, PushModel, RunStatus};
use div_spec::{DigestMode, ModelDigest, sha256_hex};

use super::check::{
    CheckFailure, CheckResult, api, ensure, expect_error, file_entry, upload_whole,
};
use super::context::{ConformanceContext, key, quick_run};

/// Two files (one executable) committed at `path` of `volume`, and the digest a reader
/// computes for them by `docs/eval.md`'s recipe.
async fn commit_model_tree(
    cp: &dyn ControlPlane,
    volume: &str,
    path: &str,
    weights: &[u8],
) -> Result<String, CheckFailure> {
    let weights = Bytes::copy_from_slice(weights);
    let script = Bytes::from_static(b"#!/bin/sh\necho load\n");
    upload_whole(cp, volume, &[&weights, &script]).await?;
    let tree = CommitTree {
        path: path.to_owned(),
        entries: vec![
            file_entry("weights.bin", &weights, false),
            file_entry("bin/load.sh", &script, true),
        ],
    };
    cp.commit_tree(volume, &tree)
        .await
        .map_err(api("commit_tree"))?;
    let mut digest = ModelDigest::new();
    digest.add(b"weights.bin", DigestMode::File, &sha256_hex(&weights));
    digest.add(b"bin/load.sh", DigestMode::Executable, &sha256_hex(&script));
    Ok(digest.finish())
}

pub(crate) async fn models_pinned_and_evaluated(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let volume = format!("{}-models-src", ctx.prefix);
    let name = format!("{}-model", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let mut digests = Vec::new();
    for (n, weights) in ["one", "two"].iter().enumerate() {
        let path = format!("m/{n}");
        let bytes = format!("weights {weights} {}", key(ctx, "w"));
        digests.push(commit_model_tree(cp, &volume, &path, bytes.as_bytes()).await?);
        let push = PushModel {
            volume: volume.clone(),
            path,
            extra: Default::default(),
        };
        let made = cp
            .push_model(&name, &push)
            .await
            .map_err(api("push_model"))?;
        let again = cp
            .push_model(&name, &push)
            .await
            .map_err(api("push_model again"))?;
        ensure!(
            (made.version, made.digest.as_str()) == (n as u32 + 1, digests[n].as_str()),
            "push {}: v{} {}, expected v{} {}",
            n + 1,
            made.version,
            made.digest,
            n + 1,
            digests[n]
        );
        ensure!(
            again.version == made.version
                && (made.files, made.bytes) == (2, bytes.len() as u64 + 20),
            "the same tree again made v{} (of v{}), or the sizes are off: {made:?}",
            again.version,
            made.version
        );
    }
    let model = cp.get_model(&name).await.map_err(api("get_model"))?;
    let versions: Vec<u32> = model.versions.iter().map(|v| v.version).collect();
    ensure!(versions == [1, 2], "the versions are {versions:?}");
    let listed = cp.list_models().await.map_err(api("list_models"))?;
    ensure!(
        listed.models.iter().any(|m| m.name == name
            && m.versions == 2
            && m.latest.as_ref().map(|v| v.version) == Some(2)),
        "`{name}` is not listed with two versions: {listed:?}"
    );
    eval_runs_pinned(cp, ctx, &name, &digests).await?;
    cp.delete_model(&name, None)
        .await
        .map_err(api("delete_model"))?;
    expect_error(
        "get a removed model",
        cp.get_model(&name).await,
        ErrorKind::NotFound,
        Some("not_found"),
    )?;
    cp.delete_volume(&volume)
        .await
        .map_err(api("delete_volume"))?;
    Ok(())
}

/// An eval run of `NAME` (the latest) and of `NAME@sha256:` (the first), each pinned and each
/// making an evaluation; an unknown version refused before anything is placed; a version kept
/// while a run of it is going (on a control plane whose runs wait), removed once it ended.
async fn eval_runs_pinned(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
    name: &str,
    digests: &[String],
) -> CheckResult {
    let before = cp
        .list_runs(&Default::default())
        .await
        .map_err(api("list_runs"))?
        .runs
        .len();
    let mut unknown = quick_run(ctx, None);
    unknown.model = Some(format!("{name}:v9"));
    let refused = expect_error(
        "an eval run of an unknown version",
        cp.create_run(&key(ctx, "eval-unknown"), &unknown).await,
        ErrorKind::Refused,
        None,
    )?;
    ensure!(
        refused.message().contains("v1") && refused.message().contains("v2"),
        "the refusal does not say the versions there are: {}",
        refused.message()
    );
    let after = cp
        .list_runs(&Default::default())
        .await
        .map_err(api("list_runs"))?
        .runs
        .len();
    ensure!(after == before, "a refused eval run was placed");

    let mut runs = Vec::new();
    for (model, version) in [(name.to_owned(), 2), (format!("{name}@{}", digests[0]), 1)] {
        let mut create = quick_run(ctx, None);
        create.model = Some(model.clone());
        let run = cp
            .create_run(&key(ctx, "eval"), &create)
            .await
            .map_err(api("create an eval run"))?;
        let Some(pinned) = run.model.clone() else {
            return Err(format!("the eval run of `{model}` says no model").into());
        };
        ensure!(
            pinned.version == version && pinned.digest == digests[version as usize - 1],
            "`{model}` was pinned to v{} {}",
            pinned.version,
            pinned.digest
        );
        let evaluation = cp
            .get_evaluation(&pinned.evaluation)
            .await
            .map_err(api("get_evaluation"))?;
        ensure!(
            evaluation.run == run.id && evaluation.version == version,
            "evaluation {} is of run {} v{}",
            evaluation.id,
            evaluation.run,
            evaluation.version
        );
        runs.push(run);
    }
    let listed = cp
        .list_evaluations(Some(name))
        .await
        .map_err(api("list_evaluations"))?;
    let of: Vec<&str> = listed.evaluations.iter().map(|e| e.run.as_str()).collect();
    ensure!(
        of == [runs[1].id.as_str(), runs[0].id.as_str()],
        "the evaluations, newest first, are of {of:?}"
    );
    if !ctx.runs_execute {
        expect_error(
            "remove a version an eval run is going against",
            cp.delete_model(name, Some(1)).await,
            ErrorKind::Conflict,
            Some("conflict"),
        )?;
    }
    for run in &runs {
        let stopped = cp.stop_run(&run.id).await.map_err(api("stop_run"))?;
        ensure!(
            stopped.status != RunStatus::Running && stopped.status != RunStatus::Queued,
            "a stopped run is {}",
            stopped.status
        );
    }
    cp.delete_model(name, Some(1))
        .await
        .map_err(api("delete a version no run uses"))?;
    let model = cp.get_model(name).await.map_err(api("get_model"))?;
    let versions: Vec<u32> = model.versions.iter().map(|v| v.version).collect();
    ensure!(
        versions == [2],
        "after removing v1 the versions are {versions:?}"
    );
    ensure!(
        model
            .evaluations
            .iter()
            .any(|e| e.version == 1 && e.digest == digests[0]),
        "the evaluation of a removed version is gone"
    );
    Ok(())
}
