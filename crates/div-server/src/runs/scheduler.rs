//! The scheduler: one pass records runs that ended (or whose supervisor was lost), then
//! starts queued runs, strictly in order, while their GPUs and cores are free. The same pass
//! reconciles after a restart.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use div_api::{RunQueue, RunStatus};

use crate::executor::Liveness;
use crate::runs::admission::admit;
use crate::runs::fair;
use crate::server::Server;
use crate::store::{RunInternal, RunRecord, StoreError};
use crate::{org, rules};
use div_runtime::clock::{self, now_ms};
use div_runtime::decision::{self, Decision, Limit, Why};
use div_runtime::supervisor::{self, EndRecord};

/// The reason of a run whose supervisor vanished without writing its end.
pub(crate) const LOST_REASON: &str = "the supervisor was lost";

/// One pass of the scheduler; whether any run changed.
pub(crate) fn tick(server: &Server) -> Result<bool, StoreError> {
    let _guard = server.lock();
    let mut changed = false;
    let mut running = Vec::new();
    // Runs handed to their executor, those still in its own queue (Slurm's) included.
    let (launched, queued): (Vec<RunRecord>, Vec<RunRecord>) = server
        .store
        .runs_with_status(RunStatus::Queued)?
        .into_iter()
        .partition(RunRecord::launched);
    for record in server
        .store
        .runs_with_status(RunStatus::Running)?
        .into_iter()
        .chain(launched)
    {
        // One run's end that cannot be recorded (a full disk) holds up no other run's.
        match check_running(server, record.clone()) {
            Ok(Some(still)) => running.push(still),
            Ok(None) => changed = true,
            Err(e) => {
                server.warn_once(&format!(
                    "the end of run {} could not be recorded yet: {}",
                    record.run.id,
                    div_api::error_chain(&e)
                ));
                running.push(record);
            }
        }
    }
    crate::state_reserve::keep(&server.home);
    if let Some(usage) = server.org_usage()?.filter(|u| u.reached) {
        // The org's limit is reached: every running run is stopped, and the queue waits.
        let reason = usage.reason();
        for record in &running {
            stop_by_org(server, record, &reason);
        }
        *server.queue() = queued
            .iter()
            .zip(0u32..)
            .map(|(record, ahead)| {
                let wait = RunQueue {
                    reason: format!("waiting: the {reason}"),
                    ahead,
                    extra: Default::default(),
                };
                (record.run.id.clone(), wait)
            })
            .collect();
        return Ok(changed);
    }
    // Members take turns; a member at its own limit has its runs stopped and its queue held.
    let turns = fair::turns(server, &running, queued)?;
    for (record, reason) in &turns.stop {
        stop_by_org(server, record, reason);
    }
    let (started, mut waiting) = admit(server, &running, turns.queued, true)?;
    waiting.extend(turns.held);
    executor_waits(server, &running, &mut waiting);
    *server.queue() = waiting;
    Ok(changed || started)
}

/// Why each run that waits in its executor's own queue waits, in that one's words.
fn executor_waits(server: &Server, running: &[RunRecord], waiting: &mut HashMap<String, RunQueue>) {
    for record in running.iter().filter(|r| r.run.status == RunStatus::Queued) {
        let dir = server.home.run_dir(&record.run.id);
        let reason = server
            .executor
            .waiting(&dir, record.internal.handle.as_ref())
            .unwrap_or_else(|| "waiting to start".to_owned());
        waiting.insert(
            record.run.id.clone(),
            RunQueue {
                reason,
                ahead: 0,
                extra: Default::default(),
            },
        );
    }
}

/// Tells a running run's supervisor it is stopped by the org, and why (`run-dir/stop-org`),
/// then stops it the executor's way. Said again on each pass until its end is recorded.
fn stop_by_org(server: &Server, record: &RunRecord, reason: &str) {
    let dir = server.home.run_dir(&record.run.id);
    let said = dir.join(org::STOP_FILE);
    // Written whole, then renamed into place: a supervisor reading it as it was being written
    // would have found it empty and said the org stopped the run for no reason.
    let partial = dir.join(format!("{}.partial", org::STOP_FILE));
    if fs::write(&partial, reason)
        .and_then(|()| fs::rename(&partial, &said))
        .is_err()
    {
        return;
    }
    let _ = server.executor.stop(&dir, record.internal.handle.as_ref());
}

/// Says why each queued run waits, as the next pass would find it, without starting any:
/// a run placed answers with its reason at once. Called with [`Server::lock`] held.
pub(crate) fn refresh_queue(server: &Server) -> Result<(), StoreError> {
    let (launched, queued): (Vec<RunRecord>, Vec<RunRecord>) = server
        .store
        .runs_with_status(RunStatus::Queued)?
        .into_iter()
        .partition(RunRecord::launched);
    let mut running = server.store.runs_with_status(RunStatus::Running)?;
    running.extend(launched);
    let turns = fair::turns(server, &running, queued)?;
    let (_, mut waiting) = admit(server, &running, turns.queued, false)?;
    waiting.extend(turns.held);
    executor_waits(server, &running, &mut waiting);
    *server.queue() = waiting;
    Ok(())
}

/// Records the end of a running run when it has one; `Some` while it goes on.
fn check_running(server: &Server, mut record: RunRecord) -> Result<Option<RunRecord>, StoreError> {
    let dir = server.home.run_dir(&record.run.id);
    if server.executor.decides_limits() {
        watch_limits(server, &mut record, &dir)?;
    }
    let end_path = dir.join("end.json");
    // The supervisor writes its end atomically, so one that is there but does not parse was
    // damaged afterwards: it is said to be unreadable, never read as "the supervisor was lost".
    let read_end = || -> Option<EndRecord> {
        let bytes = fs::read(&end_path).ok()?;
        Some(serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            unreadable_end(&bytes, &e.to_string(), &record.run, &record.internal)
        }))
    };
    let end = match read_end() {
        Some(end) => Some(end),
        None => match server
            .executor
            .liveness(&dir, record.internal.handle.as_ref())
        {
            Liveness::Alive => None,
            // It may have written its end just after the first look.
            Liveness::Gone => match read_end() {
                Some(end) => Some(end),
                // Its supervisor left having run nothing, its secrets never sent (the server
                // was killed between starting it and sending them): placed again, as it was.
                None if dir.join(supervisor::UNSENT_FILE).exists() => {
                    let _ = fs::remove_file(dir.join(supervisor::UNSENT_FILE));
                    record.run.status = RunStatus::Queued;
                    record.run.started_at = None;
                    record.internal = RunInternal::default();
                    server.store.update_run(&record)?;
                    return Ok(None);
                }
                None => Some(lost(server, &record)),
            },
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
    // Recorded even on a full disk: the room kept for the state database is let go first.
    crate::state_reserve::with_room(&server.home, || server.store.update_run(&record))?;
    div_runtime::phases::mark(&dir, "recorded");
    Ok(None)
}

/// For a run whose limits the control plane decides (`Executor::decides_limits`: a run on
/// several nodes): notes when its executor says it started (it runs, and is billed, from
/// then), and decides, once for the whole run, the end a lost part, its ceiling or its time
/// limit calls for (`div_runtime::decision`), which every part then obeys at the same moment.
fn watch_limits(server: &Server, record: &mut RunRecord, dir: &Path) -> Result<(), StoreError> {
    if record.internal.started_ms.is_none()
        && let Some(started) = server.executor.started_ms(dir)
    {
        record.internal.started_ms = Some(started);
        record.run.status = RunStatus::Running;
        record.run.started_at = Some(clock::rfc3339(started));
        server.store.update_run(record)?;
    }
    let Some(started) = record.internal.started_ms else {
        return Ok(());
    };
    if decision::read(dir).is_some() || dir.join("end.json").exists() {
        return Ok(());
    }
    // A record of an older server has its limits only in the run's spec.
    let spec = || -> Option<supervisor::RunSpec> {
        serde_json::from_slice(&fs::read(dir.join("spec.json")).ok()?).ok()
    };
    let (grace, max_seconds) = match (record.internal.grace_seconds, record.internal.max_seconds) {
        (Some(g), Some(m)) => (g, m),
        _ => spec().map_or(
            (rules::DEFAULT_STOP_GRACE_SECONDS, rules::MAX_RUN_SECONDS),
            |s| (s.stop_grace_seconds, s.max_seconds),
        ),
    };
    let run = &record.run;
    let now = now_ms();
    let elapsed = now.saturating_sub(started);
    let grace_ms = grace.saturating_mul(1000);
    let ceiling = Limit::ceiling(run.cents_per_hour, run.max_spend_cents, grace);
    let day = Limit::new(max_seconds, grace);
    let decided = if let Some(lost) = server.executor.lost(dir) {
        // The rest of it gets its grace to save what it can, unbilled: the run ends now.
        Some(Decision {
            why: Why::Lost,
            line: decision::told_line(
                &format!("{lost}; the run cannot go on without it"),
                grace_ms,
            ),
            reason: Some(lost),
            decided_ms: now,
            kill_at_ms: now.saturating_add(grace_ms),
            spend_until_ms: Some(now),
        })
    } else if let Some(at) = ceiling.filter(|at| elapsed >= at.told_ms) {
        let left = at.limit_ms.saturating_sub(elapsed);
        Some(Decision {
            why: Why::Ceiling,
            line: decision::told_line(
                &decision::ceiling_words(run.max_spend_cents.unwrap_or_default(), left),
                left,
            ),
            reason: None,
            decided_ms: now,
            kill_at_ms: started.saturating_add(at.limit_ms),
            spend_until_ms: None,
        })
    } else if elapsed >= day.told_ms {
        let left = day.limit_ms.saturating_sub(elapsed);
        Some(Decision {
            why: Why::TimeLimit,
            line: decision::told_line(&decision::time_limit_line_words(max_seconds, left), left),
            reason: Some(decision::time_limit_reason(max_seconds)),
            decided_ms: now,
            kill_at_ms: started.saturating_add(day.limit_ms),
            spend_until_ms: None,
        })
    } else {
        None
    };
    if let Some(decided) = decided {
        // Not written (a full disk): decided again on the next pass.
        let _ = decision::decide(dir, &decided);
    }
    Ok(())
}

/// The end of a run whose `end.json` is there but could not be parsed (`error`): what can
/// still be found in its bytes (the exit code, the times, the spend) is kept, and the reason
/// says the record was unreadable.
fn unreadable_end(
    bytes: &[u8],
    error: &str,
    run: &div_api::Run,
    internal: &RunInternal,
) -> EndRecord {
    let text = String::from_utf8_lossy(bytes);
    let number = |key: &str| -> Option<i64> {
        let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
        let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    let now = now_ms();
    let started_ms = number("started_ms")
        .and_then(|n| u64::try_from(n).ok())
        .or(internal.started_ms)
        .unwrap_or(now);
    let ended_ms = number("ended_ms")
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(now);
    let exit_code = number("exit_code").and_then(|n| i32::try_from(n).ok());
    let duration_seconds = ended_ms.saturating_sub(started_ms) / 1000;
    let found = match exit_code {
        Some(code) => format!("; its exit code, {code}, was found in it"),
        None => "; no exit code could be found in it".to_owned(),
    };
    EndRecord {
        status: RunStatus::Failed,
        exit_code,
        reason: Some(format!(
            "the run's end record (runs/{}/end.json) could not be read: {error}{found}",
            run.id
        )),
        started_ms,
        ended_ms,
        duration_seconds,
        // Metered from its times when the record does not say.
        spent_cents: number("spent_cents").unwrap_or_else(|| {
            rules::charge(run.cents_per_hour, duration_seconds, run.max_spend_cents)
        }),
        verdicts: Vec::new(),
    }
}

/// The end of a run whose supervisor is gone without writing one: failed, charged until now,
/// and what it left where it ran goes with it, so no orphan survives.
fn lost(server: &Server, record: &RunRecord) -> EndRecord {
    server.executor.reclaim(&record.run.id);
    // Its own disk, let go with its supervisor's mounts: the space is free again.
    let _ = fs::remove_file(
        server
            .home
            .run_dir(&record.run.id)
            .join(div_runtime::scratch::IMAGE),
    );
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex};

    use div_api::{Run, RunStatus};

    use super::{LOST_REASON, tick};
    use crate::executor::{Executor, Handle, Launch, Liveness};
    use crate::inventory::Inventory;
    use crate::server::Server;
    use crate::store::{Placed, RunInternal, RunRecord, Store};
    use div_runtime::supervisor::{EndRecord, RunSpec};

    /// What the fake executor saw, and what it says.
    #[derive(Debug, Default)]
    struct Seen {
        started: Vec<PathBuf>,
        gone: Vec<u32>,
        reclaimed: Vec<String>,
        refuse: bool,
    }

    /// An executor that starts nothing: it records, and says what the test tells it.
    #[derive(Debug, Clone, Default)]
    struct Fake(Arc<Mutex<Seen>>);

    impl Fake {
        fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
            self.0.lock().unwrap()
        }
    }

    impl Executor for Fake {
        fn start(&self, launch: &Launch<'_>) -> Result<Handle, crate::executor::StartError> {
            let mut seen = self.seen();
            if seen.refuse {
                return Err(crate::executor::StartError::Submit(
                    "no room on the fake".to_owned(),
                ));
            }
            assert!(launch.run_dir.join("spec.json").is_file());
            seen.started.push(launch.run_dir.to_owned());
            Ok(Handle::Process(1000 + seen.started.len() as u32))
        }
        fn stop(&self, _run_dir: &Path, _handle: Option<&Handle>) -> std::io::Result<()> {
            Ok(())
        }
        fn liveness(&self, _run_dir: &Path, handle: Option<&Handle>) -> Liveness {
            match handle {
                Some(h) if h.process().is_some_and(|p| !self.seen().gone.contains(&p)) => {
                    Liveness::Alive
                }
                _ => Liveness::Gone,
            }
        }
        fn reclaim(&self, run_id: &str) {
            self.seen().reclaimed.push(run_id.to_owned());
        }
        fn describe(&self) -> String {
            "fake".to_owned()
        }
    }

    fn server(dir: &Path, fake: &Fake) -> Server {
        Server::new(
            dir.to_owned(),
            Store::open(&dir.join("state.db")).unwrap(),
            Inventory {
                host_cores: 4,
                host_memory_gib: 16,
                gpus: Vec::new(),
                emulated: false,
                prices: Default::default(),
            },
            false,
            Default::default(),
            Box::new(fake.clone()),
            crate::images::Images::open(dir, Default::default()).unwrap(),
        )
    }

    /// Queues a CPU run of `cores` cores named `name`.
    fn queue(server: &Server, name: &str, cores: u32) -> String {
        let id = format!("r_{name}");
        let run: Run = serde_json::from_value(serde_json::json!({
            "id": id, "name": name, "project": "p", "status": "queued",
            "entrypoint": "true", "command": "true", "sku": "cpu", "gpus": 0,
            "cores": cores, "memory_gib": 1, "cents_per_hour": 3600, "spent_cents": 0,
            "image": div_spec::DEFAULT_IMAGE, "created_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        let record = RunRecord {
            run,
            internal: RunInternal::default(),
        };
        assert!(matches!(
            server.store.place_run(name, name, &record).unwrap(),
            Placed::New
        ));
        id
    }

    fn record(server: &Server, id: &str) -> RunRecord {
        server.store.get_run(id).unwrap().unwrap()
    }

    #[test]
    fn queued_runs_start_in_order_and_one_that_does_not_fit_holds_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake::default();
        let server = server(dir.path(), &fake);
        let a = queue(&server, "a", 2);
        let b = queue(&server, "b", 3);
        let c = queue(&server, "c", 1);
        assert!(tick(&server).unwrap());

        let started = record(&server, &a);
        assert_eq!(started.run.status, RunStatus::Running);
        assert_eq!(started.internal.handle, Some(Handle::Process(1001)));
        assert_eq!(started.internal.cores, [0, 1]);
        let spec: RunSpec = serde_json::from_slice(
            &std::fs::read(server.home.run_dir(&a).join("spec.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(spec.run_id, a);
        assert_eq!(spec.cores, [0, 1]);
        // `b` needs 3 of the 2 free cores; `c` would fit but waits behind it.
        assert_eq!(record(&server, &b).run.status, RunStatus::Queued);
        assert_eq!(record(&server, &c).run.status, RunStatus::Queued);
        assert_eq!(fake.seen().started, [server.home.run_dir(&a)]);
    }

    #[test]
    fn each_queued_run_says_why_it_waits_and_how_many_are_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake::default();
        let server = server(dir.path(), &fake);
        let a = queue(&server, "a", 3);
        let b = queue(&server, "b", 2);
        let c = queue(&server, "c", 1);
        // Before any pass: what placing answers with.
        super::refresh_queue(&server).unwrap();
        assert!(!server.queue().contains_key(&a), "a fits: it does not wait");
        assert_eq!(server.queue()[&b].reason, "waiting for 2 cores");
        assert_eq!(server.queue()[&b].ahead, 0);
        assert_eq!(
            fake.seen().started.len(),
            0,
            "nothing is started by saying why"
        );
        tick(&server).unwrap();
        assert_eq!(record(&server, &a).run.status, RunStatus::Running);
        let b_wait = server.queue()[&b].clone();
        let c_wait = server.queue()[&c].clone();
        assert_eq!(b_wait.reason, "waiting for 2 cores");
        // `c` would fit on the one free core, but runs start in order.
        assert_eq!(
            (c_wait.reason.as_str(), c_wait.ahead),
            ("waiting its turn, 1 run ahead", 1)
        );
        // The API shows it on the queued run, and not once it runs.
        let shown = crate::runs::view(&server, &record(&server, &c));
        assert_eq!(shown.queue(), Some(c_wait));
        assert!(
            crate::runs::view(&server, &record(&server, &a))
                .queue()
                .is_none()
        );
        assert_eq!(
            crate::runs::admission::wait_reason("h100", Some(8), Some(8), 2),
            "waiting for 8 H100s and 8 cores, 2 runs ahead"
        );
    }

    #[test]
    fn a_run_whose_supervisor_is_gone_without_an_end_is_lost_and_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake::default();
        let server = server(dir.path(), &fake);
        let a = queue(&server, "a", 3);
        let b = queue(&server, "b", 3);
        tick(&server).unwrap();
        assert_eq!(record(&server, &b).run.status, RunStatus::Queued);

        fake.seen().gone.push(1001);
        assert!(tick(&server).unwrap());
        let lost = record(&server, &a);
        assert_eq!(lost.run.status, RunStatus::Failed);
        assert_eq!(lost.run.reason.as_deref(), Some(LOST_REASON));
        assert_eq!(fake.seen().reclaimed, [a]);
        // Its cores are free again: the next run starts in the same pass.
        assert_eq!(record(&server, &b).run.status, RunStatus::Running);
    }

    #[test]
    fn the_end_the_supervisor_wrote_is_the_truth_whatever_the_executor_says() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake::default();
        let server = server(dir.path(), &fake);
        let a = queue(&server, "a", 1);
        tick(&server).unwrap();
        let end = EndRecord {
            status: RunStatus::Succeeded,
            exit_code: Some(0),
            reason: None,
            started_ms: 1_700_000_000_000,
            ended_ms: 1_700_000_007_000,
            duration_seconds: 7,
            spent_cents: 7,
            verdicts: Vec::new(),
        };
        div_runtime::supervisor::write_json_atomic(&server.home.run_dir(&a).join("end.json"), &end)
            .unwrap();
        // The fake still says the supervisor is alive; the end on disk wins.
        assert!(tick(&server).unwrap());
        let ended = record(&server, &a);
        assert_eq!(ended.run.status, RunStatus::Succeeded);
        assert_eq!(ended.run.spent_cents, 7);
        assert_eq!(ended.run.duration_seconds, 7);
        assert_eq!(
            ended.run.ended_at.as_deref(),
            Some("2023-11-14T22:13:27.000Z")
        );
        assert!(fake.seen().reclaimed.is_empty());
    }

    /// Round-robin between members: one member's many queued runs put one run ahead of
    /// another member's one, never all of them; and a member at its own limit holds no one.
    #[test]
    fn a_members_many_queued_runs_do_not_starve_anothers_one() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake::default();
        let server = server(dir.path(), &fake);
        let by = |id: &str, member: &str| {
            let mut r = record(&server, id);
            r.run.placed_by = Some(member.to_owned());
            server.store.update_run(&r).unwrap();
        };
        // Alice's first run takes every core; then 20 more of hers, then Bob's one.
        let first = queue(&server, "a0", 4);
        by(&first, "alice");
        let alices: Vec<String> = (1..=20)
            .map(|i| queue(&server, &format!("a{i}"), 4))
            .collect();
        for id in &alices {
            by(id, "alice");
        }
        let bobs = queue(&server, "b0", 4);
        by(&bobs, "bob");
        tick(&server).unwrap();
        assert_eq!(record(&server, &first).run.status, RunStatus::Running);
        let queue = server.queue().clone();
        // Alice's a0 runs; Bob's turn comes next, before her 20 others.
        assert_eq!(
            queue[&bobs].ahead, 0,
            "bob waits for cores, behind no run of alice's"
        );
        assert_eq!(queue[&alices[0]].ahead, 1);
        assert_eq!(queue[&alices[19]].ahead, 20);

        // Alice reaches a limit of her own: her queue waits, saying so, and holds no one.
        let added = crate::members::add(
            &server.store,
            &crate::members::Actor::owner("test"),
            &div_api::CreateMember {
                name: "alice".into(),
                role: div_api::Role::Member,
                kind: div_api::MemberKind::User,
                slurm_account: None,
            },
        )
        .unwrap();
        crate::members::set_limit(&server.store, &added.member.name, Some(0)).unwrap();
        fake.seen().gone.push(1001);
        tick(&server).unwrap();
        assert_eq!(record(&server, &bobs).run.status, RunStatus::Running);
        let queue = server.queue().clone();
        assert_eq!(
            queue[&alices[0]].reason,
            "waiting: `alice`'s monthly limit of $0.00 reached"
        );
    }

    #[test]
    fn a_run_its_executor_cannot_start_fails_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake::default();
        fake.seen().refuse = true;
        let server = server(dir.path(), &fake);
        let a = queue(&server, "a", 1);
        assert!(tick(&server).unwrap());
        let failed = record(&server, &a);
        assert_eq!(failed.run.status, RunStatus::Failed);
        assert_eq!(
            failed.run.reason.as_deref(),
            Some("the run could not start: no room on the fake")
        );
        assert_eq!(failed.internal.handle, None);
    }
}
