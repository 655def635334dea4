//! The org's members: people and service tokens, each with a role and a token kept only as a
//! hash (`token`), what each role may do (`rights`), and a member's monthly usage against its
//! own limit (`usage`). The server's owner, over its Unix socket, is no row here: it is the
//! [`Actor::owner`], an admin.

mod rights;
pub(crate) mod token;
pub(crate) mod usage;

pub(crate) use rights::{Right, has, refusal};

use div_api::{CreateMember, Member, MemberCreated, MemberKind, Role};

use crate::fault::{StateError, state_errors};
use crate::store::{MemberRow, NewMember, Store};
use div_runtime::clock;

/// The name the server's own user goes by: in the audit log, on the runs it places, and to
/// `whoami` over the Unix socket. No member may take it.
pub(crate) const OWNER: &str = "owner";

/// Who is asking, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Actor {
    pub(crate) name: String,
    pub(crate) role: Role,
    /// The member's id in the store; `None` for the owner.
    pub(crate) member: Option<i64>,
    /// Where the request came from: an address, `unix socket`, `dashboard ADDRESS`.
    pub(crate) from: String,
}

impl Actor {
    /// The server's owner (an admin), asking from `from`.
    pub(crate) fn owner(from: impl Into<String>) -> Actor {
        Actor {
            name: OWNER.to_owned(),
            role: Role::Admin,
            member: None,
            from: from.into(),
        }
    }

    /// Whether its role has `right`.
    pub(crate) fn may(&self, right: Right) -> bool {
        has(self.role, right)
    }
}

/// The error returned by [`add`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum AddMemberError {
    #[error(
        "`{0}` is not a member's name: 1 to 63 lowercase letters, digits, `.`, `_` or `-`, starting with a letter or a digit"
    )]
    BadName(String),
    #[error("`owner` is the server's own user; choose another name")]
    Reserved,
    #[error("a member named `{0}` already exists; revoke it first to give the name again")]
    Taken(String),
    #[error(transparent)]
    Account(#[from] AccountError),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(AddMemberError);

/// A Slurm account outside what Slurm takes as one word.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a Slurm account: 1 to 64 letters, digits, `_`, `-` or `.`")]
pub(crate) struct AccountError(pub(crate) String);

/// The error returned by [`revoke`], [`set_limit`] and [`set_slurm_account`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum MemberError {
    #[error("no member `{0}`")]
    NoMember(String),
    #[error("a monthly limit is 0 cents or more, not {0}")]
    BadLimit(i64),
    #[error(transparent)]
    Account(#[from] AccountError),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(MemberError);

/// Refuses a name outside the rule: `[a-z0-9][a-z0-9._-]{0,62}`, and the owner's.
fn check_name(name: &str) -> Result<(), AddMemberError> {
    let first_ok = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if !first_ok || !rest_ok || name.len() > 63 {
        return Err(AddMemberError::BadName(name.to_owned()));
    }
    if name == OWNER {
        return Err(AddMemberError::Reserved);
    }
    Ok(())
}

/// Refuses an account Slurm would not take as one word on its command line.
fn check_account(account: &str) -> Result<(), AccountError> {
    let ok = !account.is_empty()
        && account.len() <= 64
        && account
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(AccountError(account.to_owned()))
    }
}

/// A stored member as the API shows it. A role the store holds and this div does not know
/// reads as the least, `viewer`.
pub(crate) fn shown(row: &MemberRow) -> Member {
    Member {
        name: row.name.clone(),
        role: row.role.parse().unwrap_or(Role::Viewer),
        kind: if row.kind == "service" {
            MemberKind::Service
        } else {
            MemberKind::User
        },
        created_at: row.created_at.clone(),
        last_used_at: row.last_used_at.clone(),
        revoked_at: row.revoked_at.clone(),
        monthly_limit_cents: row.monthly_limit_cents,
        slurm_account: row.slurm_account.clone(),
        extra: Default::default(),
    }
}

/// Adds a member, `by` whom: the member, and its token, which nothing keeps but its hash.
pub(crate) fn add(
    store: &Store,
    by: &Actor,
    request: &CreateMember,
) -> Result<MemberCreated, AddMemberError> {
    check_name(&request.name)?;
    if let Some(account) = &request.slurm_account {
        check_account(account)?;
    }
    let (token, id) = token::fresh()?;
    let secret = token::parts(&token).map(|p| p.secret).unwrap_or_default();
    let hash = token::hash(secret);
    let added = store.add_member(&NewMember {
        name: &request.name,
        kind: request.kind.as_str(),
        role: request.role.as_str(),
        token_id: &id,
        token_hash: &hash,
        created_at: &clock::now_rfc3339(),
        created_by: &by.name,
        slurm_account: request.slurm_account.as_deref(),
    });
    let row = match added {
        Ok(row) => row,
        Err(e) if e.is_unique_violation() => {
            return Err(AddMemberError::Taken(request.name.clone()));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(MemberCreated {
        member: shown(&row),
        token,
    })
}

/// Every member, revoked ones included, oldest first.
pub(crate) fn list(store: &Store) -> Result<Vec<Member>, StateError> {
    Ok(store.members()?.iter().map(shown).collect())
}

/// Revokes the live member `name`: its token is refused from now on.
pub(crate) fn revoke(store: &Store, name: &str) -> Result<Member, MemberError> {
    store
        .revoke_member(name, &clock::now_rfc3339())?
        .map(|row| shown(&row))
        .ok_or_else(|| MemberError::NoMember(name.to_owned()))
}

/// The live member `name`, or why there is none.
fn live(store: &Store, name: &str) -> Result<MemberRow, MemberError> {
    store
        .live_member(name)?
        .ok_or_else(|| MemberError::NoMember(name.to_owned()))
}

/// Sets (`None`: removes) the member's monthly usage limit, in cents.
pub(crate) fn set_limit(
    store: &Store,
    name: &str,
    cents: Option<i64>,
) -> Result<Member, MemberError> {
    if let Some(c) = cents.filter(|c| *c < 0) {
        return Err(MemberError::BadLimit(c));
    }
    let row = live(store, name)?;
    store
        .update_member(name, cents, row.slurm_account.as_deref())?
        .map(|row| shown(&row))
        .ok_or_else(|| MemberError::NoMember(name.to_owned()))
}

/// Sets (`None`: removes) the Slurm account the member's runs are charged to.
pub(crate) fn set_slurm_account(
    store: &Store,
    name: &str,
    account: Option<&str>,
) -> Result<Member, MemberError> {
    if let Some(account) = account {
        check_account(account)?;
    }
    let row = live(store, name)?;
    store
        .update_member(name, row.monthly_limit_cents, account)?
        .map(|row| shown(&row))
        .ok_or_else(|| MemberError::NoMember(name.to_owned()))
}

/// The live member whose token `given` is, as an [`Actor`] asking from `from`; `None` for a
/// token that is not one, or a revoked member's. Its use is noted (at most once a minute).
pub(crate) fn authenticate(
    store: &Store,
    given: &str,
    from: &str,
) -> Result<Option<Actor>, StateError> {
    let Some(parts) = token::parts(given) else {
        return Ok(None);
    };
    let Some(row) = store.member_by_token_id(parts.id)? else {
        // The same work as for a token that is found: no answer is quicker for a wrong id.
        let _ = token::matches(parts.secret, "");
        return Ok(None);
    };
    if !token::matches(parts.secret, &row.token_hash) || row.revoked_at.is_some() {
        return Ok(None);
    }
    note_use(store, &row)?;
    Ok(Some(actor(&row, from)))
}

/// The live member with this id (a session's), as an [`Actor`]; `None` once revoked.
pub(crate) fn still_live(store: &Store, id: i64, from: &str) -> Result<Option<Actor>, StateError> {
    Ok(store
        .member_by_id(id)?
        .filter(|row| row.revoked_at.is_none())
        .map(|row| actor(&row, from)))
}

fn actor(row: &MemberRow, from: &str) -> Actor {
    Actor {
        name: row.name.clone(),
        role: shown(row).role,
        member: Some(row.id),
        from: from.to_owned(),
    }
}

/// Notes that the member's token was used now, unless it was already this minute.
fn note_use(store: &Store, row: &MemberRow) -> Result<(), StateError> {
    let now = clock::now_rfc3339();
    let minute = |t: &str| t.get(..16).map(str::to_owned);
    if row.last_used_at.as_deref().and_then(minute) != minute(&now) {
        store.touch_member(row.id, &now)?;
    }
    Ok(())
}

/// The Slurm account of the live member `name`, where one is set.
pub(crate) fn slurm_account(
    store: &Store,
    name: &str,
) -> Result<Option<String>, crate::store::StoreError> {
    Ok(store.live_member(name)?.and_then(|m| m.slurm_account))
}

#[cfg(test)]
mod tests {
    use div_api::{CreateMember, MemberKind, Role};

    use super::{Actor, AddMemberError, add, authenticate, check_name, revoke, still_live};
    use crate::store::Store;

    fn request(name: &str, role: Role) -> CreateMember {
        CreateMember {
            name: name.into(),
            role,
            kind: MemberKind::User,
            slurm_account: None,
        }
    }

    #[test]
    fn names_follow_the_rule_and_owner_is_taken() {
        for good in ["alice", "a", "ci-bot.2", "0_x", &"a".repeat(63)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Alice", "-a", ".a", "a b", "a/b", "é", &"a".repeat(64)] {
            assert!(
                matches!(check_name(bad), Err(AddMemberError::BadName(_))),
                "{bad}"
            );
        }
        assert!(matches!(check_name("owner"), Err(AddMemberError::Reserved)));
    }

    /// A token is accepted while its member is live, and neither a changed one nor a revoked
    /// one is; the store holds its hash, never the token.
    #[test]
    fn a_token_is_its_member_until_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let by = Actor::owner("unix socket");
        let created = add(&store, &by, &request("alice", Role::Member)).unwrap();
        let alice = authenticate(&store, &created.token, "10.0.0.1")
            .unwrap()
            .expect("her token");
        assert_eq!((alice.name.as_str(), alice.role), ("alice", Role::Member));
        assert_eq!(alice.from, "10.0.0.1");
        let mut wrong = created.token.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == '0' { '1' } else { '0' });
        assert_eq!(authenticate(&store, &wrong, "x").unwrap(), None);
        assert_eq!(authenticate(&store, "div_nothing", "x").unwrap(), None);
        let id = alice.member.unwrap();
        assert!(still_live(&store, id, "x").unwrap().is_some());
        revoke(&store, "alice").unwrap();
        assert_eq!(authenticate(&store, &created.token, "x").unwrap(), None);
        assert_eq!(still_live(&store, id, "x").unwrap(), None);
        drop(store);
        // Neither the database nor its write-ahead log holds the secret.
        let secret = created.token.rsplit('_').next().unwrap();
        for file in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(file.unwrap().path()).unwrap();
            assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()));
        }
    }
}
