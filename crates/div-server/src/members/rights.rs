//! What a role may do: each [`Right`] and the least [`Role`] that has it. `http::auth` says
//! which right each route needs; this says who has it.

use div_api::Role;

/// A right a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Right {
    /// Read runs, their logs, results and telemetry, the catalogue, the dashboard.
    Read,
    /// Place runs (and ask whether one would be placed, and pull its image).
    PlaceRuns,
    /// Stop the runs one placed.
    StopOwnRuns,
    /// Stop anyone's run.
    StopAnyRun,
    /// Make volumes, put files into them and get them out.
    UseVolumes,
    /// Remove a volume and everything in it.
    RemoveVolumes,
    /// List the secrets' names (never their values: no route answers those).
    ListSecrets,
    /// Set and remove secrets.
    ManageSecrets,
    /// Add members and service tokens, revoke them, set their limits and accounts.
    ManageMembers,
    /// The org's usage limit, the image cache's prune, the owner's dashboard link.
    ManageOrg,
    /// Read the audit log.
    ReadAudit,
}

impl Right {
    /// Every right.
    #[cfg(test)]
    pub(crate) const ALL: [Right; 11] = [
        Right::Read,
        Right::PlaceRuns,
        Right::StopOwnRuns,
        Right::StopAnyRun,
        Right::UseVolumes,
        Right::RemoveVolumes,
        Right::ListSecrets,
        Right::ManageSecrets,
        Right::ManageMembers,
        Right::ManageOrg,
        Right::ReadAudit,
    ];

    /// The least role that has it: every role above has it too.
    pub(crate) fn least_role(self) -> Role {
        match self {
            Right::Read => Role::Viewer,
            Right::PlaceRuns | Right::StopOwnRuns | Right::UseVolumes | Right::ListSecrets => {
                Role::Member
            }
            Right::StopAnyRun
            | Right::RemoveVolumes
            | Right::ManageSecrets
            | Right::ManageMembers
            | Right::ManageOrg
            | Right::ReadAudit => Role::Admin,
        }
    }

    /// Its name on the wire (`details.right` of a 403): `place_runs`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::PlaceRuns => "place_runs",
            Right::StopOwnRuns => "stop_own_runs",
            Right::StopAnyRun => "stop_any_run",
            Right::UseVolumes => "use_volumes",
            Right::RemoveVolumes => "remove_volumes",
            Right::ListSecrets => "list_secrets",
            Right::ManageSecrets => "manage_secrets",
            Right::ManageMembers => "manage_members",
            Right::ManageOrg => "manage_org",
            Right::ReadAudit => "read_audit",
        }
    }

    /// What it lets one do, in words: `place runs`.
    pub(crate) fn words(self) -> &'static str {
        match self {
            Right::Read => "read runs",
            Right::PlaceRuns => "place runs",
            Right::StopOwnRuns => "stop runs",
            Right::StopAnyRun => "stop another member's run",
            Right::UseVolumes => "put and get volumes",
            Right::RemoveVolumes => "remove volumes",
            Right::ListSecrets => "list secrets",
            Right::ManageSecrets => "set and remove secrets",
            Right::ManageMembers => "manage members",
            Right::ManageOrg => "manage the org",
            Right::ReadAudit => "read the audit log",
        }
    }
}

/// Whether `role` has `right`.
pub(crate) fn has(role: Role, right: Right) -> bool {
    role >= right.least_role()
}

/// Why `name`, whose role is `role`, may not do what `right` lets one do: the refusal's words,
/// naming the right and the roles that have it.
pub(crate) fn refusal(name: &str, role: Role, right: Right) -> String {
    let roles: Vec<String> = Role::ALL
        .into_iter()
        .filter(|r| has(*r, right))
        .map(|r| format!("`{r}`"))
        .collect();
    format!(
        "`{name}` ({role}) may not {}: that needs the right `{}`, which the {} role{} {}",
        right.words(),
        right.as_str(),
        roles.join(" and "),
        if roles.len() == 1 { "" } else { "s" },
        if roles.len() == 1 { "has" } else { "have" },
    )
}

#[cfg(test)]
mod tests {
    use div_api::Role;

    use super::{Right, has, refusal};

    /// The roles table of docs/team.md, right by right.
    #[test]
    fn the_roles_table() {
        let table: Vec<(&str, [bool; 3])> = Right::ALL
            .iter()
            .map(|&r| (r.as_str(), Role::ALL.map(|role| has(role, r))))
            .collect();
        let (v, m, a) = (Role::Viewer, Role::Member, Role::Admin);
        assert_eq!(Role::ALL, [v, m, a]);
        assert_eq!(
            table,
            [
                ("read", [true, true, true]),
                ("place_runs", [false, true, true]),
                ("stop_own_runs", [false, true, true]),
                ("stop_any_run", [false, false, true]),
                ("use_volumes", [false, true, true]),
                ("remove_volumes", [false, false, true]),
                ("list_secrets", [false, true, true]),
                ("manage_secrets", [false, false, true]),
                ("manage_members", [false, false, true]),
                ("manage_org", [false, false, true]),
                ("read_audit", [false, false, true]),
            ]
        );
    }

    #[test]
    fn a_refusal_names_the_right_and_who_has_it() {
        assert_eq!(
            refusal("bob", Role::Viewer, Right::PlaceRuns),
            "`bob` (viewer) may not place runs: that needs the right `place_runs`, which the `member` and `admin` roles have"
        );
        assert_eq!(
            refusal("carol", Role::Member, Right::StopAnyRun),
            "`carol` (member) may not stop another member's run: that needs the right `stop_any_run`, which the `admin` role has"
        );
    }
}
