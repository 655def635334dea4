//! `div server`'s arguments for a team's control plane (docs/team.md): how it serves the
//! org's members (`--listen`), and `div server users`, `tokens`, `audit` and `limit`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use div_spec::Money;

/// How the local control plane serves an org's members, beside its owner's Unix socket.
#[derive(Debug, Clone, Default, Args)]
#[command(
    after_help = "Members reach a control plane served with --listen from their own \
machines: `div login --api-url https://HOST:PORT` with the token `div server users add` \
printed for them. The same keys in the state directory's settings.json (`listen`, `tls_cert`, \
`tls_key`) serve it whenever the server starts. Plain HTTP is refused on an address that is \
not loopback. How to deploy it: https://github.com/divergentlabs/div/blob/main/docs/team.md"
)]
pub(crate) struct ServeArgs {
    /// Also serve the API and the dashboard to the org's members on this address, like
    /// `0.0.0.0:8443`
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// The TLS certificate chain for --listen (PEM)
    #[arg(long, value_name = "FILE", requires_all = ["listen", "tls_key"])]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key (PEM)
    #[arg(long, value_name = "FILE", requires_all = ["listen", "tls_cert"])]
    pub(crate) tls_key: Option<PathBuf>,
}

/// A member's role, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RoleArg {
    /// Reads runs, logs, results, telemetry and the dashboard; changes nothing
    Viewer,
    /// Places runs, stops their own, puts and gets volumes, lists secrets' names
    Member,
    /// Everything, members and secrets included
    Admin,
}

impl From<RoleArg> for div_api::Role {
    fn from(role: RoleArg) -> div_api::Role {
        match role {
            RoleArg::Viewer => div_api::Role::Viewer,
            RoleArg::Member => div_api::Role::Member,
            RoleArg::Admin => div_api::Role::Admin,
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum UsersCommand {
    /// Add a member: their token is printed once, on stdout
    #[command(after_help = "Examples:
  div server users add alice --role member
  div server users add bob --role viewer
  div server users add carol --role admin --slurm-account vision")]
    Add {
        /// The member's name: lowercase letters, digits, `.`, `_` and `-`
        #[arg(value_name = "NAME")]
        name: String,
        /// What they may do
        #[arg(long, value_name = "ROLE", value_enum)]
        role: RoleArg,
        /// The Slurm account their runs are charged to, on a Slurm cluster
        #[arg(long, value_name = "ACCOUNT")]
        slurm_account: Option<String>,
        /// Print the member and the token as JSON
        #[arg(long)]
        json: bool,
    },
    /// List the members: name, role, when each was made and last used, limit, status
    Ls {
        /// Print the members as JSON
        #[arg(long)]
        json: bool,
    },
    /// Revoke a member's token, at once
    Revoke {
        /// The member's name
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Set a member's monthly usage limit or Slurm account
    #[command(after_help = "Examples:
  div server users set alice --monthly-limit 50
  div server users set alice --monthly-limit none --slurm-account vision")]
    Set {
        /// The member's name
        #[arg(value_name = "NAME")]
        name: String,
        /// Dollars a calendar month (UTC) their runs may spend, beside the org's limit; `none`
        /// removes it
        #[arg(long, value_name = "USD|none", value_parser = money_or_none)]
        monthly_limit: Option<LimitArg>,
        /// The Slurm account their runs are charged to; `none` removes it
        #[arg(long, value_name = "ACCOUNT|none")]
        slurm_account: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokensCommand {
    /// Add a service token (for CI): printed once, on stdout
    #[command(after_help = "Example:
  div server tokens add ci --role member")]
    Add {
        /// The token's name
        #[arg(value_name = "NAME")]
        name: String,
        /// What it may do
        #[arg(long, value_name = "ROLE", value_enum)]
        role: RoleArg,
        /// Print it and its token as JSON
        #[arg(long)]
        json: bool,
    },
    /// List the service tokens
    Ls {
        /// Print them as JSON
        #[arg(long)]
        json: bool,
    },
    /// Revoke a service token, at once
    Revoke {
        /// The token's name
        #[arg(value_name = "NAME")]
        name: String,
    },
}

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// How many entries at most
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub(crate) limit: u32,
    /// Print the entries as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  div server limit 500
  div server limit none")]
pub(crate) struct OrgLimitArgs {
    /// Dollars a calendar month (UTC) across every run; `none` removes the limit
    #[arg(value_name = "USD|none", value_parser = money_or_none)]
    pub(crate) limit: LimitArg,
}

/// A limit as typed: an amount, or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LimitArg {
    Amount(Money),
    None,
}

impl LimitArg {
    /// In cents; `None` for none.
    pub(crate) fn cents(self) -> Option<i64> {
        match self {
            LimitArg::Amount(m) => Some(m.cents()),
            LimitArg::None => None,
        }
    }
}

/// `50`, `$50.00` or `none`.
fn money_or_none(typed: &str) -> Result<LimitArg, String> {
    if typed == "none" {
        return Ok(LimitArg::None);
    }
    match typed.parse::<Money>() {
        Ok(money) => Ok(LimitArg::Amount(money)),
        // A limit of nothing is one: every run of its member stops, and none starts.
        Err(div_spec::MoneyError::Zero { .. }) => Ok(LimitArg::Amount(Money::from_cents(0))),
        Err(e) => Err(format!("{e}; or `none` for no limit")),
    }
}
