//! The team's routes (`/v1/whoami`, `/v1/members…`, `/v1/org/limit`, `/v1/audit`): each reads
//! its request, calls one operation of [`crate::members`], [`crate::org`] or [`crate::audit`],
//! and answers. Who may call each is `auth`'s to say, before any of these runs.

use std::sync::Arc;

use div_api::routes::{self, Found};
use div_api::{MemberList, OrgLimit, WhoAmI};
use hyper::Request;
use hyper::body::Incoming;

use super::error::HttpError;
use super::wire::{Resp, answer, blocking, param, request};
use crate::members::{self, Actor};
use crate::server::Server;

/// `GET /v1/whoami`.
pub(super) fn whoami(actor: &Actor) -> Resp {
    let me = WhoAmI {
        name: actor.name.clone(),
        role: actor.role,
        extra: Default::default(),
    };
    answer(&routes::WHOAMI, 200, &me)
}

pub(super) async fn list(server: &Arc<Server>) -> Result<Resp, HttpError> {
    let members = blocking(server, |s| members::list(&s.store)).await?;
    Ok(answer(&routes::LIST_MEMBERS, 200, &MemberList { members }))
}

pub(super) async fn create(
    server: &Arc<Server>,
    actor: &Actor,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let body = request(&routes::CREATE_MEMBER, req).await?;
    let by = actor.clone();
    let created = blocking(server, move |s| members::add(&s.store, &by, &body)).await?;
    Ok(answer(&routes::CREATE_MEMBER, 201, &created))
}

pub(super) async fn revoke(server: &Arc<Server>, found: &Found<'_>) -> Result<Resp, HttpError> {
    let name = found.param("name").to_owned();
    let member = blocking(server, move |s| members::revoke(&s.store, &name)).await?;
    Ok(answer(&routes::REVOKE_MEMBER, 200, &member))
}

pub(super) async fn set_limit(
    server: &Arc<Server>,
    found: &Found<'_>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let name = found.param("name").to_owned();
    let body = request(&routes::SET_MEMBER_LIMIT, req).await?;
    let member = blocking(server, move |s| {
        members::set_limit(&s.store, &name, body.monthly_limit_cents)
    })
    .await?;
    // The next pass stops the member's runs at once when the limit is already spent.
    server.kick.notify_one();
    Ok(answer(&routes::SET_MEMBER_LIMIT, 200, &member))
}

pub(super) async fn set_slurm_account(
    server: &Arc<Server>,
    found: &Found<'_>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let name = found.param("name").to_owned();
    let body = request(&routes::SET_MEMBER_SLURM_ACCOUNT, req).await?;
    let member = blocking(server, move |s| {
        members::set_slurm_account(&s.store, &name, body.slurm_account.as_deref())
    })
    .await?;
    Ok(answer(&routes::SET_MEMBER_SLURM_ACCOUNT, 200, &member))
}

pub(super) async fn set_org_limit(
    server: &Arc<Server>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let body = request(&routes::SET_ORG_LIMIT, req).await?;
    let now = blocking(server, move |s| {
        crate::org::set_limit(&s.home, body.monthly_limit_cents)
    })
    .await?;
    server.kick.notify_one();
    let limit = OrgLimit {
        monthly_limit_cents: now,
    };
    Ok(answer(&routes::SET_ORG_LIMIT, 200, &limit))
}

pub(super) async fn audit(server: &Arc<Server>, q: &[(String, String)]) -> Result<Resp, HttpError> {
    let limit = match param(q, "limit").filter(|l| !l.is_empty()) {
        Some(l) => Some(
            l.parse::<u32>()
                .map_err(|_| HttpError::malformed(format!("`{l}` is not a limit")))?,
        ),
        None => None,
    };
    let cursor = param(q, "cursor").filter(|c| !c.is_empty());
    let list = blocking(server, move |s| {
        crate::audit::list(&s.store, limit, cursor.as_deref())
    })
    .await?;
    Ok(answer(&routes::AUDIT, 200, &list))
}
