//! What placing, reading and stopping a run can refuse or fail with. `http::refusal` alone
//! decides each one's status; the words are the client's.

use crate::fault::{StateError, state_errors};
use crate::images::ResolveError;
use crate::members::usage::MemberUsage;
use crate::org::Usage;

/// The error of placing a run (`POST /v1/runs`), or of asking whether it would be placed
/// (`POST /v1/runs/validate`): the same refusals, in the same order.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateRunError {
    #[error("the run is not valid JSON: {0}")]
    NotJson(String),
    #[error("the `Idempotency-Key` header is required")]
    NoKey,
    #[error("{0}")]
    Unreadable(String),
    #[error("the run has no project")]
    NoProject,
    /// A project, run or volume name outside its rule (the rule's words).
    #[error("{0}")]
    Name(String),
    #[error(
        "the code's path `{0}` is not a path inside a volume: relative, `/`-separated, with no empty, `.` or `..` part, like `code/9f31c2ab`"
    )]
    CodePath(String),
    #[error("unknown SKU `{sku}`; this machine takes {}", .accepted.join(", "))]
    UnknownSku { sku: String, accepted: Vec<String> },
    /// A size the SKU cannot have (div-pricing's words).
    #[error("{0}")]
    Size(String),
    #[error("this machine has {have} {label}; the run asks for {asked}")]
    TooManyGpus {
        have: u32,
        label: String,
        asked: u32,
    },
    #[error("this machine has {host} cores; the run asks for {asked}")]
    TooManyCores { host: u32, asked: u32 },
    #[error("this machine has {host} GiB of memory; the run asks for {asked} GiB")]
    TooMuchMemory { host: u32, asked: u32 },
    #[error(transparent)]
    Image(#[from] ResolveError),
    #[error("`max_spend_cents` must be more than 0, not `{0}`")]
    MaxSpend(i64),
    /// A check that does not parse (div-spec's words).
    #[error("{0}")]
    Check(String),
    #[error("an environment variable is refused: {0}")]
    EnvName(String),
    /// A variable's value, the stop grace, or the whole environment refused.
    #[error("{0}")]
    Env(String),
    #[error("the code `{volume}/{path}` is not in a volume")]
    NoCode { volume: String, path: String },
    /// The executor can never place it (its words).
    #[error("{0}")]
    Unplaceable(String),
    /// The org's usage limit is reached; `message` says it with the settings file.
    #[error("{message}")]
    UsageLimit { usage: Usage, message: String },
    /// The member's own monthly limit is reached; `message` says it.
    #[error("{message}")]
    MemberLimit { usage: MemberUsage, message: String },
    #[error("a run named `{0}` already exists")]
    NameTaken(String),
    #[error("the idempotency key `{0}` was used for another run")]
    KeyReused(String),
    /// An eval run's model reference names no version there is.
    #[error(transparent)]
    Model(#[from] crate::models::ResolveModelError),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(CreateRunError);

/// The error of reading a run (one, a page, its result, its telemetry) or stopping one.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("no run `{0}`")]
    NoRun(String),
    #[error("`{0}` is not a cursor")]
    BadCursor(String),
    /// A project outside its rule, and no run stored under it (the rule's words).
    #[error("{0}")]
    BadProject(String),
    /// Stopping another member's run, by one whose role may stop only its own (`refusal`
    /// names the right; `run` and `owner` say whose it is).
    #[error("{refusal}; `{run}` was placed by `{owner}`")]
    NotYours {
        run: String,
        owner: String,
        refusal: String,
        role: div_api::Role,
        actor: String,
    },
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(RunError);
