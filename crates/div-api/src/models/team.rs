//! A team's control plane: its members (people and service tokens), each with a role, and the
//! audit log of every change (`docs/team.md`).

use serde::{Deserialize, Serialize};

use super::Extra;

/// What a member may do: each role can do all the one before it can, and more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads runs, their logs, results and telemetry, and the dashboard; changes nothing.
    Viewer,
    /// Places runs, stops their own, puts and gets volumes, lists secrets' names.
    Member,
    /// Everything: stops anyone's run, sets and removes secrets, manages members and the
    /// org's usage limit, reads the audit log.
    Admin,
}

impl Role {
    /// Every role, least first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Member, Role::Admin];

    /// Its name on the wire and on the command line: `viewer`, `member`, `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error returned by [`Role`]'s `FromStr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a role; a role is `admin`, `member` or `viewer`")]
pub struct UnknownRole(pub String);

impl std::str::FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Role, UnknownRole> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownRole(s.to_owned()))
    }
}

/// Whether a member is a person or a service (CI): the same rights by role; listed apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberKind {
    #[default]
    User,
    Service,
}

impl MemberKind {
    /// `user` or `service`.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberKind::User => "user",
            MemberKind::Service => "service",
        }
    }
}

/// A member of the control plane's org, as `GET /v1/members` lists it. Never its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub role: Role,
    #[serde(default)]
    pub kind: MemberKind,
    pub created_at: String,
    /// When its token was last accepted (to the minute); absent when never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
    /// When its token was revoked; absent while it is good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
    /// Its monthly usage limit, in cents, beside the org's; absent: only the org's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_limit_cents: Option<i64>,
    /// The Slurm account its runs are charged to (`sbatch --account`), on a Slurm executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_account: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/members`: every member, revoked ones included, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberList {
    pub members: Vec<Member>,
}

/// `POST /v1/members`: a new member, or a service token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateMember {
    /// `[a-z0-9][a-z0-9._-]*`, at most 63 characters; `owner` is the server's own.
    pub name: String,
    pub role: Role,
    #[serde(default)]
    pub kind: MemberKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_account: Option<String>,
}

/// The answer to `POST /v1/members`: the member, and its token, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberCreated {
    pub member: Member,
    /// The bearer token: kept by the control plane only as a hash, never shown again.
    pub token: String,
}

/// `PUT /v1/members/{name}/limit`: a member's monthly usage limit (`null`: none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberLimit {
    pub monthly_limit_cents: Option<i64>,
}

/// `PUT /v1/members/{name}/slurm-account`: the Slurm account of a member's runs (`null`:
/// the cluster's default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberSlurmAccount {
    pub slurm_account: Option<String>,
}

/// `PUT /v1/org/limit`: the org's monthly usage limit (`null`: none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrgLimit {
    pub monthly_limit_cents: Option<i64>,
}

/// `GET /v1/whoami`: who the control plane takes the caller for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    /// The member's name; `owner` over the server's own Unix socket.
    pub name: String,
    pub role: Role,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The dashboard's sign-in: a member's token, sent once in a `POST` body (never in a URL).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignIn {
    pub token: String,
}

impl std::fmt::Debug for SignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignIn { token: <redacted> }")
    }
}

/// One change, as the audit log keeps it: who, what, when and from where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Its place in the log, from 1; never reused.
    pub seq: i64,
    /// RFC 3339, UTC.
    pub at: String,
    /// The member who made the change (`owner` over the Unix socket).
    pub member: String,
    /// What was done: `run.place`, `run.stop`, `secret.set`, `secret.delete`,
    /// `volume.create`, `volume.delete`, `volume.commit`, `member.add`, `member.revoke`…
    pub action: String,
    /// What it was done to: a run's name, a secret's, a volume's, a member's; empty for none.
    pub target: String,
    /// Where the request came from: an address, `unix socket` or `dashboard`.
    pub from: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/audit`: entries, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditList {
    pub entries: Vec<AuditEntry>,
    /// Pass as `cursor` for the next (older) page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::Role;

    #[test]
    fn roles_round_trip_and_a_wrong_one_says_the_right_ones() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        let err = "owner".parse::<Role>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "`owner` is not a role; a role is `admin`, `member` or `viewer`"
        );
        assert!(Role::Viewer < Role::Member && Role::Member < Role::Admin);
    }
}
