//! [`Team`]: what a control plane shared by an org answers besides runs, volumes and secrets:
//! who the caller is, its members and their tokens, their limits, the org's limit and the
//! audit log (`docs/team.md`). A control plane without members answers
//! [`crate::ControlPlane::team`] with `None`; [`HttpControlPlane`] speaks it over HTTP, each
//! operation one request of its route.

use async_trait::async_trait;

use crate::client::HttpControlPlane;
use crate::error::ApiError;
use crate::models::{
    AuditList, CreateMember, Member, MemberCreated, MemberLimit, MemberList, MemberSlurmAccount,
    OrgLimit, WhoAmI,
};
use crate::routes::{self, query_value};

/// The org's side of a control plane. Usable as `&dyn Team`.
#[async_trait]
pub trait Team: Send + Sync {
    /// Who the control plane takes the caller for, and its role.
    async fn whoami(&self) -> Result<WhoAmI, ApiError>;
    /// Every member, revoked ones included, oldest first.
    async fn list_members(&self) -> Result<Vec<Member>, ApiError>;
    /// Adds a member (or a service token): its token is in the answer, this once.
    async fn add_member(&self, member: &CreateMember) -> Result<MemberCreated, ApiError>;
    /// Revokes a member's token: every request with it is refused from now on.
    async fn revoke_member(&self, name: &str) -> Result<Member, ApiError>;
    /// Sets (or, with `None`, removes) a member's monthly usage limit, in cents.
    async fn set_member_limit(&self, name: &str, cents: Option<i64>) -> Result<Member, ApiError>;
    /// Sets (or removes) the Slurm account a member's runs are charged to.
    async fn set_member_slurm_account(
        &self,
        name: &str,
        account: Option<&str>,
    ) -> Result<Member, ApiError>;
    /// Sets (or removes) the org's monthly usage limit, in cents.
    async fn set_org_limit(&self, cents: Option<i64>) -> Result<OrgLimit, ApiError>;
    /// A page of the audit log, newest first, from `cursor` (a previous page's
    /// `next_cursor`).
    async fn audit(&self, limit: Option<u32>, cursor: Option<&str>) -> Result<AuditList, ApiError>;
}

#[async_trait]
impl Team for HttpControlPlane {
    async fn whoami(&self) -> Result<WhoAmI, ApiError> {
        self.ask(&routes::WHOAMI, routes::WHOAMI.path(&[])).await
    }

    async fn list_members(&self) -> Result<Vec<Member>, ApiError> {
        let list: MemberList = self
            .ask(&routes::LIST_MEMBERS, routes::LIST_MEMBERS.path(&[]))
            .await?;
        Ok(list.members)
    }

    async fn add_member(&self, member: &CreateMember) -> Result<MemberCreated, ApiError> {
        let path = routes::CREATE_MEMBER.path(&[]);
        self.tell(&routes::CREATE_MEMBER, path, member).await
    }

    async fn revoke_member(&self, name: &str) -> Result<Member, ApiError> {
        let path = routes::REVOKE_MEMBER.path(&[name]);
        self.ask(&routes::REVOKE_MEMBER, path).await
    }

    async fn set_member_limit(&self, name: &str, cents: Option<i64>) -> Result<Member, ApiError> {
        let path = routes::SET_MEMBER_LIMIT.path(&[name]);
        let body = MemberLimit {
            monthly_limit_cents: cents,
        };
        self.tell(&routes::SET_MEMBER_LIMIT, path, &body).await
    }

    async fn set_member_slurm_account(
        &self,
        name: &str,
        account: Option<&str>,
    ) -> Result<Member, ApiError> {
        let path = routes::SET_MEMBER_SLURM_ACCOUNT.path(&[name]);
        let body = MemberSlurmAccount {
            slurm_account: account.map(str::to_owned),
        };
        self.tell(&routes::SET_MEMBER_SLURM_ACCOUNT, path, &body)
            .await
    }

    async fn set_org_limit(&self, cents: Option<i64>) -> Result<OrgLimit, ApiError> {
        let body = OrgLimit {
            monthly_limit_cents: cents,
        };
        let path = routes::SET_ORG_LIMIT.path(&[]);
        self.tell(&routes::SET_ORG_LIMIT, path, &body).await
    }

    async fn audit(&self, limit: Option<u32>, cursor: Option<&str>) -> Result<AuditList, ApiError> {
        let mut params = Vec::new();
        if let Some(limit) = limit {
            params.push(format!("limit={limit}"));
        }
        if let Some(cursor) = cursor {
            params.push(format!("cursor={}", query_value(cursor)));
        }
        let mut path = routes::AUDIT.path(&[]);
        if !params.is_empty() {
            path = format!("{path}?{}", params.join("&"));
        }
        self.ask(&routes::AUDIT, path).await
    }
}
