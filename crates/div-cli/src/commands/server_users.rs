//! `div server users`, `div server tokens`, `div server audit` and `div server limit`: a team's
//! control plane (docs/team.md), the one the settings name: the local one, whose owner is an
//! admin over its Unix socket, or a remote one with an admin's token.

use div_api::{AuditEntry, CreateMember, Member, MemberKind};
use div_core::MemberChange;

use super::shared::connect::connect;
use super::shared::output::{columns, failure, output_failure, print_json};
use crate::args::{AuditArgs, OrgLimitArgs, RoleArg, TokensCommand, UsersCommand};
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn users(
    command: UsersCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    match command {
        UsersCommand::Add {
            name,
            role,
            slurm_account,
            json,
        } => {
            let kind = MemberKind::User;
            add(settings, printer, (name, role, kind, slurm_account), json).await
        }
        UsersCommand::Ls { json } => list(settings, printer, MemberKind::User, json).await,
        UsersCommand::Revoke { name } => revoke(settings, printer, &name).await,
        UsersCommand::Set {
            name,
            monthly_limit,
            slurm_account,
        } => {
            let change = MemberChange {
                monthly_limit_cents: monthly_limit.map(|l| l.cents()),
                slurm_account: slurm_account.map(|a| Some(a).filter(|a| a != "none")),
            };
            let cp = connect(settings).await?;
            let member = div_core::member_set(&*cp, &name, &change)
                .await
                .map_err(failure)?;
            printer.status(&format!("`{}`: {}", member.name, settings_words(&member)));
            Ok(exit_codes::SUCCESS)
        }
    }
}

pub(crate) async fn tokens(
    command: TokensCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    match command {
        TokensCommand::Add { name, role, json } => {
            let kind = MemberKind::Service;
            add(settings, printer, (name, role, kind, None), json).await
        }
        TokensCommand::Ls { json } => list(settings, printer, MemberKind::Service, json).await,
        TokensCommand::Revoke { name } => revoke(settings, printer, &name).await,
    }
}

/// Adds a member or a service token; the token goes to stdout (alone, unless `--json`), this
/// once.
async fn add(
    settings: &Settings,
    printer: &mut Printer,
    (name, role, kind, slurm_account): (String, RoleArg, MemberKind, Option<String>),
    json: bool,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let request = CreateMember {
        name,
        role: role.into(),
        kind,
        slurm_account,
    };
    let created = div_core::member_add(&*cp, &request)
        .await
        .map_err(failure)?;
    if json {
        print_json(printer, &created)?;
    } else {
        printer.data(&created.token).map_err(output_failure)?;
    }
    let what = match kind {
        MemberKind::User => "member",
        MemberKind::Service => "service token",
    };
    printer.status(&format!(
        "added the {what} `{}` ({}); the token above is shown this once: hand it over privately; with it, `div login --api-url https://HOST:PORT` reaches this control plane",
        created.member.name, created.member.role
    ));
    Ok(exit_codes::SUCCESS)
}

async fn list(
    settings: &Settings,
    printer: &mut Printer,
    kind: MemberKind,
    json: bool,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let members: Vec<Member> = div_core::members(&*cp)
        .await
        .map_err(failure)?
        .into_iter()
        .filter(|m| m.kind == kind)
        .collect();
    if json {
        print_json(printer, &members)?;
        return Ok(exit_codes::SUCCESS);
    }
    if members.is_empty() {
        printer.status(match kind {
            MemberKind::User => {
                "no members yet; `div server users add NAME --role member` adds one"
            }
            MemberKind::Service => {
                "no service tokens yet; `div server tokens add NAME --role member` adds one"
            }
        });
        return Ok(exit_codes::SUCCESS);
    }
    printer
        .data(&columns(&member_rows(&members)))
        .map_err(output_failure)?;
    Ok(exit_codes::SUCCESS)
}

/// The members as rows, a header first.
fn member_rows(members: &[Member]) -> Vec<Vec<String>> {
    let header = [
        "NAME",
        "ROLE",
        "CREATED",
        "LAST USED",
        "LIMIT",
        "ACCOUNT",
        "STATUS",
    ];
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for m in members {
        rows.push(vec![
            m.name.clone(),
            m.role.to_string(),
            minute(&m.created_at),
            m.last_used_at.as_deref().map_or("never".into(), minute),
            m.monthly_limit_cents
                .map_or("-".into(), |c| div_spec::Money::from_cents(c).to_string()),
            m.slurm_account.clone().unwrap_or_else(|| "-".into()),
            match &m.revoked_at {
                Some(at) => format!("revoked {}", minute(at)),
                None => "active".into(),
            },
        ]);
    }
    rows
}

/// `2026-11-02 14:03Z` from an RFC 3339 time in UTC; as it is when it is not one.
fn minute(t: &str) -> String {
    match (t.get(..10), t.get(11..16)) {
        (Some(day), Some(time)) if t.ends_with('Z') => format!("{day} {time}Z"),
        _ => t.to_owned(),
    }
}

/// A member's limit and account, in words.
fn settings_words(m: &Member) -> String {
    let limit = m
        .monthly_limit_cents
        .map_or("no monthly limit of its own".into(), |c| {
            format!("a monthly limit of {}", div_spec::Money::from_cents(c))
        });
    let account = m
        .slurm_account
        .as_ref()
        .map_or("the cluster's default Slurm account".into(), |a| {
            format!("the Slurm account `{a}`")
        });
    format!("{limit}; {account}")
}

async fn revoke(settings: &Settings, printer: &mut Printer, name: &str) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let member = div_core::member_revoke(&*cp, name).await.map_err(failure)?;
    printer.status(&format!(
        "revoked `{}`: its token is refused from now on",
        member.name
    ));
    Ok(exit_codes::SUCCESS)
}

pub(crate) async fn audit(
    args: AuditArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let (list, more) = div_core::audit(&*cp, args.limit.max(1))
        .await
        .map_err(failure)?;
    if args.json {
        print_json(printer, &list.entries)?;
        return Ok(exit_codes::SUCCESS);
    }
    if list.entries.is_empty() {
        printer.status("the audit log is empty");
        return Ok(exit_codes::SUCCESS);
    }
    printer
        .data(&columns(&audit_rows(&list.entries)))
        .map_err(output_failure)?;
    if more {
        printer.status(&format!(
            "the newest {}; `--limit` shows more",
            list.entries.len()
        ));
    }
    Ok(exit_codes::SUCCESS)
}

/// The entries as rows, a header first; what a run or a member provided is shown as text
/// that cannot move the terminal.
fn audit_rows(entries: &[AuditEntry]) -> Vec<Vec<String>> {
    let mut rows = vec![
        ["WHEN", "MEMBER", "ACTION", "TARGET", "FROM"]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    ];
    for e in entries {
        let target = if e.target.is_empty() { "-" } else { &e.target };
        rows.push(vec![
            e.at.get(..19).unwrap_or(&e.at).replace('T', " ") + "Z",
            div_spec::terminal_safe(&e.member).into_owned(),
            div_spec::terminal_safe(&e.action).into_owned(),
            div_spec::terminal_safe(target).into_owned(),
            div_spec::terminal_safe(&e.from).into_owned(),
        ]);
    }
    rows
}

pub(crate) async fn org_limit(
    args: OrgLimitArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let now = div_core::org_limit(&*cp, args.limit.cents())
        .await
        .map_err(failure)?;
    printer.status(&match now.monthly_limit_cents {
        Some(c) => format!(
            "the org's monthly usage limit is {}",
            div_spec::Money::from_cents(c)
        ),
        None => "the org has no monthly usage limit".to_owned(),
    });
    Ok(exit_codes::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::minute;

    #[test]
    fn times_are_shown_to_the_minute() {
        assert_eq!(minute("2026-11-02T14:03:12.123Z"), "2026-11-02 14:03Z");
        assert_eq!(minute("yesterday"), "yesterday");
    }
}
