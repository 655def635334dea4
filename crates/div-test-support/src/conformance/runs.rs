//! Runs: the SKU offered, placed once per key, found by name and id, refused as creation
//! would refuse them (creating nothing), stopped once ended, and an ended run's log.

use std::time::Duration;

use div_api::{ApiError, ControlPlane, CreateRun, ErrorKind, ListRuns, LogEvent, Run};

use super::check::{CheckFailure, CheckResult, api, ensure, expect_error};
use super::context::{ConformanceContext, key, quick_run};

pub(crate) async fn catalogue_offers_the_sku(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let catalogue = cp.catalogue().await.map_err(api("catalogue"))?;
    ensure!(
        catalogue.skus.iter().any(|s| s.name == ctx.sku),
        "the catalogue does not offer `{}`",
        ctx.sku
    );
    Ok(())
}

pub(crate) async fn create_run_idempotent(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let k = key(ctx, "idem");
    let body = quick_run(ctx, None);
    let first = cp.create_run(&k, &body).await.map_err(api("create_run"))?;
    let second = cp
        .create_run(&k, &body)
        .await
        .map_err(api("create_run again"))?;
    ensure!(
        first.id == second.id,
        "the same key placed two runs: {} and {}",
        first.id,
        second.id
    );
    let page = cp
        .list_runs(&ListRuns {
            project: Some(ctx.project.clone()),
            ..ListRuns::default()
        })
        .await
        .map_err(api("list_runs"))?;
    let count = page.runs.iter().filter(|r| r.id == first.id).count();
    ensure!(count == 1, "run `{}` listed {count} times", first.id);
    let mut other = body.clone();
    other.command = format!("{} # another", other.command);
    expect_error(
        "the same key with another body",
        cp.create_run(&k, &other).await,
        ErrorKind::Conflict,
        Some("conflict"),
    )?;
    cp.stop_run(&first.id).await.map_err(api("stop_run"))?;
    Ok(())
}

pub(crate) async fn get_run_by_name_and_id(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let placed = cp
        .create_run(&key(ctx, "get"), &quick_run(ctx, None))
        .await
        .map_err(api("create_run"))?;
    let by_id = cp.get_run(&placed.id).await.map_err(api("get_run by id"))?;
    let by_name = cp
        .get_run(&placed.name)
        .await
        .map_err(api("get_run by name"))?;
    ensure!(
        by_id.id == placed.id && by_name.id == placed.id,
        "get by id and by name differ"
    );
    ensure!(by_id.project == ctx.project, "project `{}`", by_id.project);
    ensure!(by_id.command == ctx.command, "command `{}`", by_id.command);
    cp.stop_run(&placed.id).await.map_err(api("stop_run"))?;
    Ok(())
}

pub(crate) async fn not_found_kinds(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let run = format!("{}-no-such-run", ctx.prefix);
    let volume = format!("{}-no-such-volume", ctx.prefix);
    let nf = |what: &str, r: Result<(), ApiError>| {
        expect_error(what, r, ErrorKind::NotFound, Some("not_found")).map(drop)
    };
    nf("get_run", cp.get_run(&run).await.map(drop))?;
    nf("stop_run", cp.stop_run(&run).await.map(drop))?;
    nf("result", cp.result(&run).await.map(drop))?;
    nf("telemetry", cp.telemetry(&run, 0).await.map(drop))?;
    nf("log", cp.log(&run, 0, false).await.map(drop))?;
    nf("list_tree", cp.list_tree(&volume, "").await.map(drop))?;
    nf(
        "missing_blobs",
        cp.missing_blobs(&volume, &[]).await.map(drop),
    )?;
    Ok(())
}

pub(crate) async fn unknown_sku_refused(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let mut body = quick_run(ctx, None);
    body.sku = "z999".to_owned();
    let e = expect_error(
        "create a run on `z999`",
        cp.create_run(&key(ctx, "sku"), &body).await,
        ErrorKind::Refused,
        Some("unknown_sku"),
    )?;
    let accepted = e
        .details()
        .get("accepted")
        .and_then(|a| a.as_array())
        .cloned()
        .unwrap_or_default();
    ensure!(
        accepted
            .iter()
            .any(|s| s.as_str() == Some(ctx.sku.as_str())),
        "details {} do not list `{}` as accepted",
        e.details(),
        ctx.sku
    );
    Ok(())
}

/// `validate_run` answers what `create_run` would, the very same refusal for each thing it
/// refuses (an unknown SKU, a ceiling of nothing, code that is not in a volume, a name taken),
/// and creates nothing: no run, not even the volume its command names.
pub(crate) async fn validation_refuses_as_creation_and_creates_nothing(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let project = format!("{}-validate", ctx.prefix);
    let volume = format!("{}-validate-named", ctx.prefix);
    let mut good = quick_run(ctx, None);
    good.project = project.clone();
    good.command = format!("ls /mnt/{volume} >/dev/null 2>&1; {}", ctx.command);
    cp.validate_run(&good)
        .await
        .map_err(api("validate a run create_run takes"))?;

    let taken = cp
        .create_run(
            &key(ctx, "validate-taken"),
            &quick_run(ctx, Some(format!("{}-validate-taken", ctx.prefix))),
        )
        .await
        .map_err(api("create_run"))?;
    let refused = |what: &'static str, change: &dyn Fn(&mut CreateRun)| {
        let mut body = good.clone();
        change(&mut body);
        (what, body)
    };
    let cases = [
        refused("an unknown SKU", &|b| b.sku = "z999".to_owned()),
        refused("a ceiling of nothing", &|b| b.max_spend_cents = Some(0)),
        refused("code that is not in a volume", &|b| {
            b.code = Some(div_api::CodeRef {
                volume: format!("{}-no-such-volume", ctx.prefix),
                path: "code/0000".to_owned(),
                extra: Default::default(),
            });
        }),
        refused("a name taken", &|b| b.name = Some(taken.name.clone())),
    ];
    for (what, body) in &cases {
        let validated = match cp.validate_run(body).await {
            Ok(()) => {
                return Err(format!("validate {what}: taken, but create_run refuses it").into());
            }
            Err(e) => e,
        };
        let created = expect_error(
            &format!("create {what}"),
            cp.create_run(&key(ctx, "validate"), body).await,
            validated.kind(),
            validated.code(),
        )?;
        ensure!(
            created.message() == validated.message() && created.details() == validated.details(),
            "{what}: validate_run says `{}` {}, create_run `{}` {}",
            validated.message(),
            validated.details(),
            created.message(),
            created.details()
        );
    }
    cp.stop_run(&taken.id).await.map_err(api("stop_run"))?;

    let page = cp
        .list_runs(&ListRuns {
            project: Some(project.clone()),
            ..ListRuns::default()
        })
        .await
        .map_err(api("list_runs"))?;
    ensure!(
        page.runs.is_empty(),
        "validating placed runs in `{project}`: {:?}",
        page.runs.iter().map(|r| &r.id).collect::<Vec<_>>()
    );
    let volumes = cp.list_volumes().await.map_err(api("list_volumes"))?;
    ensure!(
        !volumes.iter().any(|v| v.name == volume),
        "validating made the volume `{volume}` its command names"
    );
    Ok(())
}

/// Place a quick run and wait for it to end (stopping it when runs do not execute).
async fn ended_run(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
    what: &str,
) -> Result<Run, CheckFailure> {
    let placed = cp
        .create_run(&key(ctx, what), &quick_run(ctx, None))
        .await
        .map_err(api("create_run"))?;
    if !ctx.runs_execute {
        return cp.stop_run(&placed.id).await.map_err(api("stop_run"));
    }
    let deadline = tokio::time::Instant::now() + ctx.run_deadline;
    loop {
        let run = cp.get_run(&placed.id).await.map_err(api("get_run"))?;
        if run.status.is_terminal() {
            return Ok(run);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "run `{}` still `{}` after {:?}",
                run.id, run.status, ctx.run_deadline
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn stop_ended_run_unchanged(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let ended = ended_run(cp, ctx, "stop").await?;
    let stopped = cp
        .stop_run(&ended.id)
        .await
        .map_err(api("stop an ended run"))?;
    ensure!(
        stopped.status == ended.status
            && stopped.exit_code == ended.exit_code
            && stopped.ended_at == ended.ended_at
            && stopped.spent_cents == ended.spent_cents,
        "stopping an ended run changed it: {ended:?} became {stopped:?}"
    );
    Ok(())
}

/// Read a whole log stream: its bytes, and the run from its `End`.
async fn read_log(
    cp: &dyn ControlPlane,
    run: &str,
    offset: u64,
    follow: bool,
) -> Result<(Vec<u8>, Option<Run>), CheckFailure> {
    let mut stream = cp.log(run, offset, follow).await.map_err(api("log"))?;
    let mut bytes = Vec::new();
    let mut end = None;
    while let Some(event) = stream.next().await {
        match event.map_err(api("log stream"))? {
            LogEvent::Chunk { offset: at, data } => {
                ensure!(
                    at == offset + bytes.len() as u64,
                    "a chunk at {at}, expected {}",
                    offset + bytes.len() as u64
                );
                bytes.extend_from_slice(&data);
            }
            LogEvent::Tail { .. } => return Err("an ended run's log ended with `tail`".into()),
            LogEvent::End(run) => end = Some(*run),
        }
    }
    Ok((bytes, end))
}

pub(crate) async fn log_of_ended_run(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let ended = ended_run(cp, ctx, "log").await?;
    let (all, end) = read_log(cp, &ended.id, 0, true).await?;
    let end = end.ok_or("the log stream ended without `end`")?;
    ensure!(end.id == ended.id, "`end` carries run `{}`", end.id);
    ensure!(
        end.status.is_terminal(),
        "`end` carries a `{}` run",
        end.status
    );
    if ctx.runs_execute {
        ensure!(
            all.windows(ctx.expected_output.len().max(1))
                .any(|w| w == ctx.expected_output.as_slice()),
            "the log {:?} does not hold {:?}",
            String::from_utf8_lossy(&all),
            String::from_utf8_lossy(&ctx.expected_output)
        );
        ensure!(
            end.exit_code == Some(ctx.expected_exit_code),
            "the run exited {:?}, not {}",
            end.exit_code,
            ctx.expected_exit_code
        );
    }
    let (again, end) = read_log(cp, &ended.id, 0, false).await?;
    ensure!(again == all, "a second read of the log differs");
    ensure!(
        end.is_some(),
        "without follow, an ended run's log still ends with `end`"
    );
    let middle = all.len() as u64 / 2;
    let (rest, _) = read_log(cp, &ended.id, middle, false).await?;
    ensure!(
        rest == all[middle as usize..],
        "the log from byte {middle} is not the rest of it"
    );
    Ok(())
}
