//! Turns between members, before admission (`admission`) takes the queue in order:
//!
//! - **Round-robin.** The queue is each member's runs in the order they were placed, taken in
//!   turn: the member whose oldest waiting run is oldest first, then the next, one run each,
//!   round after round. One member's 200 queued runs put one run ahead of another member's
//!   one, never 200. Admission still holds everything behind a run that does not fit, so no
//!   large run starves either.
//! - **A member's limit.** The queued runs of a member whose monthly limit is reached
//!   (`members::usage`) wait, saying so, and hold no one; its running runs are to be stopped
//!   by the org, as the org's own limit stops every run.

use std::collections::HashMap;

use div_api::RunQueue;

use crate::members::{OWNER, usage};
use crate::server::Server;
use crate::store::{RunRecord, StoreError};

/// The queue as admission is to take it, and what a member's limit holds or stops.
#[derive(Debug, Default)]
pub(super) struct Turns {
    /// The queued runs that may start, in the order they take turns.
    pub(super) queued: Vec<RunRecord>,
    /// Queued runs whose member's limit is reached, by id: why each waits.
    pub(super) held: HashMap<String, RunQueue>,
    /// Running runs whose member's limit is reached, with the reason they are stopped.
    pub(super) stop: Vec<(RunRecord, String)>,
}

/// Who placed `record`.
fn member(record: &RunRecord) -> &str {
    record.run.placed_by.as_deref().unwrap_or(OWNER)
}

/// The turns of this pass: `queued` (oldest first) ordered between members, less the runs of
/// members at their limit, and which of `running` their limit stops.
pub(super) fn turns(
    server: &Server,
    running: &[RunRecord],
    queued: Vec<RunRecord>,
) -> Result<Turns, StoreError> {
    let reached: HashMap<String, usage::MemberUsage> = usage::all(&server.store)?
        .into_iter()
        .filter(|(_, u)| u.reached)
        .collect();
    let mut turns = Turns::default();
    let mut free = Vec::with_capacity(queued.len());
    for record in queued {
        match reached.get(member(&record)) {
            Some(u) => {
                let wait = RunQueue {
                    reason: format!("waiting: {}", u.reason()),
                    ahead: 0,
                    extra: Default::default(),
                };
                turns.held.insert(record.run.id.clone(), wait);
            }
            None => free.push(record),
        }
    }
    turns.queued = order(free);
    turns.stop = running
        .iter()
        .filter(|r| r.run.status == div_api::RunStatus::Running)
        .filter_map(|r| Some((r.clone(), reached.get(member(r))?.reason())))
        .collect();
    Ok(turns)
}

/// `queued` (oldest first) in turns: each member's runs in their order, one of each member a
/// round, members in the order of their oldest run.
pub(super) fn order(queued: Vec<RunRecord>) -> Vec<RunRecord> {
    let mut members: Vec<String> = Vec::new();
    let mut lines: HashMap<String, std::collections::VecDeque<RunRecord>> = HashMap::new();
    let total = queued.len();
    for record in queued {
        let who = member(&record).to_owned();
        if !lines.contains_key(&who) {
            members.push(who.clone());
        }
        lines.entry(who).or_default().push_back(record);
    }
    let mut ordered = Vec::with_capacity(total);
    while ordered.len() < total {
        for who in &members {
            if let Some(next) = lines.get_mut(who).and_then(|l| l.pop_front()) {
                ordered.push(next);
            }
        }
    }
    ordered
}

#[cfg(test)]
mod tests {
    use div_api::Run;

    use super::order;
    use crate::store::{RunInternal, RunRecord};

    fn queued(name: &str, by: Option<&str>) -> RunRecord {
        let mut run: Run = serde_json::from_value(serde_json::json!({
            "id": format!("r_{name}"), "name": name, "project": "p", "status": "queued",
            "entrypoint": "true", "command": "true", "sku": "cpu", "gpus": 0, "cores": 1,
            "memory_gib": 1, "cents_per_hour": 1, "image": "i",
            "created_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        run.placed_by = by.map(str::to_owned);
        RunRecord {
            run,
            internal: RunInternal::default(),
        }
    }

    fn names(runs: &[RunRecord]) -> Vec<&str> {
        runs.iter().map(|r| r.run.name.as_str()).collect()
    }

    #[test]
    fn members_take_turns_each_in_the_order_placed() {
        let mut q: Vec<RunRecord> = (0..200)
            .map(|i| queued(&format!("a{i}"), Some("alice")))
            .collect();
        q.push(queued("b0", Some("bob")));
        q.insert(3, queued("o0", None));
        q.push(queued("b1", Some("bob")));
        let ordered = order(q);
        assert_eq!(ordered.len(), 203);
        // Alice placed first, so she goes first; then the owner (a run from before members,
        // placed fourth), then Bob, whose one run is third, not 201st.
        assert_eq!(
            names(&ordered[..8]),
            ["a0", "o0", "b0", "a1", "b1", "a2", "a3", "a4"]
        );
        assert_eq!(ordered.last().map(|r| r.run.name.as_str()), Some("a199"));
        assert!(order(Vec::new()).is_empty());
    }
}
