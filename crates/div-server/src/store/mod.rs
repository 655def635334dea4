//! The SQLite store: runs, volumes, blobs, trees, secrets and idempotency keys.
//!
//! Every call is blocking: the server calls it from `spawn_blocking`. The database is in WAL
//! mode with a busy timeout, so the supervisor-watching loop and request handlers never see
//! `SQLITE_BUSY`.
//!
//! Models' versions and evaluations are in `models.rs`.
//!
//! Why over 700 lines: some 110 are its tests; the rest is the schema, its migrations and one
//! group of queries per table, each short, which read best side by side.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use div_api::{Run, RunStatus, SecretInfo, Volume};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::executor::Handle;
use div_runtime::clock::now_ms;

mod models;

pub(crate) use models::{Added, VersionRow};

mod team;
pub(crate) use team::{AuditRow, MemberRow, NewMember};

/// The error returned by every [`Store`] operation.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("the state database failed")]
    Sqlite(#[from] rusqlite::Error),
    #[error("a stored record could not be read")]
    Json(#[from] serde_json::Error),
    #[error(
        "the state database is at schema version {found}, newer than this div's {known}: it was written by a newer div; run that div, or give this one another state directory"
    )]
    TooNew { found: i64, known: i64 },
    /// The server is stopping: its database was closed ([`Store::close`]).
    #[error("the state database is closed: the server is stopping")]
    Closed,
}

impl StoreError {
    /// Whether SQLite refused because the disk under the database is full.
    pub(crate) fn is_disk_full(&self) -> bool {
        matches!(
            self,
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::DiskFull
        )
    }

    /// Whether SQLite refused a row because a `UNIQUE` column already holds its value
    /// (matched by SQLite's extended code, `SQLITE_CONSTRAINT_UNIQUE`).
    pub(crate) fn is_unique_violation(&self) -> bool {
        matches!(
            self,
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
                if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
        )
    }
}

/// What the server keeps about a run beyond the API's [`Run`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RunInternal {
    /// Where its executor started its supervisor, once launched (stored as `pid`).
    #[serde(default, rename = "pid")]
    pub(crate) handle: Option<Handle>,
    /// The host cores the scheduler gave it.
    #[serde(default)]
    pub(crate) cores: Vec<usize>,
    /// The GPU indices the scheduler gave it.
    #[serde(default)]
    pub(crate) gpus: Vec<u32>,
    /// When the command was started, in milliseconds since the epoch; for a run that waits
    /// in its executor's queue (Slurm's), when that says it started, and `None` until then.
    #[serde(default)]
    pub(crate) started_ms: Option<u64>,
    /// Handed to its executor: a run still queued with this set waits in the executor's own
    /// queue and is never started a second time (a running one always was).
    #[serde(default)]
    pub(crate) launched: bool,
    /// Its stop grace and time limit, as its spec has them, where the control plane decides
    /// its limits (`Executor::decides_limits`).
    #[serde(default)]
    pub(crate) grace_seconds: Option<u64>,
    #[serde(default)]
    pub(crate) max_seconds: Option<u64>,
    /// The disk it was given, on a filesystem of its own (`scratch`).
    #[serde(default)]
    pub(crate) disk_bytes: Option<u64>,
}

impl RunRecord {
    /// Whether the run was handed to its executor (it may still wait in that one's queue).
    pub(crate) fn launched(&self) -> bool {
        self.run.status == div_api::RunStatus::Running
            || (self.run.status == div_api::RunStatus::Queued && self.internal.launched)
    }
}

/// A run and what the server keeps beside it.
#[derive(Debug, Clone)]
pub(crate) struct RunRecord {
    pub(crate) run: Run,
    pub(crate) internal: RunInternal,
}

/// An evaluation's row: which run judged which version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EvaluationRow {
    pub(crate) id: String,
    pub(crate) run_id: String,
    pub(crate) model: String,
    pub(crate) version: u32,
    pub(crate) digest: String,
    pub(crate) created_at: String,
}

/// An evaluation's columns, in [`EvaluationRow`]'s order.
pub(super) const EVALUATION_COLUMNS: &str = "id, run_id, model, version, digest, created_at";

/// Records an evaluation, in the transaction that places its run (`Store::place_run`).
fn insert_evaluation(
    tx: &rusqlite::Transaction<'_>,
    row: &EvaluationRow,
) -> Result<(), StoreError> {
    tx.execute(
        &format!("INSERT INTO evaluations ({EVALUATION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        params![
            row.id,
            row.run_id,
            row.model,
            row.version,
            row.digest,
            row.created_at
        ],
    )?;
    Ok(())
}

/// What an idempotency key already answered.
#[derive(Debug)]
pub(crate) enum Placed {
    /// A new run.
    New,
    /// The key was seen with the same body: this run.
    Again(Box<RunRecord>),
    /// The key was seen with another body.
    Conflict,
}

#[derive(Debug)]
pub(crate) struct Store {
    /// `None` once closed ([`Store::close`]).
    conn: Mutex<Option<Connection>>,
}

/// The store's connection, held for one call.
struct Conn<'a>(MutexGuard<'a, Option<Connection>>);

impl std::ops::Deref for Conn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        // Made only around a connection that is there ([`Store::conn`]).
        self.0.as_ref().expect("an open connection")
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.0.as_mut().expect("an open connection")
    }
}

/// The migrations, in order: `MIGRATIONS[i]` takes a database at schema version `i` (SQLite's
/// `user_version`) to `i + 1`, in one transaction. A new schema change is a new entry at
/// the end; an entry once released never changes.
///
/// Version 1 is the schema div had before it kept a version: its statements are all
/// `IF NOT EXISTS`, so a state directory made then (at version 0, holding these tables)
/// migrates to version 1 without change, as does a new, empty one.
const MIGRATIONS: &[&str] = &[SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_MODELS, SCHEMA_TEAM];

/// The schema version this div writes.
const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    project TEXT NOT NULL,
    status TEXT NOT NULL,
    run TEXT NOT NULL,
    internal TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    body_hash TEXT NOT NULL,
    run_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS volumes (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS blobs (
    volume TEXT NOT NULL,
    hash TEXT NOT NULL,
    size INTEGER NOT NULL,
    PRIMARY KEY (volume, hash)
);
CREATE TABLE IF NOT EXISTS trees (
    volume TEXT NOT NULL,
    path TEXT NOT NULL,
    digest TEXT NOT NULL,
    files INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (volume, path)
);
CREATE TABLE IF NOT EXISTS secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
";

/// Version 2: when each committed tree was last committed or found held for a run
/// (milliseconds since the epoch; 0 for a tree from before), which code snapshots' retention
/// keeps by (`volumes::retention`).
const SCHEMA_V2: &str = "
ALTER TABLE trees ADD COLUMN used_ms INTEGER NOT NULL DEFAULT 0;
";

/// Version 3: where a blob lives when it is not in the volume's blob folder: the path (in
/// the volume) of a committed tree's file that is the blob, written there once by a staged
/// commit (`volumes::stage`); `NULL` for a blob in the blob folder, as every blob was before.
const SCHEMA_V3: &str = "
ALTER TABLE blobs ADD COLUMN home TEXT;
";

/// Version 4: models' versions (each a committed tree, its digest over its files, numbered
/// from 1 per model) and evaluations (an eval run of a version; what it found is the run's).
const SCHEMA_MODELS: &str = "
CREATE TABLE IF NOT EXISTS model_versions (
    model TEXT NOT NULL,
    version INTEGER NOT NULL,
    digest TEXT NOT NULL,
    volume TEXT NOT NULL,
    path TEXT NOT NULL,
    files INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    created_by TEXT,
    source TEXT,
    PRIMARY KEY (model, version)
);
CREATE TABLE IF NOT EXISTS evaluations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    version INTEGER NOT NULL,
    digest TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS evaluations_of ON evaluations (model, version);
";

/// The team's tables (docs/team.md): its members, each token kept only as a hash of its
/// secret beside its public id, a live member's name unique (a revoked one's may be given
/// again); and the audit log, which SQLite itself keeps append-only (a trigger refuses every
/// `UPDATE` and `DELETE` of it). Runs record who placed them in their JSON (`placed_by`); a
/// run without it was placed by the server's owner.
const SCHEMA_TEAM: &str = "
CREATE TABLE members (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    role TEXT NOT NULL,
    token_id TEXT NOT NULL UNIQUE,
    token_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL,
    last_used_at TEXT,
    revoked_at TEXT,
    monthly_limit_cents INTEGER,
    slurm_account TEXT
);
CREATE UNIQUE INDEX members_live_name ON members (name) WHERE revoked_at IS NULL;
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    member TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    origin TEXT NOT NULL
);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
";

/// Brings the database to [`SCHEMA_VERSION`], or refuses one a newer div wrote.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (version, migration) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(migration)?;
        tx.pragma_update(None, "user_version", version as i64 + 1)?;
        tx.commit()?;
    }
    Ok(())
}

fn row_to_record(run: String, internal: String) -> Result<RunRecord, StoreError> {
    Ok(RunRecord {
        run: serde_json::from_str(&run)?,
        internal: serde_json::from_str(&internal)?,
    })
}

impl Store {
    /// Opens (and creates) the database at `path`, readable by its owner only.
    pub(crate) fn open(path: &Path) -> Result<Store, StoreError> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "cache_size", -32768)?;
        conn.pragma_update(None, "wal_autocheckpoint", 8192)?;
        migrate(&mut conn)?;
        Ok(Store {
            conn: Mutex::new(Some(conn)),
        })
    }

    /// Closes the database now, after the call in progress (if any) ends: its write-ahead
    /// log copied in and emptied, the connection closed, so `state.db` alone holds
    /// everything. Every call after it is [`StoreError::Closed`]. What the server does last
    /// when it stops, before it lets go of its home: a connection closed later (by a task
    /// that outlived the server) would checkpoint and delete a `state.db-wal` that is no
    /// longer its own, the next server's.
    pub(crate) fn close(&self) -> Result<(), StoreError> {
        let mut slot = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let Some(conn) = slot.take() else {
            return Ok(());
        };
        let checkpointed = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(StoreError::from);
        conn.close().map_err(|(_, e)| StoreError::from(e))?;
        checkpointed
    }

    fn conn(&self) -> Result<Conn<'_>, StoreError> {
        // A poisoned lock means a panic mid-call; SQLite's own transaction keeps the data
        // consistent, so carry on with the connection.
        let guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            return Err(StoreError::Closed);
        }
        Ok(Conn(guard))
    }

    /// Inserts `record` under the idempotency `key`, unless the key was seen.
    pub(crate) fn place_run(
        &self,
        key: &str,
        body_hash: &str,
        record: &RunRecord,
    ) -> Result<Placed, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let seen: Option<(String, String)> = tx
            .query_row(
                "SELECT body_hash, run_id FROM idempotency WHERE key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        if let Some((hash, run_id)) = seen {
            if hash != body_hash {
                return Ok(Placed::Conflict);
            }
            let row: Option<(String, String)> = tx
                .query_row(
                    "SELECT run, internal FROM runs WHERE id = ?1",
                    [&run_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((run, internal)) = row {
                return Ok(Placed::Again(Box::new(row_to_record(run, internal)?)));
            }
            return Ok(Placed::Conflict);
        }
        tx.execute(
            "INSERT INTO runs (id, name, project, status, run, internal) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                record.run.id,
                record.run.name,
                record.run.project,
                record.run.status.as_str(),
                serde_json::to_string(&record.run)?,
                serde_json::to_string(&record.internal)?
            ],
        )?;
        tx.execute(
            "INSERT INTO idempotency (key, body_hash, run_id) VALUES (?1, ?2, ?3)",
            params![key, body_hash, record.run.id],
        )?;
        // An eval run's evaluation is recorded with it: never one without the other.
        if let Some(m) = &record.run.model {
            insert_evaluation(
                &tx,
                &EvaluationRow {
                    id: m.evaluation.clone(),
                    run_id: record.run.id.clone(),
                    model: m.name.clone(),
                    version: m.version,
                    digest: m.digest.clone(),
                    created_at: record.run.created_at.clone(),
                },
            )?;
        }
        tx.commit()?;
        Ok(Placed::New)
    }

    /// What the runs placed since `created_from` (RFC 3339, UTC) and ended spent, in cents.
    pub(crate) fn spent_in_ended_runs_since(&self, created_from: &str) -> Result<i64, StoreError> {
        let conn = self.conn()?;
        let spent: i64 = conn.query_row(
            "SELECT COALESCE(SUM(json_extract(run, '$.spent_cents')), 0) FROM runs \
             WHERE status NOT IN ('queued', 'running') AND json_extract(run, '$.created_at') >= ?1",
            [created_from],
            |r| r.get(0),
        )?;
        Ok(spent)
    }

    /// Whether a run has this name.
    pub(crate) fn name_taken(&self, name: &str) -> Result<bool, StoreError> {
        let n: i64 =
            self.conn()?
                .query_row("SELECT COUNT(*) FROM runs WHERE name = ?1", [name], |r| {
                    r.get(0)
                })?;
        Ok(n > 0)
    }

    /// A run by id or name.
    pub(crate) fn get_run(&self, id_or_name: &str) -> Result<Option<RunRecord>, StoreError> {
        let row: Option<(String, String)> = self
            .conn()?
            .query_row(
                "SELECT run, internal FROM runs WHERE id = ?1 OR name = ?1",
                [id_or_name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        row.map(|(run, internal)| row_to_record(run, internal))
            .transpose()
    }

    /// Writes a run's new state.
    pub(crate) fn update_run(&self, record: &RunRecord) -> Result<(), StoreError> {
        self.conn()?.execute(
            "UPDATE runs SET status = ?2, run = ?3, internal = ?4 WHERE id = ?1",
            params![
                record.run.id,
                record.run.status.as_str(),
                serde_json::to_string(&record.run)?,
                serde_json::to_string(&record.internal)?
            ],
        )?;
        Ok(())
    }

    /// Runs with `status`, oldest first.
    pub(crate) fn runs_with_status(&self, status: RunStatus) -> Result<Vec<RunRecord>, StoreError> {
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare("SELECT run, internal FROM runs WHERE status = ?1 ORDER BY seq ASC")?;
        let rows = stmt
            .query_map([status.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<(String, String)>, _>>()?;
        rows.into_iter()
            .map(|(run, internal)| row_to_record(run, internal))
            .collect()
    }

    /// A page of runs, newest first, and the cursor of the next page.
    pub(crate) fn list_runs(
        &self,
        project: Option<&str>,
        status: Option<RunStatus>,
        limit: u32,
        cursor: Option<i64>,
    ) -> Result<(Vec<Run>, Option<i64>), StoreError> {
        self.list_runs_by(project, status, None, limit, cursor)
    }

    /// [`Store::list_runs`], only the runs `placed_by` placed when it is given (`owner` holds
    /// the runs placed before members were recorded).
    pub(crate) fn list_runs_by(
        &self,
        project: Option<&str>,
        status: Option<RunStatus>,
        placed_by: Option<&str>,
        limit: u32,
        cursor: Option<i64>,
    ) -> Result<(Vec<Run>, Option<i64>), StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT seq, run FROM runs
             WHERE (?1 IS NULL OR project = ?1) AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR seq < ?3)
             AND (?5 IS NULL OR COALESCE(json_extract(run, '$.placed_by'), 'owner') = ?5)
             ORDER BY seq DESC LIMIT ?4",
        )?;
        let rows = stmt
            .query_map(
                params![
                    project,
                    status.map(|s| s.as_str()),
                    cursor,
                    i64::from(limit) + 1,
                    placed_by
                ],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let more = rows.len() > limit as usize;
        let mut runs = Vec::new();
        let mut last = None;
        for (seq, run) in rows.into_iter().take(limit as usize) {
            runs.push(serde_json::from_str(&run)?);
            last = Some(seq);
        }
        Ok((runs, if more { last } else { None }))
    }

    /// Makes a volume; returns it and whether it is new.
    pub(crate) fn create_volume(&self, name: &str, now: &str) -> Result<bool, StoreError> {
        let n = self.conn()?.execute(
            "INSERT OR IGNORE INTO volumes (name, created_at) VALUES (?1, ?2)",
            params![name, now],
        )?;
        Ok(n == 1)
    }

    /// Every volume's name and creation time.
    pub(crate) fn volumes(&self) -> Result<Vec<Volume>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare("SELECT name, created_at FROM volumes ORDER BY name")?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Volume {
                    name: r.get(0)?,
                    created_at: r.get(1)?,
                    size_bytes: 0,
                    extra: Default::default(),
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// A volume by name.
    pub(crate) fn volume(&self, name: &str) -> Result<Option<Volume>, StoreError> {
        Ok(self.volumes()?.into_iter().find(|v| v.name == name))
    }

    /// Removes a volume and its records; whether it existed.
    pub(crate) fn delete_volume(&self, name: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let n = tx.execute("DELETE FROM volumes WHERE name = ?1", [name])?;
        tx.execute("DELETE FROM blobs WHERE volume = ?1", [name])?;
        tx.execute("DELETE FROM trees WHERE volume = ?1", [name])?;
        tx.commit()?;
        Ok(n == 1)
    }

    /// Records a verified blob.
    pub(crate) fn add_blob(&self, volume: &str, hash: &str, size: u64) -> Result<(), StoreError> {
        self.conn()?.execute(
            "INSERT OR REPLACE INTO blobs (volume, hash, size) VALUES (?1, ?2, ?3)",
            params![volume, hash, size as i64],
        )?;
        Ok(())
    }

    /// Records verified blobs, all in one transaction.
    pub(crate) fn add_blobs(&self, volume: &str, blobs: &[(&str, u64)]) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT OR REPLACE INTO blobs (volume, hash, size) VALUES (?1, ?2, ?3)",
            )?;
            for (hash, size) in blobs {
                insert.execute(params![volume, hash, *size as i64])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Whether the volume holds each of `hashes`, in order. A cold ship asks this of every
    /// file, 57,000 for a big repository, in each of three requests: asked in one read
    /// transaction per 4,096 (SQLite takes its shared lock once for them, not once a
    /// question), with the statement kept by the connection.
    pub(crate) fn has_blobs(&self, volume: &str, hashes: &[&str]) -> Result<Vec<bool>, StoreError> {
        let mut held = Vec::with_capacity(hashes.len());
        for some in hashes.chunks(4096) {
            let mut conn = self.conn()?;
            let tx = conn.transaction()?;
            {
                let mut query = tx.prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM blobs WHERE volume = ?1 AND hash = ?2)",
                )?;
                for hash in some {
                    held.push(query.query_row(params![volume, hash], |r| r.get::<_, bool>(0))?);
                }
            }
            tx.commit()?;
        }
        Ok(held)
    }

    /// Where the volume holds each of `hashes`, in order: `None` when it does not, `Some(None)`
    /// in its blob folder, `Some(Some(home))` as the committed file at `home`
    /// ([`Store::add_homed_blobs`]). In one read transaction per 4,096, as [`Store::has_blobs`].
    pub(crate) fn blob_homes(
        &self,
        volume: &str,
        hashes: &[&str],
    ) -> Result<Vec<Option<Option<String>>>, StoreError> {
        let mut found = Vec::with_capacity(hashes.len());
        for some in hashes.chunks(4096) {
            let mut conn = self.conn()?;
            let tx = conn.transaction()?;
            {
                let mut query =
                    tx.prepare_cached("SELECT home FROM blobs WHERE volume = ?1 AND hash = ?2")?;
                for hash in some {
                    found.push(
                        query
                            .query_row(params![volume, hash], |r| r.get::<_, Option<String>>(0))
                            .optional()?,
                    );
                }
            }
            tx.commit()?;
        }
        Ok(found)
    }

    /// Records blobs written once, each as the committed file at its `home` (a path in the
    /// volume), all in one transaction. A blob the volume already holds keeps the record it
    /// has (another commit wrote it meanwhile): this copy is then only its tree's file.
    pub(crate) fn add_homed_blobs(
        &self,
        volume: &str,
        blobs: &[(String, u64, String)],
    ) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO blobs (volume, hash, size, home) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (hash, size, home) in blobs {
                insert.execute(params![volume, hash, *size as i64, home])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The blobs whose home is under the committed tree at `path` (`code/<id>`): each hash
    /// with its home.
    pub(crate) fn blobs_homed_in(
        &self,
        volume: &str,
        path: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn()?;
        let mut query = conn.prepare_cached(
            "SELECT hash, home FROM blobs WHERE volume = ?1 AND home >= ?2 AND home < ?3",
        )?;
        // Every path strictly under `path/`: from `path/` up to `path0` (`0` follows `/`).
        let (from, to) = (format!("{path}/"), format!("{path}0"));
        let rows = query.query_map(params![volume, from, to], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The blob now lives in the volume's blob folder (its home was removed, a link to it
    /// kept there first).
    pub(crate) fn unhome_blob(&self, volume: &str, hash: &str) -> Result<(), StoreError> {
        self.conn()?.execute(
            "UPDATE blobs SET home = NULL WHERE volume = ?1 AND hash = ?2",
            params![volume, hash],
        )?;
        Ok(())
    }

    /// Whether the volume holds any blob at all (a project's first ship: none).
    pub(crate) fn holds_blobs(&self, volume: &str) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let mut query =
            conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM blobs WHERE volume = ?1)")?;
        Ok(query.query_row(params![volume], |r| r.get(0))?)
    }

    /// Whether the volume holds this blob.
    pub(crate) fn has_blob(&self, volume: &str, hash: &str) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let mut query =
            conn.prepare_cached("SELECT COUNT(*) FROM blobs WHERE volume = ?1 AND hash = ?2")?;
        let n: i64 = query.query_row(params![volume, hash], |r| r.get(0))?;
        Ok(n > 0)
    }

    /// The digest, files and bytes of a committed tree.
    pub(crate) fn tree(
        &self,
        volume: &str,
        path: &str,
    ) -> Result<Option<(String, u64, u64)>, StoreError> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT digest, files, bytes FROM trees WHERE volume = ?1 AND path = ?2",
                params![volume, path],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get::<_, i64>(1)? as u64,
                        r.get::<_, i64>(2)? as u64,
                    ))
                },
            )
            .optional()?)
    }

    /// Records a committed tree, used now.
    pub(crate) fn add_tree(
        &self,
        volume: &str,
        path: &str,
        digest: &str,
        files: u64,
        bytes: u64,
    ) -> Result<(), StoreError> {
        self.conn()?.execute(
            "INSERT OR REPLACE INTO trees (volume, path, digest, files, bytes, used_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![volume, path, digest, files as i64, bytes as i64, now_ms() as i64],
        )?;
        Ok(())
    }

    /// Marks a committed tree used now (a run of it is about to be placed).
    pub(crate) fn touch_tree(&self, volume: &str, path: &str) -> Result<(), StoreError> {
        self.conn()?.execute(
            "UPDATE trees SET used_ms = ?3 WHERE volume = ?1 AND path = ?2",
            params![volume, path, now_ms() as i64],
        )?;
        Ok(())
    }

    /// The trees committed in `volume` at a path under `prefix`, and when each was last used
    /// (ms), most recently used first.
    pub(crate) fn trees_by_use(
        &self,
        volume: &str,
        prefix: &str,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT path, used_ms FROM trees WHERE volume = ?1 AND substr(path, 1, length(?2)) = ?2 ORDER BY used_ms DESC, path ASC",
        )?;
        let rows = stmt
            .query_map(params![volume, prefix], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?
            .collect::<Result<Vec<(String, u64)>, _>>()?;
        Ok(rows)
    }

    /// Forgets a committed tree (its folder is removed by the caller).
    pub(crate) fn remove_tree(&self, volume: &str, path: &str) -> Result<(), StoreError> {
        self.conn()?.execute(
            "DELETE FROM trees WHERE volume = ?1 AND path = ?2",
            params![volume, path],
        )?;
        Ok(())
    }

    /// Forgets a blob (its file is removed by the caller, after).
    pub(crate) fn remove_blob(&self, volume: &str, hash: &str) -> Result<(), StoreError> {
        self.conn()?.execute(
            "DELETE FROM blobs WHERE volume = ?1 AND hash = ?2",
            params![volume, hash],
        )?;
        Ok(())
    }

    /// Sets a secret.
    pub(crate) fn set_secret(&self, name: &str, value: &str, now: &str) -> Result<(), StoreError> {
        self.conn()?.execute(
            "INSERT OR REPLACE INTO secrets (name, value, updated_at) VALUES (?1, ?2, ?3)",
            params![name, value, now],
        )?;
        Ok(())
    }

    /// Secrets' names and dates.
    pub(crate) fn secrets(&self) -> Result<Vec<SecretInfo>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare("SELECT name, updated_at FROM secrets ORDER BY name")?;
        let rows = stmt
            .query_map([], |r| {
                Ok(SecretInfo {
                    name: r.get(0)?,
                    updated_at: r.get(1)?,
                    extra: Default::default(),
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Secrets with their values, by name: what every run's environment gets.
    pub(crate) fn secret_values(&self) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare("SELECT name, value FROM secrets ORDER BY name")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Removes a secret; whether it existed.
    pub(crate) fn delete_secret(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()?
            .execute("DELETE FROM secrets WHERE name = ?1", [name])?
            == 1)
    }
}

/// Opens `home/state.db`, refusing when it is missing, empty or unreadable while `home/runs`
/// or `home/volumes` hold something: a fresh database there would read as "no runs, no
/// volumes, no secrets" and the next writes would bury what the files say.
pub(crate) fn open_with_history(home: &Path) -> Result<Store, crate::ServerError> {
    let path = home.join("state.db");
    let history: Vec<String> = ["runs", "volumes"]
        .into_iter()
        .filter(|d| std::fs::read_dir(home.join(d)).is_ok_and(|mut r| r.next().is_some()))
        .map(|d| format!("{d}/"))
        .collect();
    let lost = |problem: String| crate::ServerError::StateLost {
        path: path.clone(),
        problem,
        history: history.join(" and "),
    };
    if !history.is_empty() {
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(lost("is missing".to_owned()));
            }
            Err(e) => return Err(lost(format!("could not be read ({e})"))),
            Ok(m) if m.len() == 0 => return Err(lost("is empty".to_owned())),
            Ok(_) => {}
        }
    }
    if std::fs::symlink_metadata(&path).is_ok() {
        let wal = home.join("state.db-wal");
        if let Some(problem) = wal_problem(&wal) {
            return Err(crate::ServerError::WalLost { path: wal, problem });
        }
    }
    match Store::open(&path) {
        Ok(store) => Ok(store),
        // A database from a newer div is there and readable: said as such, never as lost.
        Err(e @ StoreError::TooNew { .. }) => Err(crate::ServerError::Store(Box::new(e))),
        Err(e) if !history.is_empty() => Err(lost(format!("could not be read ({e})"))),
        Err(e) => Err(crate::ServerError::Store(Box::new(e))),
    }
}

/// What is wrong with the write-ahead log at `wal`, read before SQLite opens the database:
/// SQLite silently ignores a log whose header is damaged, and every frame from the first
/// damaged one on, then resets the log, so the transactions it held (not yet copied into
/// `state.db`, as after a crash) would be gone without a word. `None` when the log is absent
/// or empty (normal after a clean stop, which checkpoints it), or sound: its header and its
/// frames up to the first invalid one check out, and no frame of this log's generation (its
/// salts) follows an invalid one. A log that merely ends in a torn frame is sound: SQLite
/// drops only that unfinished transaction, as after any crash. The format is SQLite's
/// (<https://www.sqlite.org/fileformat2.html#walformat>).
fn wal_problem(wal: &Path) -> Option<String> {
    use std::io::Read;
    let meta = match std::fs::symlink_metadata(wal) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(format!("could not be read ({e})")),
        Ok(m) => m,
    };
    if !meta.is_file() {
        return Some("is not a regular file".to_owned());
    }
    if meta.len() == 0 {
        return None;
    }
    let mut file = match std::fs::File::open(wal) {
        Ok(f) => std::io::BufReader::with_capacity(1 << 16, f),
        // Gone since it was looked at: the last connection to close copies the log into
        // `state.db` before it deletes it, so nothing of it is lost.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(format!("could not be read ({e})")),
    };
    let mut header = [0u8; 32];
    if let Err(e) = file.read_exact(&mut header) {
        return Some(format!(
            "is damaged: {} bytes, shorter than its 32-byte header ({e})",
            meta.len()
        ));
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let magic = be(&header[0..4]);
    if magic & !1 != 0x377f_0682 {
        return Some(format!(
            "is damaged: its header does not start as a SQLite write-ahead log does (magic {magic:#010x})"
        ));
    }
    let big_endian = magic & 1 == 1;
    let checksum = |seed: (u32, u32), bytes: &[u8]| {
        let (mut s1, mut s2) = seed;
        for pair in bytes.chunks_exact(8) {
            let word = |b: &[u8]| {
                let b = [b[0], b[1], b[2], b[3]];
                if big_endian {
                    u32::from_be_bytes(b)
                } else {
                    u32::from_le_bytes(b)
                }
            };
            s1 = s1.wrapping_add(word(&pair[0..4])).wrapping_add(s2);
            s2 = s2.wrapping_add(word(&pair[4..8])).wrapping_add(s1);
        }
        (s1, s2)
    };
    let sum = checksum((0, 0), &header[0..24]);
    if sum != (be(&header[24..28]), be(&header[28..32])) {
        return Some("is damaged: its header's checksum does not match".to_owned());
    }
    let page_size = match be(&header[8..12]) {
        1 => 65536,
        n if n.is_power_of_two() && (512..=32768).contains(&n) => n as usize,
        n => return Some(format!("is damaged: its header names a page size of {n}")),
    };
    let salts = (be(&header[16..20]), be(&header[20..24]));
    let mut frame = vec![0u8; 24 + page_size];
    let mut running = sum;
    let mut first_bad: Option<u64> = None;
    let mut index = 0u64;
    loop {
        match file.read_exact(&mut frame) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            Err(e) => return Some(format!("could not be read ({e})")),
        }
        index += 1;
        let ours = (be(&frame[8..12]), be(&frame[12..16])) == salts;
        match first_bad {
            None => {
                let next = checksum(checksum(running, &frame[0..8]), &frame[24..]);
                let valid = ours
                    && be(&frame[0..4]) != 0
                    && next == (be(&frame[16..20]), be(&frame[20..24]));
                if valid {
                    running = next;
                } else {
                    first_bad = Some(index);
                }
            }
            Some(bad) if ours => {
                return Some(format!(
                    "is damaged: its frame {bad} does not check out, yet frame {index} after it belongs to the same log, so SQLite would drop committed changes from frame {bad} on"
                ));
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use div_api::{Run, RunStatus};
    use rusqlite::Connection;

    use super::{Placed, RunInternal, RunRecord, SCHEMA_V1, SCHEMA_VERSION, Store, StoreError};

    fn user_version(path: &std::path::Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_new_database_gets_the_current_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        Store::open(&path).unwrap();
        assert_eq!(user_version(&path), SCHEMA_VERSION);
        // Opening again changes nothing.
        Store::open(&path).unwrap();
        assert_eq!(user_version(&path), SCHEMA_VERSION);
    }

    #[test]
    fn a_state_directory_from_before_versions_opens_with_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            // What an older div left: the same tables, user_version never set.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.execute(
                "INSERT INTO volumes (name, created_at) VALUES ('data', '2026-01-01T00:00:00Z')",
                [],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO trees (volume, path, digest, files, bytes) VALUES ('p-code', 'code/1', 'd', 1, 2)",
                [],
            )
            .unwrap();
        }
        assert_eq!(user_version(&path), 0);
        let store = Store::open(&path).unwrap();
        assert_eq!(
            store.volume("data").unwrap().map(|v| v.name),
            Some("data".to_owned())
        );
        // Its trees are kept, never used as far as retention knows (version 2).
        assert_eq!(
            store.tree("p-code", "code/1").unwrap(),
            Some(("d".to_owned(), 1, 2))
        );
        assert_eq!(
            store.trees_by_use("p-code", "code/").unwrap(),
            vec![("code/1".to_owned(), 0)]
        );
        store.touch_tree("p-code", "code/1").unwrap();
        assert!(store.trees_by_use("p-code", "code/").unwrap()[0].1 > 0);
        assert_eq!(user_version(&path), SCHEMA_VERSION);
    }

    #[test]
    fn a_database_from_a_newer_div_is_refused_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = Store::open(&path).unwrap_err();
        assert!(
            matches!(err, StoreError::TooNew { found, known } if found == SCHEMA_VERSION + 1 && known == SCHEMA_VERSION),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("newer than this div's"), "{message}");
        // Nothing was written to it.
        assert_eq!(user_version(&path), SCHEMA_VERSION + 1);
    }

    fn record(id: &str, name: &str) -> RunRecord {
        let run: Run = serde_json::from_value(serde_json::json!({
            "id": id, "name": name, "project": "p", "status": "queued",
            "entrypoint": "true", "command": "true", "sku": "cpu", "gpus": 0, "cores": 1, "memory_gib": 1,
            "cents_per_hour": 1, "spent_cents": 0, "image": "i",
            "created_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        RunRecord {
            run,
            internal: RunInternal::default(),
        }
    }

    #[test]
    fn a_taken_name_is_known_by_sqlites_constraint_code() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        assert!(matches!(
            store.place_run("k1", "h1", &record("r_1", "same")).unwrap(),
            Placed::New
        ));
        let err = store
            .place_run("k2", "h2", &record("r_2", "same"))
            .unwrap_err();
        assert!(err.is_unique_violation(), "{err:?}");
        assert!(!err.is_disk_full());
    }
}
