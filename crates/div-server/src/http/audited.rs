//! The audit log's side of the router: a change's answer passed through once its entry is
//! appended (`crate::audit`), as `auth`'s rules say which routes append what.

use std::sync::Arc;

use div_api::routes::Found;
use http_body_util::BodyExt;

use super::auth::Audit;
use super::wire::{Resp, blocking};
use crate::members::Actor;
use crate::server::Server;

/// `resp`, after its change is appended to the audit log as `audit` says: `actor` did it, to
/// what the answer names (its `name`, a member's, or a tree's `volume/path`), else to what the
/// route's path names. The answer itself is unchanged; a log that cannot be written is said on
/// the server's log (the change is made, and answered as made).
pub(crate) async fn audited<T>(
    server: &Arc<Server>,
    actor: &Actor,
    audit: Audit,
    found: &Found<'_, T>,
    resp: Resp,
) -> Resp {
    let status = resp.status().as_u16();
    let action = match audit {
        Audit::Always(action) if (200..300).contains(&status) => action,
        Audit::IfMade(action) if status == 201 => action,
        _ => return resp,
    };
    let (parts, body) = resp.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let target = audit_target(found, &answer);
    let (actor, action_owned) = (actor.clone(), action.to_owned());
    let written = blocking(server, move |s| {
        crate::audit::record(&s.store, &actor, &action_owned, &target)
    })
    .await;
    if let Err(e) = written {
        server.warn_once(&format!(
            "the audit log could not be appended to ({action}): {}",
            e.message
        ));
    }
    hyper::Response::from_parts(parts, http_body_util::Full::new(bytes).boxed())
}

/// What a change was made to: the answer's `name` (a run's, a volume's, a secret's, a
/// member's), `member.name`, or a tree's `volume/path`; else the route's path's parameters.
fn audit_target<T>(found: &Found<'_, T>, answer: &serde_json::Value) -> String {
    if let Some(name) = answer["name"].as_str() {
        return name.to_owned();
    }
    if let Some(name) = answer["member"]["name"].as_str() {
        return name.to_owned();
    }
    if let (Some(volume), Some(path)) = (answer["volume"].as_str(), answer["path"].as_str()) {
        return format!("{volume}/{path}");
    }
    ["run", "name"]
        .iter()
        .map(|p| found.param(p))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}
