//! `div server users`, `div server tokens`, `div server audit`, `div server limit` and
//! `div runs --mine`: a team's control plane, through its [`div_api::Team`] side. A control
//! plane without members (a fake, an older server: `team()` is `None`, or its routes are
//! 404) is [`RunError::NoTeam`].

use div_api::{
    ApiError, AuditList, ControlPlane, CreateMember, Member, MemberCreated, OrgLimit, Team, WhoAmI,
};

use crate::error::RunError;

fn team<'a>(cp: &'a dyn ControlPlane, what: &'static str) -> Result<&'a dyn Team, RunError> {
    cp.team().ok_or(RunError::NoTeam { what })
}

/// A 404 for the route itself (not for a member it names) is a control plane without it.
fn failed(e: ApiError, what: &'static str, during: &'static str) -> RunError {
    if e.is_not_found()
        && e.code().is_none_or(|c| c == "not_found")
        && e.message().starts_with("no route")
    {
        RunError::NoTeam { what }
    } else {
        RunError::api(during, e)
    }
}

/// Who the control plane takes this caller for.
pub async fn whoami(cp: &dyn ControlPlane) -> Result<WhoAmI, RunError> {
    team(cp, "say who you are")?
        .whoami()
        .await
        .map_err(|e| failed(e, "say who you are", "ask who you are"))
}

/// Every member, revoked ones included.
pub async fn members(cp: &dyn ControlPlane) -> Result<Vec<Member>, RunError> {
    team(cp, "list")?
        .list_members()
        .await
        .map_err(|e| failed(e, "list", "list the members"))
}

/// Adds a member or a service token; the answer holds its token, this once.
pub async fn member_add(
    cp: &dyn ControlPlane,
    member: &CreateMember,
) -> Result<MemberCreated, RunError> {
    team(cp, "add members to")?
        .add_member(member)
        .await
        .map_err(|e| failed(e, "add members to", "add the member"))
}

/// Revokes a member's token.
pub async fn member_revoke(cp: &dyn ControlPlane, name: &str) -> Result<Member, RunError> {
    team(cp, "revoke")?
        .revoke_member(name)
        .await
        .map_err(|e| member_failed(e, name, "revoke the member"))
}

/// What changes of a member: its monthly limit and its Slurm account, each `Some` to set
/// (`Some(None)` to remove), `None` to leave as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberChange {
    pub monthly_limit_cents: Option<Option<i64>>,
    pub slurm_account: Option<Option<String>>,
}

/// Sets what `change` says of the member `name`; the member as it is then.
pub async fn member_set(
    cp: &dyn ControlPlane,
    name: &str,
    change: &MemberChange,
) -> Result<Member, RunError> {
    let team = team(cp, "change members of")?;
    let mut member = None;
    if let Some(cents) = change.monthly_limit_cents {
        member = Some(
            team.set_member_limit(name, cents)
                .await
                .map_err(|e| member_failed(e, name, "set the member's limit"))?,
        );
    }
    if let Some(account) = &change.slurm_account {
        member = Some(
            team.set_member_slurm_account(name, account.as_deref())
                .await
                .map_err(|e| member_failed(e, name, "set the member's Slurm account"))?,
        );
    }
    match member {
        Some(m) => Ok(m),
        None => members(cp)
            .await?
            .into_iter()
            .rev()
            .find(|m| m.name == name)
            .ok_or_else(|| RunError::MemberNotFound(name.to_owned())),
    }
}

/// A 404 naming the member is no such member.
fn member_failed(e: ApiError, name: &str, during: &'static str) -> RunError {
    if e.is_not_found() && e.message() == format!("no member `{name}`") {
        RunError::MemberNotFound(name.to_owned())
    } else {
        failed(e, "change members of", during)
    }
}

/// Sets (`None`: removes) the org's monthly usage limit.
pub async fn org_limit(cp: &dyn ControlPlane, cents: Option<i64>) -> Result<OrgLimit, RunError> {
    team(cp, "set the org's limit of")?
        .set_org_limit(cents)
        .await
        .map_err(|e| failed(e, "set the org's limit of", "set the org's limit"))
}

/// The newest `limit` entries of the audit log, newest first, reading as many pages as that
/// needs; whether there are more.
pub async fn audit(cp: &dyn ControlPlane, limit: u32) -> Result<(AuditList, bool), RunError> {
    let team = team(cp, "read the audit log of")?;
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let want = limit.saturating_sub(entries.len() as u32);
        if want == 0 {
            let more = cursor.is_some();
            return Ok((
                AuditList {
                    entries,
                    next_cursor: cursor,
                },
                more,
            ));
        }
        let page = team
            .audit(Some(want.min(1000)), cursor.as_deref())
            .await
            .map_err(|e| failed(e, "read the audit log of", "read the audit log"))?;
        let got = page.entries.len();
        entries.extend(page.entries);
        match page.next_cursor {
            Some(next) if got > 0 => cursor = Some(next),
            _ => {
                return Ok((
                    AuditList {
                        entries,
                        next_cursor: None,
                    },
                    false,
                ));
            }
        }
    }
}
