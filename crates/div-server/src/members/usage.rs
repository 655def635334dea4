//! A member's monthly usage limit, beside the org's (`crate::org`): the month's spend of the
//! runs it placed (each counted in the month it was placed, an ended run with what it spent, a
//! running one with what it has spent so far) against its own limit. At the limit its running
//! runs are stopped by the org, its queued ones wait, and its new ones are refused; the other
//! members' runs go on.

use std::collections::HashMap;

use div_api::RunStatus;
use div_spec::Money;
use serde::Serialize;

use crate::rules;
use crate::store::{Store, StoreError};
use div_runtime::clock::{self, now_ms};

/// One member's spend this month against its limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MemberUsage {
    pub(crate) member: String,
    pub(crate) limit_cents: i64,
    pub(crate) spent_cents: i64,
    /// `2026-11`: the calendar month, UTC.
    pub(crate) month: String,
    pub(crate) reached: bool,
}

impl MemberUsage {
    /// `` `alice`'s monthly limit of $50.00 reached ``: the reason of a run it stops.
    pub(crate) fn reason(&self) -> String {
        format!(
            "`{}`'s monthly limit of {} reached",
            self.member,
            Money::from_cents(self.limit_cents)
        )
    }

    /// Why the member's new run is refused: the limit, the month's spend, what would let it
    /// run.
    pub(crate) fn refusal(&self) -> String {
        format!(
            "`{}`'s monthly limit of {} is reached: {} spent in {}; no run of theirs starts until the month ends or an admin raises it (`div server users set {} --monthly-limit USD`)",
            self.member,
            Money::from_cents(self.limit_cents),
            Money::from_cents(self.spent_cents),
            self.month,
            self.member
        )
    }
}

/// The first instant of this month, and the month: `("2026-11-01T00:00:00Z", "2026-11")`.
fn this_month() -> (String, String) {
    let now = clock::now_rfc3339();
    let month = now.get(..7).unwrap_or_default().to_owned();
    (format!("{month}-01T00:00:00Z"), month)
}

/// The usage of every live member with a limit, by name.
pub(crate) fn all(store: &Store) -> Result<HashMap<String, MemberUsage>, StoreError> {
    let limited: Vec<(String, i64)> = store
        .members()?
        .into_iter()
        .filter(|m| m.revoked_at.is_none())
        .filter_map(|m| Some((m.name, m.monthly_limit_cents?)))
        .collect();
    if limited.is_empty() {
        return Ok(HashMap::new());
    }
    let (from, month) = this_month();
    // What the member's running runs have spent so far, each counted once.
    let mut running: HashMap<String, i64> = HashMap::new();
    let now = now_ms();
    for record in store.runs_with_status(RunStatus::Running)? {
        if record.run.created_at.as_str() < from.as_str() {
            continue;
        }
        if let Some(started) = record.internal.started_ms {
            let seconds = now.saturating_sub(started) / 1000;
            let by = record
                .run
                .placed_by
                .clone()
                .unwrap_or_else(|| super::OWNER.to_owned());
            *running.entry(by).or_default() += rules::charge(
                record.run.cents_per_hour,
                seconds,
                record.run.max_spend_cents,
            );
        }
    }
    let mut usage = HashMap::new();
    for (member, limit_cents) in limited {
        let ended = store.spent_in_ended_runs_of(&member, &from)?;
        let spent_cents = ended.saturating_add(running.get(&member).copied().unwrap_or(0));
        usage.insert(
            member.clone(),
            MemberUsage {
                member,
                limit_cents,
                spent_cents,
                month: month.clone(),
                reached: spent_cents >= limit_cents,
            },
        );
    }
    Ok(usage)
}

/// `member`'s usage when it has a limit.
pub(crate) fn of(store: &Store, member: &str) -> Result<Option<MemberUsage>, StoreError> {
    if store
        .live_member(member)?
        .and_then(|m| m.monthly_limit_cents)
        .is_none()
    {
        return Ok(None);
    }
    Ok(all(store)?.remove(member))
}
