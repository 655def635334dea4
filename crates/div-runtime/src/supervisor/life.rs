//! One run's life: the supervisor's body (`supervise`), which takes the run through its phases
//! (prepare, launch, watch, stop, end) and writes its end last.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use super::lock::{self, ABANDONED_FILE, UNSENT_FILE};
use super::spec::{EndRecord, RESERVE_BYTES, RunSpec, early_end, write_json_atomic};
use super::{end, launch, prepare, stop, tree, watch};
use div_api::RunStatus;

use crate::clock::now_ms;
use crate::{phases, sys};

/// The body of `div __supervise <run-dir>` and `div-supervise <run-dir>`.
pub fn supervise(run_dir: &Path) -> i32 {
    let began = phases::now_us();
    sys::new_session();
    sys::catch_stop_signals();
    // One supervisor per run, and none for a run already ended or given up on: held until
    // this process exits, after its end is written.
    // (A lock file that cannot be made at all, the run goes on without it, as before locks.)
    let _claim = match lock::claim_waiting(run_dir, std::time::Duration::from_secs(1)) {
        Some(lock) => lock,
        None => return 0,
    };
    if run_dir.join(ABANDONED_FILE).exists() || run_dir.join("end.json").exists() {
        return 0;
    }
    phases::mark_at(run_dir, "supervisor", began);
    let spec: RunSpec = match fs::read(run_dir.join("spec.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(spec) => spec,
        Err(e) => {
            let now = now_ms();
            let end = EndRecord {
                status: RunStatus::Failed,
                exit_code: None,
                reason: Some(format!("the supervisor could not read its spec: {e}")),
                started_ms: now,
                ended_ms: now,
                duration_seconds: 0,
                spent_cents: 0,
                verdicts: Vec::new(),
            };
            let _ = write_json_atomic(&run_dir.join("end.json"), &end);
            return 1;
        }
    };
    let mut spec = spec;
    if let Some(at) = spec.secrets_at.take() {
        let from_server = spec.secrets_file.is_none();
        let read = match spec.secrets_file.take() {
            Some(file) => File::open(&file).and_then(read_secrets),
            None => read_secrets(io::stdin()),
        };
        match read {
            Ok(secrets) => {
                let at = at.min(spec.env.len());
                spec.env.splice(at..at, secrets);
            }
            // Not a byte: the server was killed between starting this supervisor and sending
            // the secrets (it always sends at least `[]`). Nothing has run: the run is left,
            // marked, for the restarted server to place again with its secrets.
            Err(e) if from_server && e.kind() == io::ErrorKind::UnexpectedEof => {
                let _ = fs::write(run_dir.join(UNSENT_FILE), b"");
                return 0;
            }
            Err(e) => {
                let end = early_end(&spec, format!("the run's secrets could not be read: {e}"));
                let _ = write_json_atomic(&run_dir.join("end.json"), &end);
                return 1;
            }
        }
    }
    // Room for the end: released (and the write retried) if the disk fills up.
    let reserve = run_dir.join("end.reserve");
    let _ = fs::write(&reserve, vec![0u8; RESERVE_BYTES]);
    phases::mark(run_dir, "secrets");
    let (end, places) = run(run_dir, &spec);
    let written = write_json_atomic(&run_dir.join("end.json"), &end).or_else(|_| {
        let _ = fs::remove_file(&reserve);
        write_json_atomic(&run_dir.join("end.json"), &end)
    });
    phases::mark(run_dir, "end");
    // Its places let go once its end is known (the supervisor holds the run's lock until
    // they are, and exits then).
    if let Some(places) = places {
        places.let_go(run_dir, &spec);
        phases::mark(run_dir, "let-go");
    }
    let _ = fs::remove_file(&reserve);
    match written {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// The most of the secrets read: far past what the server lets be set.
const SECRETS_MAX_BYTES: u64 = 64 << 20;

/// The run's secrets, as JSON `[["NAME", "value"], …]`, from the server's pipe (or a Slurm
/// node's file).
/// Nothing at all (`UnexpectedEof`) is told apart from bytes that are not secrets.
pub fn read_secrets(from: impl io::Read) -> io::Result<Vec<(String, String)>> {
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(from, SECRETS_MAX_BYTES), &mut bytes)?;
    if bytes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "no secrets were sent",
        ));
    }
    serde_json::from_slice(&bytes).map_err(io::Error::other)
}

/// Runs the run described by `spec` in `run_dir` through its phases to its end: its end
/// record, and the places to let go once it is written (none where they are let go already).
pub(super) fn run(run_dir: &Path, spec: &RunSpec) -> (EndRecord, Option<end::Places>) {
    let mut room = match prepare::prepare(run_dir, spec) {
        Ok(room) => room,
        Err(end) => return (end, None),
    };
    phases::mark(run_dir, "mounts");
    let mut run = match launch::launch(spec, &mut room) {
        Ok(run) => run,
        Err(end) => {
            room.let_go(run_dir);
            return (end, None);
        }
    };
    phases::mark(run_dir, "spawned");
    let mut watch = watch::Watch::new(spec, &mut room);
    let stopped = watch.until_stopped(run_dir, spec, &mut room, &run);
    phases::mark(run_dir, "exited");
    let kill_at = stop::kill_at(&stopped, spec, &watch);
    let killed_for_memory =
        kill_at.is_some_and(|at| stop::grace(spec, &mut room, &run, &mut watch, &stopped, at));
    let status = tree::kill_tree(&mut run.child, &room.cgroups, run.contained);
    if matches!(stopped, watch::Stopped::Gone) {
        // Nowhere to write its end: what it held is let go, and nothing more is done.
        room.let_go(run_dir);
        return (
            early_end(spec, "the run's directory is gone".to_owned()),
            None,
        );
    }
    let (end, places) = end::record(
        run_dir,
        spec,
        room,
        stopped,
        status,
        kill_at.is_some(),
        killed_for_memory,
    );
    (end, Some(places))
}
