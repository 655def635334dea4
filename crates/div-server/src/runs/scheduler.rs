//! The scheduler: one pass records runs that ended (or whose supervisor was lost), then
//! starts queued runs, strictly in order, while their GPUs and cores are free. The same pass
//! reconciles after a restart.

use std::collections::BTreeSet;
use std::fs;

use div_api::RunStatus;

use crate::clock::{self, now_ms};
use crate::executor::Liveness;
use crate::rules;
use crate::runs::launcher;
use crate::server::Server;
use crate::store::{RunRecord, StoreError};
use crate::supervisor::EndRecord;

/// The reason of a run whose supervisor vanished without writing its end.
pub(crate) const LOST_REASON: &str = "the supervisor was lost";

/// One pass of the scheduler; whether any run changed.
pub(crate) fn tick(server: &Server) -> Result<bool, StoreError> {
    let _guard = server.lock();
    let mut changed = false;
    let mut running = Vec::new();
    for record in server.store.runs_with_status(RunStatus::Running)? {
        match check_running(server, record)? {
            Some(still) => running.push(still),
            None => changed = true,
        }
    }
    let mut busy_cores: BTreeSet<usize> = BTreeSet::new();
    let mut busy_gpus: BTreeSet<(String, u32)> = BTreeSet::new();
    for r in &running {
        busy_cores.extend(r.internal.cores.iter().copied());
        busy_gpus.extend(r.internal.gpus.iter().map(|g| (r.run.sku.clone(), *g)));
    }
    for mut record in server.store.runs_with_status(RunStatus::Queued)? {
        let free_cores: Vec<usize> = (0..server.inventory.host_cores as usize)
            .filter(|c| !busy_cores.contains(c))
            .collect();
        let need_cores = record.run.cores as usize;
        let free_gpus: Vec<u32> = server
            .inventory
            .group(&record.run.sku)
            .map(|g| {
                g.indices
                    .iter()
                    .copied()
                    .filter(|i| !busy_gpus.contains(&(record.run.sku.clone(), *i)))
                    .collect()
            })
            .unwrap_or_default();
        let need_gpus = record.run.gpus as usize;
        // Strictly in order: a run that does not fit holds the ones behind it.
        if free_cores.len() < need_cores || free_gpus.len() < need_gpus {
            break;
        }
        let cores: Vec<usize> = free_cores[..need_cores].to_vec();
        let gpus: Vec<u32> = free_gpus[..need_gpus].to_vec();
        changed = true;
        match launcher::launch(server, &mut record, &cores, &gpus) {
            Ok(()) => {
                busy_cores.extend(cores);
                busy_gpus.extend(gpus.into_iter().map(|g| (record.run.sku.clone(), g)));
            }
            Err(e) => {
                record.run.status = RunStatus::Failed;
                record.run.reason = Some(format!("the run could not start: {e}"));
                record.run.ended_at = Some(clock::now_rfc3339());
                server.store.update_run(&record)?;
            }
        }
    }
    Ok(changed)
}

/// Records the end of a running run when it has one; `Some` while it goes on.
fn check_running(server: &Server, mut record: RunRecord) -> Result<Option<RunRecord>, StoreError> {
    let dir = server.run_dir(&record.run.id);
    let end_path = dir.join("end.json");
    let read_end = || -> Option<EndRecord> {
        fs::read(&end_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    };
    let end = match read_end() {
        Some(end) => Some(end),
        None => match server
            .executor
            .liveness(&dir, record.internal.handle.as_ref())
        {
            Liveness::Alive => None,
            // It may have written its end just after the first look.
            Liveness::Gone => Some(read_end().unwrap_or_else(|| lost(server, &record))),
        },
    };
    let Some(end) = end else {
        return Ok(Some(record));
    };
    let run = &mut record.run;
    run.status = end.status;
    run.exit_code = end.exit_code;
    run.reason = end.reason;
    run.started_at = Some(clock::rfc3339(end.started_ms));
    run.ended_at = Some(clock::rfc3339(end.ended_ms));
    run.duration_seconds = end.duration_seconds;
    run.spent_cents = end.spent_cents;
    run.verdicts = end.verdicts;
    run.log_bytes = fs::metadata(dir.join("log")).map_or(0, |m| m.len());
    server.store.update_run(&record)?;
    Ok(None)
}

/// The end of a run whose supervisor is gone without writing one: failed, charged until now,
/// and what it left where it ran goes with it, so no orphan survives.
fn lost(server: &Server, record: &RunRecord) -> EndRecord {
    server.executor.reclaim(&record.run.id);
    let now = now_ms();
    let started = record.internal.started_ms.unwrap_or(now);
    let seconds = now.saturating_sub(started) / 1000;
    let spent = rules::charge(
        record.run.cents_per_hour,
        seconds,
        record.run.max_spend_cents,
    );
    EndRecord {
        status: RunStatus::Failed,
        exit_code: None,
        reason: Some(LOST_REASON.to_owned()),
        started_ms: started,
        ended_ms: now,
        duration_seconds: seconds,
        spent_cents: spent,
        verdicts: Vec::new(),
    }
}
