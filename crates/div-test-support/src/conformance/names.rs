//! Names outside their rules (a project, a run, a volume), refused wherever they are
//! given, and nothing made of them.

use bytes::Bytes;
use div_api::{
    ApiError, BlobSource, CommitTree, ControlPlane, EntryKind, ErrorKind, ListRuns, TreeEntry,
};

use super::check::{CheckResult, api, ensure, expect_error, hash};
use super::context::{ConformanceContext, key, quick_run};

/// Names `div` would never send: markup, `..`, a `/`, capitals, 300 characters.
fn names_div_never_sends() -> [String; 5] {
    [
        "<img id=x src=x>".to_owned(),
        "../../etc".to_owned(),
        "a/b".to_owned(),
        "UPPER".to_owned(),
        "a".repeat(300),
    ]
}

/// A project, run or volume name outside its rule is refused (422 `invalid`, the message
/// saying the rule: "1 to 63 …") by every route that takes one, and nothing is made: a run's
/// project, its name and its code's volume, whether it is placed or only validated; every
/// volume route; the runs of a project.
pub(crate) async fn names_outside_their_rules_refused(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let data = Bytes::from_static(b"x\n");
    let h = hash(&data);
    let tree = CommitTree {
        path: "code/0000".to_owned(),
        entries: vec![TreeEntry {
            path: "a.txt".to_owned(),
            kind: EntryKind::File,
            executable: false,
            size: 2,
            hash: Some(h.clone()),
            target: None,
        }],
    };
    for bad in names_div_never_sends() {
        runs_named_refused(cp, ctx, &bad).await?;
        volume_named_refused(cp, &bad, &tree, &data).await?;
    }
    let bad = names_div_never_sends();
    let page = cp
        .list_runs(&ListRuns {
            limit: Some(1000),
            ..ListRuns::default()
        })
        .await
        .map_err(api("list_runs"))?;
    ensure!(
        !page
            .runs
            .iter()
            .any(|r| bad.contains(&r.project) || bad.contains(&r.name)),
        "a refused name placed a run"
    );
    let volumes = cp.list_volumes().await.map_err(api("list_volumes"))?;
    ensure!(
        !volumes.iter().any(|v| bad.contains(&v.name)),
        "a refused name made a volume"
    );
    Ok(())
}

/// `result` is the refusal of a name outside its rule: 422 `invalid`, saying the rule.
fn refused(what: String, result: Result<(), ApiError>) -> CheckResult {
    let e = expect_error(&what, result, ErrorKind::Refused, Some("invalid"))?;
    ensure!(
        e.message().contains("63"),
        "{what}: the refusal does not say the rule: {}",
        e.message()
    );
    Ok(())
}

/// A run whose project, name or code's volume is `bad`, and the runs of the project `bad`:
/// each refused.
async fn runs_named_refused(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
    bad: &str,
) -> CheckResult {
    let mut run = quick_run(ctx, None);
    run.project = bad.to_owned();
    refused(
        format!("place a run in the project `{bad}`"),
        cp.create_run(&key(ctx, "names"), &run).await.map(drop),
    )?;
    refused(
        format!("validate a run in the project `{bad}`"),
        cp.validate_run(&run).await,
    )?;
    let mut run = quick_run(ctx, Some(bad.to_owned()));
    refused(
        format!("place a run named `{bad}`"),
        cp.create_run(&key(ctx, "names"), &run).await.map(drop),
    )?;
    run.name = None;
    run.code = Some(div_api::CodeRef {
        volume: bad.to_owned(),
        path: "code/0000".to_owned(),
        extra: Default::default(),
    });
    refused(
        format!("place a run of code in the volume `{bad}`"),
        cp.create_run(&key(ctx, "names"), &run).await.map(drop),
    )?;
    refused(
        format!("list the runs of the project `{bad}`"),
        cp.list_runs(&ListRuns {
            project: Some(bad.to_owned()),
            ..ListRuns::default()
        })
        .await
        .map(drop),
    )
}

/// Each call on the volume `v`, refused: made, asked what it lacks, a blob uploaded, `tree`
/// (of the blob `data`) committed or staged, listed, read, deleted.
async fn volume_named_refused(
    cp: &dyn ControlPlane,
    v: &str,
    tree: &CommitTree,
    data: &Bytes,
) -> CheckResult {
    let h = hash(data);
    refused(
        format!("make the volume `{v}`"),
        cp.create_volume(v).await.map(drop),
    )?;
    refused(
        format!("ask what the volume `{v}` lacks"),
        cp.missing_blobs(v, std::slice::from_ref(&h))
            .await
            .map(drop),
    )?;
    refused(
        format!("upload a blob to the volume `{v}`"),
        cp.upload_blob(v, &h, 0, 2, BlobSource::Bytes(data.clone()))
            .await,
    )?;
    refused(
        format!("commit a tree to the volume `{v}`"),
        cp.commit_tree(v, tree).await.map(drop),
    )?;
    // A control plane that stages no trees says `None` to any volume.
    match cp.stage_tree(v, tree).await {
        Ok(None) => {}
        other => refused(format!("stage a tree in the volume `{v}`"), other.map(drop))?,
    }
    refused(
        format!("list the volume `{v}`"),
        cp.list_tree(v, "").await.map(drop),
    )?;
    let mut sink = Vec::new();
    refused(
        format!("read a file of the volume `{v}`"),
        cp.read_file(v, "a.txt", &mut sink).await.map(drop),
    )?;
    refused(
        format!("delete the volume `{v}`"),
        cp.delete_volume(v).await,
    )
}
