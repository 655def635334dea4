//! Who may do what, in one place: the right every route of div-api's table needs (the API's,
//! [`rule`], and the dashboard's, [`dashboard_rule`], each one exhaustive `match`, so a route
//! the table gains has no rule until it is given one here), what each change appends to the
//! audit log, and the bearer token of a request on the team's listener read into the member
//! it is ([`authenticate`]), slowed down after repeated bad ones (`slowdown`).
//!
//! The router asks [`allowed`] before any handler runs; a refusal is 401 (no member) or 403
//! naming the right the role lacks. Whether a run is the caller's own (stopping another
//! member's needs [`Right::StopAnyRun`]) is the runs service's to say, with the run in hand.

use std::net::IpAddr;
use std::time::Instant;

use div_api::Route;
use div_api::routes::dashboard::DashboardRoute;
use hyper::Request;
use hyper::body::Incoming;
use serde_json::json;

use super::error::{ErrorCode, HttpError};
use super::slowdown::Slowdown;
use super::wire::header;
use crate::members::{self, Actor, Right};
use crate::server::Server;

/// Whether, and how, a route's success is appended to the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Audit {
    /// A read: nothing is appended.
    No,
    /// Appended as this action on every success.
    Always(&'static str),
    /// Appended as this action when it made something (201); a retry that found it made is
    /// not a change.
    IfMade(&'static str),
}

/// What a route needs, and what its success appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    /// The right it needs; `None`: none, not even a token (a token given must still be good).
    pub(crate) right: Option<Right>,
    pub(crate) audit: Audit,
}

const fn needs(right: Right) -> Rule {
    Rule {
        right: Some(right),
        audit: Audit::No,
    }
}

const fn changes(right: Right, audit: Audit) -> Rule {
    Rule {
        right: Some(right),
        audit,
    }
}

/// The right each route of the API needs, and what its success appends to the audit log.
pub(crate) fn rule(route: Route) -> Rule {
    use Audit::{Always, IfMade};
    use Right::*;
    match route {
        Route::Health => Rule {
            right: None,
            audit: Audit::No,
        },
        Route::Catalogue | Route::ListRuns | Route::GetRun | Route::Log => needs(Read),
        Route::Result | Route::Telemetry | Route::ListImages | Route::WhoAmI => needs(Read),
        Route::ListVolumes | Route::MissingBlobs | Route::TreeHeld => needs(UseVolumes),
        Route::ListTree | Route::ReadFile | Route::UploadBlob | Route::UploadPack => {
            needs(UseVolumes)
        }
        Route::StageTree => needs(UseVolumes),
        Route::CreateVolume => changes(UseVolumes, IfMade("volume.create")),
        Route::CommitTree | Route::CommitStage => changes(UseVolumes, IfMade("volume.commit")),
        Route::DeleteVolume => changes(RemoveVolumes, Always("volume.delete")),
        Route::PullImage | Route::ValidateRun => needs(PlaceRuns),
        Route::CreateRun => changes(PlaceRuns, IfMade("run.place")),
        Route::StopRun => changes(StopOwnRuns, Always("run.stop")),
        Route::PruneImages => changes(ManageOrg, Always("images.prune")),
        Route::OpenDashboard => changes(ManageOrg, Always("dashboard.link")),
        Route::ListSecrets => needs(ListSecrets),
        Route::SetSecret => changes(ManageSecrets, Always("secret.set")),
        Route::DeleteSecret => changes(ManageSecrets, Always("secret.delete")),
        Route::ListMembers => needs(ManageMembers),
        Route::CreateMember => changes(ManageMembers, IfMade("member.add")),
        Route::RevokeMember => changes(ManageMembers, Always("member.revoke")),
        Route::SetMemberLimit => changes(ManageMembers, Always("member.limit")),
        Route::SetMemberSlurmAccount => changes(ManageMembers, Always("member.slurm_account")),
        Route::SetOrgLimit => changes(ManageOrg, Always("org.limit")),
        Route::Audit => needs(ReadAudit),
        Route::ListModels | Route::GetModel => needs(Read),
        Route::ListEvaluations | Route::GetEvaluation => needs(Read),
        Route::PushModel => changes(UseVolumes, IfMade("model.push")),
        Route::DeleteModel | Route::DeleteModelVersion => {
            changes(RemoveVolumes, Always("model.remove"))
        }
    }
}

/// The right each route of the dashboard's API needs (its pages need [`Right::Read`]); signing
/// in needs a token and no session, which its listener checks itself.
pub(crate) fn dashboard_rule(route: DashboardRoute) -> Rule {
    use Right::*;
    match route {
        DashboardRoute::ListRuns
        | DashboardRoute::GetRun
        | DashboardRoute::Log
        | DashboardRoute::Charts
        | DashboardRoute::ListModels
        | DashboardRoute::GetModel
        | DashboardRoute::Session => needs(Read),
        DashboardRoute::StopRun => changes(StopOwnRuns, Audit::Always("run.stop")),
        DashboardRoute::SignIn => Rule {
            right: None,
            audit: Audit::Always("session.sign_in"),
        },
        DashboardRoute::SignOut => changes(Read, Audit::Always("session.sign_out")),
    }
}

/// The refusal of `actor`, whose role lacks `right`: 403, naming the right, the role and the
/// roles that have it.
pub(crate) fn forbidden(actor: &Actor, right: Right) -> HttpError {
    HttpError::new(
        ErrorCode::Forbidden,
        members::refusal(&actor.name, actor.role, right),
    )
    .with_details(json!({
        "right": right.as_str(),
        "role": actor.role.as_str(),
        "needs": right.least_role().as_str(),
        "member": actor.name,
    }))
}

/// The 401 of a request that needs a member and carries none.
pub(crate) fn no_member() -> HttpError {
    HttpError::new(
        ErrorCode::Unauthorized,
        "a member's token is required (`Authorization: Bearer …`)",
    )
}

/// Who may make a request of `rule`: `actor`, when its role has the right; anyone for a route
/// that needs none (who is then taken as nobody in particular, with no right).
pub(crate) fn allowed(actor: Option<Actor>, rule: Rule, from: &str) -> Result<Actor, HttpError> {
    match (actor, rule.right) {
        (Some(actor), Some(right)) if actor.may(right) => Ok(actor),
        (Some(actor), Some(right)) => Err(forbidden(&actor, right)),
        (Some(actor), None) => Ok(actor),
        (None, Some(_)) => Err(no_member()),
        (None, None) => Ok(Actor {
            name: "anonymous".to_owned(),
            role: div_api::Role::Viewer,
            member: None,
            from: from.to_owned(),
        }),
    }
}

/// The 429 of an address that waits: when to try again, in whole seconds.
pub(crate) fn slowed(ip: IpAddr, wait: std::time::Duration) -> HttpError {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    HttpError::new(
        ErrorCode::TooManyAttempts,
        format!(
            "too many bad tokens from `{ip}`: it is slowed down; try again in {seconds}s with a member's token"
        ),
    )
    .with_details(json!({ "retry_after_seconds": seconds }))
}

/// The member `token` is, as an [`Actor`] from `ip`; a bad one is counted against `ip`, and
/// while `ip` waits no token is looked at (429).
pub(crate) async fn member_of_token(
    server: &std::sync::Arc<Server>,
    slowdown: &Slowdown,
    token: String,
    ip: IpAddr,
    from: String,
) -> Result<Actor, HttpError> {
    if let Some(wait) = slowdown.waiting(ip, Instant::now()) {
        return Err(slowed(ip, wait));
    }
    let found = super::wire::blocking(server, move |s| {
        members::authenticate(&s.store, &token, &from)
    })
    .await?;
    match found {
        Some(actor) => {
            slowdown.succeeded(ip);
            Ok(actor)
        }
        None => {
            slowdown.failed(ip, Instant::now());
            Err(HttpError::new(
                ErrorCode::Unauthorized,
                "the token is not a member's of this control plane, or it was revoked",
            ))
        }
    }
}

/// The member a request on the team's listener is, from its bearer token; `None` without
/// one (an `Authorization` header that is not `Bearer …` is a bad token).
pub(crate) async fn authenticate(
    server: &std::sync::Arc<Server>,
    slowdown: &Slowdown,
    req: &Request<Incoming>,
    ip: IpAddr,
) -> Result<Option<Actor>, HttpError> {
    let Some(value) = header(req, "authorization") else {
        return Ok(None);
    };
    let token = value.strip_prefix("Bearer ").unwrap_or_default().to_owned();
    member_of_token(server, slowdown, token, ip, ip.to_string())
        .await
        .map(Some)
}

#[cfg(test)]
mod tests {
    use div_api::routes::dashboard::DashboardRoute;
    use div_api::{Role, Route};

    use super::{Audit, allowed, dashboard_rule, rule};
    use crate::members::{Actor, Right, has};

    /// Every route of div-api's table, the API's and the dashboard's, has a rule, and the
    /// rules say what docs/team.md's table says: a viewer reads and changes nothing; every
    /// route that changes something appends to the audit log; none changes the audit log.
    #[test]
    fn every_route_of_the_table_has_its_rule() {
        for &route in Route::ALL {
            let r = rule(route);
            let reads = route.method() == "GET";
            let viewer_may = r.right.is_none_or(|right| has(Role::Viewer, right));
            if !reads {
                assert!(!viewer_may, "{route:?} changes something, yet a viewer may");
            }
            // Every change but the uploads (whose commit is the change) is audited.
            let upload = matches!(
                route,
                Route::UploadBlob
                    | Route::UploadPack
                    | Route::StageTree
                    | Route::MissingBlobs
                    | Route::ValidateRun
                    | Route::PullImage
            );
            assert_eq!(
                r.audit != Audit::No,
                !reads && !upload,
                "{route:?}: {:?}",
                r.audit
            );
            assert!(!route.template().starts_with("/v1/audit") || reads);
        }
        for &route in DashboardRoute::ALL {
            let r = dashboard_rule(route);
            if route.method() != "GET" {
                assert_ne!(r.audit, Audit::No, "{route:?}");
            }
        }
        let viewer = Actor {
            name: "bob".into(),
            role: Role::Viewer,
            member: Some(2),
            from: "::1".into(),
        };
        let err = allowed(Some(viewer.clone()), rule(Route::CreateRun), "::1").unwrap_err();
        assert_eq!(err.code.status(), 403);
        assert_eq!(err.details["right"], "place_runs");
        assert!(allowed(Some(viewer), rule(Route::ListRuns), "::1").is_ok());
        assert_eq!(
            allowed(None, rule(Route::ListRuns), "::1")
                .unwrap_err()
                .code
                .status(),
            401
        );
        assert!(allowed(None, rule(Route::Health), "::1").is_ok());
        assert!(Right::ALL.contains(&Right::ReadAudit));
    }
}
