//! The team's tables (`SCHEMA_TEAM`): members, each token only as its public id and the hash of
//! its secret, and the audit log, appended to and read, never changed.

use rusqlite::{OptionalExtension, Row, params};

use super::{Store, StoreError};

/// A member as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberRow {
    pub(crate) id: i64,
    pub(crate) name: String,
    /// `user` or `service`.
    pub(crate) kind: String,
    /// `viewer`, `member` or `admin`.
    pub(crate) role: String,
    /// The token's public part, by which it is found.
    pub(crate) token_id: String,
    /// The hash of the token's secret part (blake3, hex).
    pub(crate) token_hash: String,
    pub(crate) created_at: String,
    pub(crate) created_by: String,
    pub(crate) last_used_at: Option<String>,
    pub(crate) revoked_at: Option<String>,
    pub(crate) monthly_limit_cents: Option<i64>,
    pub(crate) slurm_account: Option<String>,
}

/// A member to add.
#[derive(Debug)]
pub(crate) struct NewMember<'a> {
    pub(crate) name: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) role: &'a str,
    pub(crate) token_id: &'a str,
    pub(crate) token_hash: &'a str,
    pub(crate) created_at: &'a str,
    pub(crate) created_by: &'a str,
    pub(crate) slurm_account: Option<&'a str>,
}

/// An entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuditRow {
    pub(crate) seq: i64,
    pub(crate) at: String,
    pub(crate) member: String,
    pub(crate) action: String,
    pub(crate) target: String,
    pub(crate) origin: String,
}

const MEMBER_COLUMNS: &str = "id, name, kind, role, token_id, token_hash, created_at, created_by, \
     last_used_at, revoked_at, monthly_limit_cents, slurm_account";

fn member_row(r: &Row<'_>) -> rusqlite::Result<MemberRow> {
    Ok(MemberRow {
        id: r.get(0)?,
        name: r.get(1)?,
        kind: r.get(2)?,
        role: r.get(3)?,
        token_id: r.get(4)?,
        token_hash: r.get(5)?,
        created_at: r.get(6)?,
        created_by: r.get(7)?,
        last_used_at: r.get(8)?,
        revoked_at: r.get(9)?,
        monthly_limit_cents: r.get(10)?,
        slurm_account: r.get(11)?,
    })
}

impl Store {
    /// Adds a member; a live member of the same name is SQLite's unique violation.
    pub(crate) fn add_member(&self, m: &NewMember<'_>) -> Result<MemberRow, StoreError> {
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO members (name, kind, role, token_id, token_hash, created_at, created_by, slurm_account) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                m.name,
                m.kind,
                m.role,
                m.token_id,
                m.token_hash,
                m.created_at,
                m.created_by,
                m.slurm_account
            ],
        )?;
        let id = conn.last_insert_rowid();
        Ok(conn.query_row(
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = ?1"),
            [id],
            member_row,
        )?)
    }

    /// Every member, revoked ones included, oldest first.
    pub(crate) fn members(&self) -> Result<Vec<MemberRow>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {MEMBER_COLUMNS} FROM members ORDER BY id ASC"
        ))?;
        let rows = stmt
            .query_map([], member_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The live (not revoked) member called `name`.
    pub(crate) fn live_member(&self, name: &str) -> Result<Option<MemberRow>, StoreError> {
        Ok(self
            .conn()?
            .query_row(
                &format!(
                    "SELECT {MEMBER_COLUMNS} FROM members WHERE name = ?1 AND revoked_at IS NULL"
                ),
                [name],
                member_row,
            )
            .optional()?)
    }

    /// The member whose token has this public id, revoked or not.
    pub(crate) fn member_by_token_id(
        &self,
        token_id: &str,
    ) -> Result<Option<MemberRow>, StoreError> {
        Ok(self
            .conn()?
            .query_row(
                &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE token_id = ?1"),
                [token_id],
                member_row,
            )
            .optional()?)
    }

    /// The member with this id, revoked or not.
    pub(crate) fn member_by_id(&self, id: i64) -> Result<Option<MemberRow>, StoreError> {
        Ok(self
            .conn()?
            .query_row(
                &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = ?1"),
                [id],
                member_row,
            )
            .optional()?)
    }

    /// Revokes the live member called `name` at `now`; the member as it is now, `None` when
    /// no live member has that name.
    pub(crate) fn revoke_member(
        &self,
        name: &str,
        now: &str,
    ) -> Result<Option<MemberRow>, StoreError> {
        let Some(live) = self.live_member(name)? else {
            return Ok(None);
        };
        self.conn()?.execute(
            "UPDATE members SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            params![live.id, now],
        )?;
        self.member_by_id(live.id)
    }

    /// Sets a live member's monthly limit (cents) and Slurm account; `None` when no live
    /// member has that name.
    pub(crate) fn update_member(
        &self,
        name: &str,
        monthly_limit_cents: Option<i64>,
        slurm_account: Option<&str>,
    ) -> Result<Option<MemberRow>, StoreError> {
        let Some(live) = self.live_member(name)? else {
            return Ok(None);
        };
        self.conn()?.execute(
            "UPDATE members SET monthly_limit_cents = ?2, slurm_account = ?3 WHERE id = ?1",
            params![live.id, monthly_limit_cents, slurm_account],
        )?;
        self.member_by_id(live.id)
    }

    /// Notes that the member's token was accepted at `now`.
    pub(crate) fn touch_member(&self, id: i64, now: &str) -> Result<(), StoreError> {
        self.conn()?.execute(
            "UPDATE members SET last_used_at = ?2 WHERE id = ?1",
            params![id, now],
        )?;
        Ok(())
    }

    /// Appends an entry to the audit log; its sequence number.
    pub(crate) fn append_audit(
        &self,
        at: &str,
        member: &str,
        action: &str,
        target: &str,
        origin: &str,
    ) -> Result<i64, StoreError> {
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO audit (at, member, action, target, origin) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![at, member, action, target, origin],
        )?;
        Ok(conn.last_insert_rowid())
    }

    /// A page of the audit log, newest first, before `cursor` (a sequence number), and the
    /// cursor of the next page.
    pub(crate) fn audit(
        &self,
        limit: u32,
        cursor: Option<i64>,
    ) -> Result<(Vec<AuditRow>, Option<i64>), StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT seq, at, member, action, target, origin FROM audit \
             WHERE (?1 IS NULL OR seq < ?1) ORDER BY seq DESC LIMIT ?2",
        )?;
        let mut rows = stmt
            .query_map(params![cursor, i64::from(limit) + 1], |r| {
                Ok(AuditRow {
                    seq: r.get(0)?,
                    at: r.get(1)?,
                    member: r.get(2)?,
                    action: r.get(3)?,
                    target: r.get(4)?,
                    origin: r.get(5)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next = if more {
            rows.last().map(|r| r.seq)
        } else {
            None
        };
        Ok((rows, next))
    }

    /// What the runs `member` placed since `created_from` (RFC 3339, UTC) and that ended
    /// spent, in cents (`owner`'s include the runs placed before members were recorded).
    pub(crate) fn spent_in_ended_runs_of(
        &self,
        member: &str,
        created_from: &str,
    ) -> Result<i64, StoreError> {
        let spent: i64 = self.conn()?.query_row(
            "SELECT COALESCE(SUM(json_extract(run, '$.spent_cents')), 0) FROM runs \
             WHERE status NOT IN ('queued', 'running') AND json_extract(run, '$.created_at') >= ?1 \
             AND COALESCE(json_extract(run, '$.placed_by'), 'owner') = ?2",
            params![created_from, member],
            |r| r.get(0),
        )?;
        Ok(spent)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Store;
    use super::NewMember;

    fn member<'a>(name: &'a str, token_id: &'a str) -> NewMember<'a> {
        NewMember {
            name,
            kind: "user",
            role: "member",
            token_id,
            token_hash: "h",
            created_at: "2026-01-01T00:00:00Z",
            created_by: "owner",
            slurm_account: None,
        }
    }

    #[test]
    fn a_live_name_is_unique_and_a_revoked_one_may_be_given_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let alice = store.add_member(&member("alice", "t1")).unwrap();
        let err = store.add_member(&member("alice", "t2")).unwrap_err();
        assert!(err.is_unique_violation(), "{err:?}");
        let revoked = store
            .revoke_member("alice", "2026-01-02T00:00:00Z")
            .unwrap();
        assert_eq!(
            revoked.and_then(|m| m.revoked_at).as_deref(),
            Some("2026-01-02T00:00:00Z")
        );
        assert_eq!(store.revoke_member("alice", "later").unwrap(), None);
        let again = store.add_member(&member("alice", "t3")).unwrap();
        assert_ne!(again.id, alice.id);
        assert_eq!(store.members().unwrap().len(), 2);
        assert_eq!(
            store.live_member("alice").unwrap().map(|m| m.id),
            Some(again.id)
        );
    }

    /// The audit log is append-only in SQLite itself: even a statement no route sends is
    /// refused by its triggers.
    #[test]
    fn the_audit_log_refuses_every_update_and_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        for i in 0..3 {
            store
                .append_audit(
                    "2026-01-01T00:00:00Z",
                    "alice",
                    "run.place",
                    &format!("run-{i}"),
                    "::1",
                )
                .unwrap();
        }
        let conn = store.conn().unwrap();
        for sql in [
            "UPDATE audit SET member = 'mallory'",
            "DELETE FROM audit WHERE seq = 1",
            "DELETE FROM audit",
        ] {
            let err = conn.execute(sql, []).unwrap_err();
            assert!(err.to_string().contains("append-only"), "{sql}: {err}");
        }
        drop(conn);
        let (page, next) = store.audit(2, None).unwrap();
        let targets: Vec<&str> = page.iter().map(|r| r.target.as_str()).collect();
        assert_eq!(targets, ["run-2", "run-1"]);
        let (rest, last) = store.audit(2, next).unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!((rest[0].member.as_str(), last), ("alice", None));
    }
}
