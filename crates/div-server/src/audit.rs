//! The audit log: every change made through the control plane (a run placed or stopped, a
//! secret set or removed, a volume made, committed to or removed, a member added or revoked, a
//! limit set, a dashboard session begun or ended), with who, what, when and from where.
//! Appended to and read, never changed: no route changes it, and SQLite's own triggers refuse
//! an `UPDATE` or `DELETE` of its table (`store`'s `SCHEMA_TEAM`). `http::auth` says which
//! routes append what.

use div_api::{AuditEntry, AuditList};

use crate::fault::{StateError, state_errors};
use crate::members::Actor;
use crate::store::{AuditRow, Store};
use div_runtime::clock;

/// The error returned by [`list`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuditError {
    #[error("`{0}` is not a cursor of the audit log")]
    BadCursor(String),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(AuditError);

/// Appends `action` on `target`, done now by `actor`.
pub(crate) fn record(
    store: &Store,
    actor: &Actor,
    action: &str,
    target: &str,
) -> Result<(), StateError> {
    store.append_audit(
        &clock::now_rfc3339(),
        &actor.name,
        action,
        target,
        &actor.from,
    )?;
    Ok(())
}

fn shown(row: AuditRow) -> AuditEntry {
    AuditEntry {
        seq: row.seq,
        at: row.at,
        member: row.member,
        action: row.action,
        target: row.target,
        from: row.origin,
        extra: Default::default(),
    }
}

/// A page of the log, newest first: at most `limit` (50 unless asked, 1 to 1000) entries
/// before `cursor`.
pub(crate) fn list(
    store: &Store,
    limit: Option<u32>,
    cursor: Option<&str>,
) -> Result<AuditList, AuditError> {
    let cursor = match cursor {
        Some(c) => Some(
            c.parse::<i64>()
                .map_err(|_| AuditError::BadCursor(c.to_owned()))?,
        ),
        None => None,
    };
    let limit = limit.unwrap_or(50).clamp(1, 1000);
    let (rows, next) = store.audit(limit, cursor)?;
    Ok(AuditList {
        entries: rows.into_iter().map(shown).collect(),
        next_cursor: next.map(|n| n.to_string()),
    })
}
