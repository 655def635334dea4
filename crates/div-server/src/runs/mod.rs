//! Runs: placing one (validated, idempotent; or only validated, creating nothing), showing them (one, a page, its result, its
//! telemetry) and stopping one. The queue and the launch are [`scheduler`]'s and
//! [`launcher`]'s; where a run runs is the [`crate::executor`]'s.

mod admission;
mod error;
mod fair;
pub(crate) mod launcher;
mod place;
pub(crate) mod scheduler;
mod validation;

pub(crate) use error::{CreateRunError, RunError};
pub(crate) use place::{place, validate_run};

use std::fs;
use std::sync::Arc;
use std::time::Duration;

use div_api::{ListRuns, Run, RunList, RunResult, RunStatus, Telemetry};

use crate::fault::StateError;
use crate::members::{self, Actor, Right};
use crate::rules;
use crate::server::{Server, spawn_work};
use crate::store::RunRecord;
use div_runtime::clock::{self, now_ms};
use div_runtime::supervisor::{self, KeptResult, KeptTelemetry};

/// The run as the API shows it: spend and duration live while it runs, the log's size.
pub(crate) fn view(server: &Server, record: &RunRecord) -> Run {
    let mut run = record.run.clone();
    // A run placed before members were recorded was the owner's.
    run.placed_by
        .get_or_insert_with(|| members::OWNER.to_owned());
    run.log_bytes = fs::metadata(server.home.run_dir(&run.id).join("log")).map_or(0, |m| m.len());
    if run.status == RunStatus::Running
        && let Some(started) = record.internal.started_ms
    {
        let seconds = now_ms().saturating_sub(started) / 1000;
        run.duration_seconds = seconds;
        run.spent_cents = rules::charge(run.cents_per_hour, seconds, run.max_spend_cents);
    }
    if run.status == RunStatus::Queued
        && let Some(queue) = server.queue().get(&run.id)
        && let Ok(value) = serde_json::to_value(queue)
    {
        run.extra.insert("queue".to_owned(), value);
    }
    run
}

/// A run by id or name, as the API shows it.
pub(crate) fn get_run(server: &Server, id_or_name: &str) -> Result<(Run, RunRecord), RunError> {
    let record = server
        .store
        .get_run(id_or_name)?
        .ok_or_else(|| RunError::NoRun(id_or_name.to_owned()))?;
    Ok((view(server, &record), record))
}

/// `GET /v1/runs`: a page of runs, newest first, each as [`view`] shows it.
pub(crate) fn list(server: &Server, query: &ListRuns) -> Result<RunList, RunError> {
    let cursor = match &query.cursor {
        Some(c) => Some(
            c.parse::<i64>()
                .map_err(|_| RunError::BadCursor(c.clone()))?,
        ),
        None => None,
    };
    let limit = query.limit.unwrap_or(50).clamp(1, 1000);
    // A project outside the rule is refused with it, unless runs of it are stored: runs placed
    // before the rule (when any project was taken) are still listed by it.
    if let Some(project) = &query.project
        && let Err(rule) = rules::check_project_name(project)
        && server
            .store
            .list_runs(Some(project), None, 1, None)?
            .0
            .is_empty()
    {
        return Err(RunError::BadProject(rule.to_string()));
    }
    let (runs, next) = server.store.list_runs_by(
        query.project.as_deref(),
        query.status,
        query.placed_by.as_deref(),
        limit,
        cursor,
    )?;
    let runs = runs
        .into_iter()
        .map(|r| {
            server
                .store
                .get_run(&r.id)
                .ok()
                .flatten()
                .map_or(r, |rec| view(server, &rec))
        })
        .collect();
    Ok(RunList {
        runs,
        next_cursor: next.map(|n| n.to_string()),
        extra: Default::default(),
    })
}

/// Refuses `actor` a run another member placed, unless its role may stop anyone's.
fn check_stop_right(actor: &Actor, record: &RunRecord) -> Result<(), RunError> {
    let owner = record.run.placed_by.as_deref().unwrap_or(members::OWNER);
    if owner == actor.name || actor.may(Right::StopAnyRun) {
        return Ok(());
    }
    Err(RunError::NotYours {
        run: record.run.name.clone(),
        owner: owner.to_owned(),
        refusal: members::refusal(&actor.name, actor.role, Right::StopAnyRun),
        role: actor.role,
        actor: actor.name.clone(),
    })
}

/// Asks a run to stop, when `actor` may stop it: a queued one is canceled at once; a running
/// one's executor asks its supervisor, which kills its whole tree. Returns whether it was
/// running.
pub(crate) fn request_stop(
    server: &Server,
    actor: &Actor,
    id_or_name: &str,
) -> Result<bool, RunError> {
    let _guard = server.lock();
    let mut record = server
        .store
        .get_run(id_or_name)?
        .ok_or_else(|| RunError::NoRun(id_or_name.to_owned()))?;
    check_stop_right(actor, &record)?;
    match record.run.status {
        // Handed to an executor that queues it (Slurm): that one cancels it.
        RunStatus::Queued if record.launched() => {
            let dir = server.home.run_dir(&record.run.id);
            server
                .executor
                .stop(&dir, record.internal.handle.as_ref())?;
            Ok(true)
        }
        RunStatus::Queued => {
            record.run.status = RunStatus::Canceled;
            record.run.ended_at = Some(clock::now_rfc3339());
            server.store.update_run(&record)?;
            Ok(false)
        }
        RunStatus::Running => {
            let dir = server.home.run_dir(&record.run.id);
            server
                .executor
                .stop(&dir, record.internal.handle.as_ref())?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `POST /v1/runs/{run}/stop`: asks the run to stop, then waits (at most 15 s) for its
/// supervisor to end it, so the answer is the ended run when it can be.
pub(crate) async fn stop_and_wait(
    server: &Arc<Server>,
    actor: &Actor,
    id_or_name: String,
) -> Result<Run, RunError> {
    let id = id_or_name.clone();
    let actor = actor.clone();
    let was_running = work(server, move |s| request_stop(s, &actor, &id)).await?;
    if was_running {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while tokio::time::Instant::now() < deadline {
            let _ = spawn_work(server, scheduler::tick).await;
            let id = id_or_name.clone();
            let (r, _) = work(server, move |s| get_run(s, &id)).await?;
            if r.status.is_terminal() {
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let (r, _) = work(server, move |s| get_run(s, &id_or_name)).await?;
    Ok(r)
}

/// `f` on a blocking thread ([`spawn_work`]); a task that ended without an answer is the
/// state's failure.
async fn work<T: Send + 'static, E: From<StateError> + Send + 'static>(
    server: &Arc<Server>,
    f: impl FnOnce(&Server) -> Result<T, E> + Send + 'static,
) -> Result<T, E> {
    spawn_work(server, f)
        .await
        .map_err(|e| StateError::Task(e.to_string()))?
}

/// `GET /v1/runs/{run}/result`: what the supervisor kept of the run's result, and its
/// verdicts; a problem instead while there is none.
pub(crate) fn result(server: &Server, id_or_name: &str) -> Result<RunResult, RunError> {
    result_exact(server, id_or_name).map(|r| r.result)
}

/// [`result`], with the object's JSON text as the run wrote it, which the route sends in
/// place of `result`: numbers as written (`0.30000000000000001`, never `f64`'s `0.3`), so a
/// client judges checks exactly as the supervisor did.
pub(crate) fn result_exact(server: &Server, id_or_name: &str) -> Result<ExactResult, RunError> {
    let (r, _) = get_run(server, id_or_name)?;
    let kept: Option<KeptResult> = fs::read(server.home.run_dir(&r.id).join("result.kept.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let (result, problem, text) = match kept {
        Some(k) => {
            // The text only beside an object, and only when it is still JSON (a damaged
            // record falls back to the parsed object).
            let text = k
                .text
                .filter(|_| k.result.is_some())
                .filter(|t| t.trim_start().starts_with('{'))
                .and_then(|t| serde_json::value::RawValue::from_string(t).ok());
            (k.result, k.problem, text)
        }
        None if r.status.is_terminal() => (None, Some("the run wrote no result".to_owned()), None),
        None => (None, Some("the run has not ended yet".to_owned()), None),
    };
    Ok(ExactResult {
        result: RunResult {
            run: r.id,
            result,
            problem,
            verdicts: r.verdicts,
            extra: Default::default(),
        },
        text,
    })
}

/// A run's result as `GET /v1/runs/{run}/result` sends it: `result` is the object's text as
/// the run wrote it where it is kept.
pub(crate) struct ExactResult {
    pub(crate) result: RunResult,
    text: Option<Box<serde_json::value::RawValue>>,
}

impl serde::Serialize for ExactResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Sent<'a> {
            run: &'a str,
            result: &'a serde_json::value::RawValue,
            #[serde(skip_serializing_if = "Option::is_none")]
            problem: Option<&'a str>,
            verdicts: &'a [div_api::CheckVerdict],
            #[serde(flatten)]
            extra: &'a div_api::Extra,
        }
        let r = &self.result;
        match &self.text {
            Some(text) => Sent {
                run: &r.run,
                result: text,
                problem: r.problem.as_deref(),
                verdicts: &r.verdicts,
                extra: &r.extra,
            }
            .serialize(serializer),
            None => r.serialize(serializer),
        }
    }
}

/// `GET /v1/runs/{run}/telemetry?after=N`: the points and bad lines after line `after`;
/// what the supervisor kept once it ended, the live file while it runs.
pub(crate) fn telemetry(
    server: &Server,
    id_or_name: &str,
    after: u64,
) -> Result<Telemetry, RunError> {
    let (r, _) = get_run(server, id_or_name)?;
    let dir = server.home.run_dir(&r.id);
    let kept: KeptTelemetry = fs::read(dir.join("telemetry.kept.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| supervisor::read_telemetry(&dir.join("tmp/divergent/telemetry.jsonl")));
    Ok(Telemetry {
        run: r.id,
        points: kept.points.into_iter().filter(|p| p.line > after).collect(),
        bad_lines: kept
            .bad_lines
            .into_iter()
            .filter(|b| b.line > after)
            .collect(),
        extra: Default::default(),
    })
}
