//! Placing a run (`POST /v1/runs`), and asking whether it would be placed
//! (`POST /v1/runs/validate`).
//!
//! A run's body is read once and validated once ([`validation::validate`]), before its image
//! is pulled, so a mistaken run is refused at once; then its image is resolved (pulled, or
//! found in the cache), so an image that cannot be used is refused with the registry's answer
//! and no run exists; then, holding its code volume's commit lock and the status lock, its
//! code is found still there (retention may have removed it meanwhile), the org's usage limit
//! is asked, and the run is recorded, idempotently by its key.

use std::fs;
use std::sync::Arc;

use div_api::{CreateRun, Run, RunModel, RunStatus};

use super::error::CreateRunError;
use super::validation::{self, Valid};
use super::{scheduler, view, work};
use crate::images::{RUN_IMAGE_FILE, RunImage};
use crate::members::{Actor, usage};
use crate::rules;
use crate::server::Server;
use crate::store::{Placed, RunInternal, RunRecord};
use div_runtime::clock::{self, now_ms};
use div_runtime::supervisor;

/// Random lowercase base36 characters, from the kernel's generator.
fn random_base36(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    if fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_err()
    {
        let seed = blake3::hash(
            format!("{:?}{}", std::time::SystemTime::now(), std::process::id()).as_bytes(),
        );
        bytes.copy_from_slice(&seed.as_bytes()[..n.min(32)]);
    }
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % 36] as char)
        .collect()
}

/// The run a `POST /v1/runs` or `POST /v1/runs/validate` body asks for.
fn parse_request(body: &[u8]) -> Result<CreateRun, CreateRunError> {
    serde_json::from_slice(body).map_err(|e| CreateRunError::NotJson(e.to_string()))
}

/// Refuses a run while the org's usage limit is reached, or the limit of `actor`, who places
/// it.
fn within_org_limit(server: &Server, actor: &Actor) -> Result<(), CreateRunError> {
    if let Some(usage) = server.org_usage()?.filter(|u| u.reached) {
        let message = usage.refusal(&server.home);
        return Err(CreateRunError::UsageLimit { usage, message });
    }
    if let Some(usage) = usage::of(&server.store, &actor.name)?.filter(|u| u.reached) {
        let message = usage.refusal();
        return Err(CreateRunError::MemberLimit { usage, message });
    }
    Ok(())
}

/// `POST /v1/runs/validate`: refuses `body` exactly as `POST /v1/runs` would now (the same
/// status and error), creating nothing: no run, no volume, no idempotency key. Its `code` may
/// be absent (not sent yet); its image is not resolved (`POST /v1/images/pull` does that).
pub(crate) fn validate_run(
    server: &Server,
    actor: &Actor,
    body: &[u8],
) -> Result<(), CreateRunError> {
    let request = parse_request(body)?;
    validation::validate(server, &request)?;
    within_org_limit(server, actor)?;
    if let Some(name) = &request.name
        && server.store.name_taken(name)?
    {
        return Err(CreateRunError::NameTaken(name.clone()));
    }
    Ok(())
}

/// `POST /v1/runs`: whether the run was made now (`false`: a retry of its key, answered with
/// the same run), and the run.
pub(crate) async fn place(
    server: &Arc<Server>,
    actor: &Actor,
    key: String,
    body: bytes::Bytes,
) -> Result<(bool, Run), CreateRunError> {
    if key.is_empty() {
        return Err(CreateRunError::NoKey);
    }
    let request = parse_request(&body)?;
    let canonical =
        serde_json::to_vec(&request).map_err(|e| CreateRunError::Unreadable(e.to_string()))?;
    let body_hash = blake3::hash(&canonical).to_hex().to_string();
    let (request, valid) = work(server, move |s| {
        let valid = validation::validate(s, &request)?;
        Ok::<_, CreateRunError>((request, valid))
    })
    .await?;
    let (image, pull) = (request.image.clone(), request.pull);
    // On a blocking thread: the pull's future is not `Send` in the way hyper's connection
    // task needs (a higher-ranked lifetime inside div-image's streams).
    let handle = tokio::runtime::Handle::current();
    let image = work(server, move |s| {
        handle
            .block_on(
                s.images
                    .resolve(image.as_deref(), pull, &div_image::NoProgress),
            )
            .map_err(CreateRunError::from)
    })
    .await?;
    let actor = actor.clone();
    let placed = work(server, move |s| {
        record(s, &actor, &key, &body_hash, &request, valid, image)
    })
    .await?;
    // Start it now rather than at the next tick.
    server.kick.notify_one();
    Ok(placed)
}

/// The run recorded, queued, with its image in its directory: what [`place`] does once the
/// image is resolved, placed by `actor`. `image` is the run's image (`None`: this machine's
/// own system), kept in the run's directory for the launcher.
fn record(
    server: &Server,
    actor: &Actor,
    key: &str,
    body_hash: &str,
    request: &CreateRun,
    valid: Valid,
    image: Option<RunImage>,
) -> Result<(bool, Run), CreateRunError> {
    // From the check that its code is there to its record, a run holds its code volume's
    // commit lock, which retention holds while it removes snapshots: a snapshot is never
    // removed between the two, so no run is placed from one that is gone.
    let code_lock = request
        .code
        .as_ref()
        .map(|c| crate::volumes::commit_lock(&c.volume));
    let _code_turn = code_lock
        .as_ref()
        .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
    validation::code_is_there(server, request)?;
    within_org_limit(server, actor)?;

    let _guard = server.lock();
    let name = match &request.name {
        Some(name) => name.clone(),
        None => loop {
            let name = format!("run-{}", random_base36(4));
            if !server.store.name_taken(&name)? {
                break name;
            }
        },
    };
    let model = valid.model.clone().map(|row| RunModel {
        path: crate::models::mount_of(&server.volumes(), &row.path, server.sandboxed),
        name: row.model,
        version: row.version,
        digest: row.digest,
        evaluation: format!("ev_{}", random_base36(16)),
        extra: Default::default(),
    });
    let mut run = new_run(name.clone(), request, valid, model);
    run.placed_by = Some(actor.name.clone());
    let record = RunRecord {
        run,
        internal: RunInternal::default(),
    };
    // The image goes into the run's directory before the run is queued, so the scheduler
    // never launches it without its image; a retry's directory is removed again.
    let dir = server.home.run_dir(&record.run.id);
    if let Some(image) = &image {
        fs::create_dir_all(&dir)?;
        supervisor::write_json_atomic(&dir.join(RUN_IMAGE_FILE), image)?;
    }
    let placed = server.store.place_run(key, body_hash, &record);
    if image.is_some() && !matches!(placed, Ok(Placed::New)) {
        let _ = fs::remove_dir_all(&dir);
    }
    let placed = match placed {
        Ok(placed) => placed,
        Err(e) if e.is_unique_violation() => return Err(CreateRunError::NameTaken(name)),
        Err(e) => return Err(e.into()),
    };
    match placed {
        Placed::New => {
            // A volume the command (or an `--env` value) names is made before the run is
            // queued.
            for volume in rules::volumes_named(&record.run.command, &record.run.env) {
                if server.store.create_volume(&volume, &clock::now_rfc3339())? {
                    server.home.make_volume_dir(&volume)?;
                }
            }
            scheduler::refresh_queue(server)?;
            Ok((true, view(server, &record)))
        }
        Placed::Again(existing) => Ok((false, view(server, &existing))),
        Placed::Conflict => Err(CreateRunError::KeyReused(key.to_owned())),
    }
}

/// The run `request` asks for, as `valid`ated, named `name`, queued now; for an eval run, the
/// model version it judges.
fn new_run(name: String, request: &CreateRun, valid: Valid, model: Option<RunModel>) -> Run {
    Run {
        id: format!("r_{}", random_base36(16)),
        name,
        project: request.project.clone(),
        status: RunStatus::Queued,
        entrypoint: request.entrypoint.clone(),
        command: request.command.clone(),
        sku: valid.sku.name.to_owned(),
        gpus: valid.gpus,
        cores: valid.sizing.cores,
        memory_gib: valid.sizing.memory_gib,
        cents_per_hour: valid.sizing.cents_per_hour,
        max_spend_cents: request.max_spend_cents,
        spent_cents: 0,
        image: request
            .image
            .clone()
            .unwrap_or_else(|| div_spec::DEFAULT_IMAGE.to_owned()),
        env: request.env.clone(),
        checks: valid.checks,
        verdicts: Vec::new(),
        exit_code: None,
        reason: None,
        code: request.code.clone(),
        telemetry_layout: request.telemetry_layout.clone(),
        created_at: clock::rfc3339(now_ms()),
        started_at: None,
        ended_at: None,
        duration_seconds: 0,
        log_bytes: 0,
        model,
        placed_by: None,
        extra: Default::default(),
    }
}
