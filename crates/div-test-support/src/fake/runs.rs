//! Runs in the fake: refused as the server refuses them, placed once per key, listed,
//! stopped; their logs (followed until they end), results and telemetry; and a test playing
//! a run: its log written, its end, its telemetry file.

use async_trait::async_trait;
use bytes::Bytes;
use div_api::{
    ApiError, BadLine, Catalogue, ControlPlane, CreateRun, ErrorKind, ListRuns, LogEvent,
    LogStream, Route, Run, RunList, RunResult, RunStatus, Telemetry, TelemetryPoint,
};
use div_pricing::SizeRequest;
use div_spec::{MemoryGib, UnknownSku};
use serde_json::{Value, json};

use super::state::{
    FAKE_TIME, FakeControlPlane, State, find_run, invalid, sample_catalogue, volume_name,
};

impl FakeControlPlane {
    /// A run writes `bytes` to its log: it is `running` from its first bytes on.
    pub fn append_log(&self, run: &str, bytes: &[u8]) -> Result<(), ApiError> {
        {
            let mut state = self.state();
            let found = find_run(&state.runs, run)?;
            let id = state.runs[found].id.clone();
            let log = state.logs.entry(id).or_default();
            log.extend_from_slice(bytes);
            let len = log.len() as u64;
            let r = &mut state.runs[found];
            if r.status == RunStatus::Queued {
                r.status = RunStatus::Running;
                r.started_at = Some(FAKE_TIME.to_owned());
            }
            r.log_bytes = len;
        }
        self.changed.notify_waiters();
        Ok(())
    }

    /// End a run as if it had run: `log` is its whole log.
    pub fn finish_run(&self, run: &str, log: &[u8], exit_code: i32) -> Result<Run, ApiError> {
        let mut state = self.state();
        let found = find_run(&state.runs, run)?;
        let id = state.runs[found].id.clone();
        state.logs.insert(id, log.to_vec());
        let r = &mut state.runs[found];
        r.status = if exit_code == 0 {
            RunStatus::Succeeded
        } else {
            RunStatus::Failed
        };
        r.exit_code = Some(exit_code);
        r.ended_at = Some(FAKE_TIME.to_owned());
        r.log_bytes = log.len() as u64;
        let ended = r.clone();
        drop(state);
        self.changed.notify_waiters();
        Ok(ended)
    }
}

impl FakeControlPlane {
    /// The run's telemetry file (`DIVERGENT_TELEMETRY_PATH`) now holds `jsonl`, as if the run
    /// had written it: read back the way the local control plane reads it, one JSON object a
    /// line, blank lines skipped, any other line a bad line.
    pub fn write_telemetry(&self, run: &str, jsonl: &str) -> Result<(), ApiError> {
        let mut state = self.state();
        let found = find_run(&state.runs, run)?;
        let id = state.runs[found].id.clone();
        state.telemetry.insert(id, jsonl.to_owned());
        Ok(())
    }
}

impl FakeControlPlane {
    /// What the server refuses of `run` before it places it, as far as the fake can tell
    /// (`validate_run` and `create_run` alike; a name taken is the callers'): the SKU, the
    /// size (div-pricing's rules), whole nodes ([`FakeControlPlane::with_nodes_of`]), the
    /// ceiling, the checks, the project, the code.
    fn refuse(&self, state: &State, run: &CreateRun) -> Result<div_pricing::Sizing, ApiError> {
        run_names(run)?;
        let catalogue = self.catalogue.clone().unwrap_or_else(sample_catalogue);
        if !catalogue.skus.iter().any(|s| s.name == run.sku) {
            let accepted: Vec<&str> = catalogue.skus.iter().map(|s| s.name.as_str()).collect();
            return Err(ApiError::from_server(
                ErrorKind::Refused,
                "unknown_sku".to_owned(),
                format!("unknown SKU `{}`", run.sku),
                json!({ "accepted": accepted }),
            ));
        }
        // Sized and priced by div-pricing's rules, as div-server sizes them.
        let sizing = catalogue
            .pricing()
            .size(&SizeRequest {
                sku: run.sku.parse().map_err(|e: UnknownSku| {
                    invalid(format!("unknown SKU `{}`: {e}", run.sku), Value::Null)
                })?,
                gpus: run.gpus,
                cpu: run.cpu,
                memory: run.memory_gib.map(MemoryGib::new),
            })
            .map_err(|e| invalid(e.to_string(), Value::Null))?;
        let gpus = sizing.gpus;
        if let Some(per) = self.nodes_of
            && gpus > per
            && !gpus.is_multiple_of(per)
        {
            let below = gpus / per * per;
            return Err(invalid(
                format!(
                    "`--gpus {gpus}`: past {per} GPUs a run takes whole nodes of {per} GPUs; ask for `--gpus {below}` or `--gpus {}`",
                    below + per
                ),
                Value::Null,
            ));
        }
        if let Some(reference) = run.model.as_deref() {
            super::models::resolve(state, reference)?;
        }
        if let Some(cents) = run.max_spend_cents
            && cents <= 0
        {
            return Err(invalid(
                format!("`max_spend_cents` must be more than 0, not `{cents}`"),
                Value::Null,
            ));
        }
        if let Some(e) = run
            .checks
            .iter()
            .find_map(|c| c.parse::<div_spec::Check>().err())
        {
            return Err(invalid(e.to_string(), Value::Null));
        }
        if let Some(code) = &run.code
            && !state
                .volumes
                .get(&code.volume)
                .is_some_and(|v| v.trees.contains_key(&code.path))
        {
            return Err(invalid(
                format!(
                    "the code `{}/{}` is not in a volume",
                    code.volume, code.path
                ),
                Value::Null,
            ));
        }
        Ok(sizing)
    }
}

/// The server's refusal of the names a run gives (div-spec's rules), before anything else.
fn run_names(run: &CreateRun) -> Result<(), ApiError> {
    if run.project.trim().is_empty() {
        return Err(invalid("the run has no project".to_owned(), Value::Null));
    }
    div_spec::check_project_name(&run.project).map_err(|e| invalid(e.to_string(), Value::Null))?;
    if let Some(name) = &run.name {
        div_spec::check_run_name(name).map_err(|e| invalid(e.to_string(), Value::Null))?;
    }
    if let Some(code) = &run.code {
        volume_name(&code.volume)?;
        if !div_spec::is_volume_path(&code.path) {
            return Err(invalid(
                format!(
                    "the code's path `{}` is not a path inside a volume",
                    code.path
                ),
                Value::Null,
            ));
        }
    }
    Ok(())
}

/// The refusal of a run named like one that exists.
fn name_taken(state: &State, run: &CreateRun) -> Result<(), ApiError> {
    match &run.name {
        Some(name) if state.runs.iter().any(|r| &r.name == name) => Err(ApiError::from_server(
            ErrorKind::Conflict,
            "conflict".to_owned(),
            format!("a run is already named `{name}`"),
            Value::Null,
        )),
        _ => Ok(()),
    }
}

/// Points and bad lines of a telemetry file past line `after`, as div-server reads them.
fn read_telemetry(jsonl: &str, after: u64) -> (Vec<TelemetryPoint>, Vec<BadLine>) {
    let (mut points, mut bad) = (Vec::new(), Vec::new());
    for (i, line) in jsonl.lines().enumerate() {
        let line_no = i as u64 + 1;
        if line_no <= after || line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(point @ Value::Object(_)) => points.push(TelemetryPoint {
                line: line_no,
                point,
            }),
            Ok(_) => bad.push(BadLine {
                line: line_no,
                error: "not a JSON object".to_owned(),
            }),
            Err(e) => bad.push(BadLine {
                line: line_no,
                error: e.to_string(),
            }),
        }
    }
    (points, bad)
}

/// Events handed out back to front.
struct FakeLog(Vec<LogEvent>);

#[async_trait]
impl LogStream for FakeLog {
    async fn next(&mut self) -> Option<Result<LogEvent, ApiError>> {
        self.0.pop().map(Ok)
    }
}

pub(crate) async fn catalogue(fake: &FakeControlPlane) -> Result<Catalogue, ApiError> {
    fake.called(Route::Catalogue);
    Ok(fake.catalogue.clone().unwrap_or_else(sample_catalogue))
}

pub(crate) async fn validate_run(fake: &FakeControlPlane, run: &CreateRun) -> Result<(), ApiError> {
    fake.called(Route::ValidateRun);
    let state = fake.state();
    fake.refuse(&state, run)?;
    name_taken(&state, run)
}

pub(crate) async fn create_run(
    fake: &FakeControlPlane,
    idempotency_key: &str,
    run: &CreateRun,
) -> Result<Run, ApiError> {
    fake.called(Route::CreateRun);
    let body = serde_json::to_value(run).expect("a CreateRun serializes");
    let mut state = fake.state();
    let sizing = fake.refuse(&state, run)?;
    if let Some((seen, id)) = state.keys.get(idempotency_key) {
        if *seen == body {
            let id = id.clone();
            let i = find_run(&state.runs, &id)?;
            return Ok(state.runs[i].clone());
        }
        return Err(ApiError::from_server(
            ErrorKind::Conflict,
            "conflict".to_owned(),
            format!("idempotency key `{idempotency_key}` was used with another body"),
            Value::Null,
        ));
    }
    name_taken(&state, run)?;
    let model = match run.model.as_deref() {
        Some(reference) => Some(super::models::resolve(&state, reference)?),
        None => None,
    };
    state.next += 1;
    let n = state.next;
    let created = Run {
        id: format!("r_fake{n:04}"),
        name: run.name.clone().unwrap_or_else(|| format!("run-f{n:03}")),
        project: run.project.clone(),
        status: RunStatus::Queued,
        entrypoint: run.entrypoint.clone(),
        command: run.command.clone(),
        sku: run.sku.clone(),
        gpus: sizing.gpus,
        cores: sizing.cores,
        memory_gib: sizing.memory_gib,
        cents_per_hour: sizing.rate.cents_per_hour(),
        max_spend_cents: run.max_spend_cents,
        spent_cents: 0,
        image: run.image.clone().unwrap_or_else(|| "default".to_owned()),
        env: run.env.clone(),
        checks: run.checks.clone(),
        verdicts: Vec::new(),
        exit_code: None,
        reason: None,
        code: run.code.clone(),
        telemetry_layout: run.telemetry_layout.clone(),
        created_at: FAKE_TIME.to_owned(),
        started_at: None,
        ended_at: None,
        duration_seconds: 0,
        log_bytes: 0,
        model: model.map(|m| super::models::run_model(&m, n)),
        placed_by: None,
        extra: Default::default(),
    };
    state
        .keys
        .insert(idempotency_key.to_owned(), (body, created.id.clone()));
    state.runs.push(created.clone());
    Ok(created)
}

pub(crate) async fn get_run(fake: &FakeControlPlane, run: &str) -> Result<Run, ApiError> {
    fake.called(Route::GetRun);
    let state = fake.state();
    let i = find_run(&state.runs, run)?;
    Ok(state.runs[i].clone())
}

pub(crate) async fn list_runs(
    fake: &FakeControlPlane,
    query: &ListRuns,
) -> Result<RunList, ApiError> {
    fake.called(Route::ListRuns);
    let state = fake.state();
    // A project outside the rule, unless runs of it are held (the server lists what it
    // stored before the rule).
    if let Some(project) = &query.project
        && let Err(e) = div_spec::check_project_name(project)
        && !state.runs.iter().any(|r| &r.project == project)
    {
        return Err(invalid(e.to_string(), Value::Null));
    }
    let start: usize = match &query.cursor {
        None => 0,
        Some(c) => c
            .parse()
            .map_err(|_| invalid(format!("bad cursor `{c}`"), Value::Null))?,
    };
    let limit = query.limit.unwrap_or(50) as usize;
    let matching: Vec<&Run> = state
        .runs
        .iter()
        .rev()
        .filter(|r| query.project.as_ref().is_none_or(|p| &r.project == p))
        .filter(|r| query.status.is_none_or(|s| r.status == s))
        .collect();
    let runs: Vec<Run> = matching
        .iter()
        .skip(start)
        .take(limit)
        .map(|r| (*r).clone())
        .collect();
    let next = start + runs.len();
    Ok(RunList {
        runs,
        next_cursor: (next < matching.len()).then(|| next.to_string()),
        extra: Default::default(),
    })
}

pub(crate) async fn stop_run(fake: &FakeControlPlane, run: &str) -> Result<Run, ApiError> {
    fake.called(Route::StopRun);
    let stopped = {
        let mut state = fake.state();
        let i = find_run(&state.runs, run)?;
        let r = &mut state.runs[i];
        if !r.status.is_terminal() {
            r.status = RunStatus::Canceled;
            r.ended_at = Some(FAKE_TIME.to_owned());
            r.reason = Some("stopped".to_owned());
        }
        r.clone()
    };
    fake.changed.notify_waiters();
    Ok(stopped)
}

pub(crate) async fn node_log(
    fake: &FakeControlPlane,
    run: &str,
    node: u32,
    _offset: u64,
    _follow: bool,
) -> Result<Box<dyn LogStream>, ApiError> {
    fake.called(Route::Log);
    let state = fake.state();
    let r = &state.runs[find_run(&state.runs, run)?];
    Err(ApiError::from_server(
        ErrorKind::NotFound,
        "not_found".to_owned(),
        format!(
            "run `{}` ran on one machine, not on several nodes: it has no node {node} (its log is `div logs {}`)",
            r.name, r.name
        ),
        Value::Null,
    ))
}

pub(crate) async fn log(
    fake: &FakeControlPlane,
    run: &str,
    offset: u64,
    follow: bool,
) -> Result<Box<dyn LogStream>, ApiError> {
    fake.called(Route::Log);
    loop {
        // Armed before the look, so an end between the look and the wait is not missed.
        let changed = fake.changed.notified();
        let mut changed = std::pin::pin!(changed);
        changed.as_mut().enable();
        {
            let state = fake.state();
            let i = find_run(&state.runs, run)?;
            let r = &state.runs[i];
            let log = state.logs.get(&r.id).cloned().unwrap_or_default();
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(log.len());
            let mut events = Vec::new();
            if start < log.len() {
                events.push(LogEvent::Chunk {
                    offset: start as u64,
                    data: Bytes::copy_from_slice(&log[start..]),
                });
            }
            // A followed log of a run still going waits for bytes or its end, as the
            // server's does; otherwise it says where the log stands.
            if !events.is_empty() || r.status.is_terminal() || !follow {
                events.push(if r.status.is_terminal() {
                    LogEvent::End(Box::new(r.clone()))
                } else {
                    LogEvent::Tail {
                        offset: log.len() as u64,
                    }
                });
                events.reverse();
                return Ok(Box::new(FakeLog(events)));
            }
        }
        changed.await;
    }
}

pub(crate) async fn result(fake: &FakeControlPlane, run: &str) -> Result<RunResult, ApiError> {
    fake.called(Route::Result);
    let r = fake.get_run(run).await?;
    Ok(RunResult {
        run: r.id,
        result: None,
        problem: Some("the run wrote no result".to_owned()),
        verdicts: r.verdicts,
        extra: Default::default(),
    })
}

pub(crate) async fn telemetry(
    fake: &FakeControlPlane,
    run: &str,
    after: u64,
) -> Result<Telemetry, ApiError> {
    fake.called(Route::Telemetry);
    let state = fake.state();
    let r = &state.runs[find_run(&state.runs, run)?];
    let (points, bad_lines) =
        read_telemetry(state.telemetry.get(&r.id).map_or("", String::as_str), after);
    Ok(Telemetry {
        run: r.id.clone(),
        points,
        bad_lines,
        extra: Default::default(),
    })
}
