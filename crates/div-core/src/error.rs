//! The error div-core's actions return.

use std::path::PathBuf;

use div_api::{ApiError, ErrorKind};

use crate::project::ProjectError;

/// What kind of failure a [`RunError`] is, so a caller can choose an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// What was typed is wrong; nothing was created.
    Refused,
    /// The run (or other thing) asked for does not exist.
    NotFound,
    /// The control plane could not be reached.
    Unreachable,
    /// The control plane refused the credentials.
    Unauthorized,
    /// The control plane failed or answered something unreadable.
    ControlPlane,
    /// Something on this machine failed (reading a file).
    Local,
}

/// The error returned by every div-core action: [`crate::run()`], [`crate::logs()`],
/// [`crate::stop()`], [`crate::runs()`], the storage, secrets, image, result and telemetry
/// calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// No entrypoint was given.
    #[error("there is nothing to run")]
    NoEntrypoint,
    /// The entrypoint cannot be read.
    #[error(transparent)]
    Entrypoint(#[from] div_spec::EntrypointError),
    /// The entrypoint's file is not in what will be shipped.
    #[error("`{file}` is not in what will be shipped from `{}`", dir.display())]
    EntrypointNotShipped { file: String, dir: PathBuf },
    /// The entrypoint's file is not shipped, and one that is looks like what was meant.
    #[error("`{file}` is not in what will be shipped")]
    EntrypointMisspelled { file: String, meant: String },
    /// `file.py::function`, and the file surely defines no such name at module level.
    #[error("`{file}` defines no top-level `{function}`")]
    NoSuchFunction {
        file: String,
        function: String,
        /// The defined name closest to `function`, if one is close.
        meant: Option<String>,
        /// Every name the file defines at module level.
        defined: Vec<String>,
    },
    /// The user's own command starts with a shipped `.py` file that `sh` cannot run.
    #[error("`{first}` cannot be run as a command: {why}")]
    ScriptNotRunnable {
        first: String,
        why: String,
        /// The `python` form that works.
        meant: String,
    },
    /// The org's usage limit for the month is reached: no run is placed until the month
    /// ends or the limit is raised.
    #[error("the org usage limit of {limit} is reached: {spent} spent in {month}")]
    OrgLimitReached {
        limit: div_spec::Money,
        spent: div_spec::Money,
        month: String,
    },
    /// The project cannot be resolved.
    #[error(transparent)]
    Project(#[from] ProjectError),
    /// A volume's name (`--volume`, `div storage put NAME`) is not a volume name; `message`
    /// (div-spec's) names it and says what would be.
    #[error("{message}")]
    Volume { name: String, message: String },
    /// A file named on the command line could not be read.
    #[error("could not read `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// What would be shipped cannot be.
    #[error(transparent)]
    Ship(#[from] div_ship::ShipError),
    /// The SKU is not one the control plane accepts.
    #[error(transparent)]
    UnknownSku(#[from] div_spec::UnknownSku),
    /// The SKU is a real one, but this control plane does not offer it (the local one offers
    /// only the GPUs its machine has).
    #[error("this control plane has no `{sku}`; it accepts {}", accepted.join(", "))]
    SkuNotOffered { sku: String, accepted: Vec<String> },
    /// The container asked for cannot be had.
    #[error(transparent)]
    Sizing(#[from] div_pricing::SizingError),
    /// No run has that name or id.
    #[error("there is no run `{0}`")]
    RunNotFound(String),
    /// No run was named, and the project has none to act on.
    #[error("project `{0}` has no runs yet, so there is no latest run to act on")]
    NoRuns(String),
    /// A `NAME[/PATH]` or `--to` that names no place in a volume.
    #[error("`{typed}` is not a place in a volume: {message}")]
    VolumePath { typed: String, message: String },
    /// No volume has that name.
    #[error("there is no volume `{0}`")]
    VolumeNotFound(String),
    /// Nothing in the volume at that path.
    #[error("there is nothing at `{path}` in volume `{volume}`")]
    NotInVolume { volume: String, path: String },
    /// `div storage put` found something in its way in the volume: a folder where it has a
    /// file, a file or a link where it needs a folder. `message` is the control plane's, which
    /// names the path and what is there.
    #[error("{message}")]
    PutConflict {
        volume: String,
        path: String,
        message: String,
    },
    /// `div storage get` would overwrite a local file.
    #[error("`{}` already exists", path.display())]
    WouldOverwrite { path: PathBuf },
    /// `div storage put` of something that is neither a file nor a folder.
    #[error("`{}` is {kind}; `div storage put` sends files and folders", path.display())]
    NotAFileOrFolder { path: PathBuf, kind: &'static str },
    /// `div storage get` would write through a link.
    #[error(
        "`{}` is a link{}; `div storage get` never writes through a link",
        link.display(),
        if path == link { String::new() } else { format!(", and `{}` is under it", path.display()) }
    )]
    ThroughLink { path: PathBuf, link: PathBuf },
    /// A local file could not be written.
    #[error("could not write `{}`", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A secret's name is not an environment variable's.
    #[error("`{0}` is not a secret name: use letters, digits and `_`, not starting with a digit")]
    SecretName(String),
    /// No secret has that name.
    #[error("there is no secret `{0}`")]
    SecretNotFound(String),

    #[error("{message}")]
    ModelName { name: String, message: String },

    #[error("`{}` is {kind}; a model's version is a folder or a file", path.display())]
    ModelNotAFileOrFolder { path: PathBuf, kind: &'static str },

    #[error("`{}` holds no file to push", .0.display())]
    EmptyModel(PathBuf),

    #[error("there is no `{0}`")]
    NoModelVersion(String),
    /// The control plane keeps no image cache (a hosted one, or one from before image
    /// caches): `div image ls` and `div image prune` have nothing to `what`.
    #[error("this control plane has no image cache to {what}")]
    NoImageCache { what: &'static str },
    /// The control plane has no members (an older one, or one that is not shared by an org):
    /// there are none to `what`.
    #[error("this control plane has no members to {what}")]
    NoTeam { what: &'static str },
    /// No live member has that name.
    #[error("there is no member `{0}`")]
    MemberNotFound(String),
    /// A telemetry layout cannot be read.
    #[error("the telemetry layout is not valid: {0}")]
    Layout(String),
    /// The layout a run would be given (`--telemetry FILE`, or a shipped `telemetry.toml`)
    /// cannot be read; found before anything is created.
    #[error("`{}` is not a valid telemetry layout: {message}", path.display())]
    LayoutFile { path: PathBuf, message: String },
    /// `--name` is not a run name.
    #[error(transparent)]
    RunName(#[from] div_spec::RunNameError),
    /// The `--env` variables cannot be a run's environment (together past its size).
    #[error(transparent)]
    Env(#[from] div_spec::EnvError),
    /// `--name` names a run that exists.
    #[error("a run named `{0}` already exists")]
    NameTaken(String),
    /// More GPUs than the control plane has.
    #[error("this control plane has {have} {sku}; the run asks for {asked}")]
    TooManyGpus { sku: String, asked: u32, have: u32 },
    /// A run named by an empty or unusable word (`div logs ''`).
    #[error("`{typed}` does not name a run: {why}")]
    BadRunRef { typed: String, why: &'static str },
    /// While `run` was followed its control plane stopped answering, and it still had not
    /// answered when the run could no longer be going (its latest end, grace and margin
    /// passed), `waited` after it was found away (zero: all that was past already).
    #[error(
        "the control plane {}, and {run} cannot still be going",
        if waited.as_secs() == 0 {
            "does not answer".to_owned()
        } else {
            format!("has not answered in {}", div_spec::format_duration(waited.as_secs()))
        }
    )]
    ControlPlaneGone {
        run: String,
        waited: std::time::Duration,
        #[source]
        source: ApiError,
    },
    /// The control plane failed at a step.
    #[error("could not {during}")]
    Api {
        during: &'static str,
        #[source]
        source: ApiError,
    },
}

impl RunError {
    pub(crate) fn api(during: &'static str, source: ApiError) -> RunError {
        RunError::Api { during, source }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> FailureKind {
        match self {
            // A file named on the command line that is not there is what was typed.
            RunError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                FailureKind::Refused
            }
            RunError::Read { .. } => FailureKind::Local,
            RunError::Ship(div_ship::ShipError::Io { .. } | div_ship::ShipError::Git { .. }) => {
                FailureKind::Local
            }
            RunError::RunNotFound(_)
            | RunError::NoRuns(_)
            | RunError::VolumeNotFound(_)
            | RunError::NotInVolume { .. }
            | RunError::SecretNotFound(_)
            | RunError::NoModelVersion(_)
            | RunError::MemberNotFound(_)
            | RunError::NoTeam { .. }
            | RunError::NoImageCache { .. } => FailureKind::NotFound,
            RunError::Write { .. } => FailureKind::Local,
            RunError::ControlPlaneGone { .. } => FailureKind::Unreachable,
            RunError::Api { source, .. } => match source.kind() {
                ErrorKind::NotFound => FailureKind::NotFound,
                ErrorKind::Refused | ErrorKind::Conflict => FailureKind::Refused,
                ErrorKind::Unauthorized => FailureKind::Unauthorized,
                ErrorKind::Unavailable => FailureKind::Unreachable,
                ErrorKind::Io => FailureKind::Local,
                _ => FailureKind::ControlPlane,
            },
            _ => FailureKind::Refused,
        }
    }

    /// What would be right, for a person, when there is something to say.
    pub fn hint(&self) -> Option<String> {
        match self {
            RunError::OrgLimitReached { .. } => Some(
                "no run starts until the month ends or the org's limit is raised; nothing was uploaded or placed"
                    .to_owned(),
            ),
            RunError::NoEntrypoint => Some(
                "name what to run: `div run train.py::run`, `div run train.py` or \
                 `div run -- torchrun --nproc-per-node 8 train.py`"
                    .into(),
            ),
            RunError::EntrypointNotShipped { .. } => {
                Some("run div where the code is, or check that git is not ignoring the file".into())
            }
            RunError::EntrypointMisspelled { meant, .. } => {
                Some(format!("did you mean `{meant}`?"))
            }
            RunError::NoSuchFunction {
                file,
                meant: Some(meant),
                ..
            } => Some(format!(
                "did you mean `{meant}`? (`div run {file}::{meant}`)"
            )),
            RunError::NoSuchFunction { defined, .. } if defined.is_empty() => {
                Some("it defines no names at module level".into())
            }
            RunError::NoSuchFunction { defined, .. } => {
                let mut shown: Vec<String> =
                    defined.iter().take(12).map(|n| format!("`{n}`")).collect();
                if defined.len() > shown.len() {
                    shown.push("…".into());
                }
                Some(format!("it defines {}", shown.join(", ")))
            }
            RunError::ScriptNotRunnable { meant, .. } => {
                Some(format!("run it with Python: `{meant}`"))
            }
            RunError::Project(e) => e.hint(),
            RunError::Ship(e) => e.hint(),
            RunError::RunNotFound(_) => Some("`div runs` lists them".into()),
            RunError::NoRuns(_) => Some(
                "name a run (`div runs --all` lists every project's), or start one with `div run`"
                    .into(),
            ),
            RunError::VolumeNotFound(_) => Some("`div storage ls` lists them".into()),
            RunError::NotInVolume { volume, .. } => {
                Some(format!("`div storage ls {volume}` lists what it holds"))
            }
            RunError::PutConflict { .. } => Some(
                "put it somewhere new in the volume with `--to DIR`, or into another volume".into(),
            ),
            RunError::ThroughLink { .. } => Some(
                "get it into a new directory, or remove the link from the destination first".into(),
            ),
            RunError::NotAFileOrFolder { .. } => {
                Some("put the files it holds, or copy them into a folder first".into())
            }
            RunError::WouldOverwrite { .. } => {
                Some("get it into a new directory, or move the file away first".into())
            }
            RunError::SecretNotFound(_) => Some("`div secrets ls` lists them".into()),
            RunError::NoImageCache { .. } => Some(
                "`div image` is for the local control plane's own cache; a hosted control plane keeps its images itself"
                    .into(),
            ),
            RunError::NameTaken(_) => {
                Some("choose another `--name`, or leave it out for a generated one".into())
            }
            RunError::ControlPlaneGone { run, .. } => Some(format!(
                "once the control plane answers again, `div logs {run}` shows how the run ended"
            )),
            RunError::BadRunRef { .. } => {
                Some("name a run by its name (`run-k4t9`) or id; `div runs` lists them".into())
            }
            RunError::LayoutFile { .. } => Some(
                "a layout is `[[chart]]` tables, each with `series = [\"loss\"]` and optional \
                 `title` and `x` (`div telemetry --help`)"
                    .into(),
            ),
            RunError::SkuNotOffered { accepted, .. } => Some(format!(
                "the local control plane offers the GPUs this machine has; run on its cores with \
                 `--gpu {}`, or declare emulated GPUs to try things out with \
                 `DIVERGENT_EMULATE_GPUS=h100:8` (`div server --help`)",
                if accepted.iter().any(|s| s == "cpu") {
                    "cpu"
                } else {
                    accepted.first().map(String::as_str).unwrap_or("cpu")
                }
            )),
            RunError::NoTeam { .. } => Some(
                "members are a team's control plane's: serve one with `div server start --listen ADDR --tls-cert FILE --tls-key FILE` (https://github.com/divergentlabs/div/blob/main/docs/team.md)"
                    .into(),
            ),
            RunError::MemberNotFound(_) => Some("`div server users ls` lists them".into()),
            RunError::Api { source, .. } => api_hint(source),
            _ => None,
        }
    }
}

/// What would be right after the control plane refused or failed a request: a role with the
/// right it names (403), a token it takes (401), a wait (429), a registry it reaches.
fn api_hint(source: &div_api::ApiError) -> Option<String> {
    match (source.kind(), source.code()) {
        (ErrorKind::Unauthorized, Some("forbidden")) => {
            let details = source.details();
            let role = details["role"].as_str().unwrap_or("?");
            let needs = details["needs"].as_str().unwrap_or("another");
            Some(match details["placed_by"].as_str() {
                Some(owner) => format!(
                    "ask `{owner}` or an admin of this control plane to stop it (it needs the `{needs}` role; yours is `{role}`)"
                ),
                None => format!(
                    "ask an admin of this control plane for a token with the `{needs}` role or above (yours is `{role}`)"
                ),
            })
        }
        (ErrorKind::Unauthorized, _) => Some(
            "the token was refused: it may be revoked or mistyped; ask an admin for one and store it with `div login --api-url URL` (or set DIVERGENT_TOKEN)"
                .into(),
        ),
        (_, Some("too_many_attempts")) => Some(
            "too many bad tokens came from this address: wait, then use a member's token (`div login --api-url URL`)"
                .into(),
        ),
        _ => unreachable_registry(source),
    }
}

/// What to do when the control plane cannot reach an image's registry: where its own system
/// stands in for the default image, leave `--image` out; else reach the registry, or use one
/// that is reached.
fn unreachable_registry(source: &div_api::ApiError) -> Option<String> {
    let details = source.details();
    let registry = details.get("registry_unreachable")?.as_str()?;
    let registry = div_spec::terminal_safe(registry);
    Some(
        if details.get("host_stands_in").and_then(|v| v.as_bool()) == Some(true) {
            format!(
                "without `--image`, the run uses the control plane's own system, which needs no \
                 registry; or let it reach `{registry}` (a proxy through HTTPS_PROXY where there \
                 is one)"
            )
        } else {
            format!(
                "let the control plane reach `{registry}` (a proxy through HTTPS_PROXY where \
                 there is one), or name an image in a registry it reaches"
            )
        },
    )
}

impl From<div_api::layout::LayoutError> for RunError {
    fn from(e: div_api::layout::LayoutError) -> RunError {
        RunError::Layout(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::RunError;

    fn check(accepted: &[&str], expect: &str) {
        let e = RunError::SkuNotOffered {
            sku: "h200".into(),
            accepted: accepted.iter().map(|s| s.to_string()).collect(),
        };
        let hint = e.hint().unwrap_or_default();
        let got = hint
            .split("run on its cores with ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .unwrap_or_default();
        assert_eq!(got, expect, "{hint}");
    }

    /// The hint names `--gpu cpu` whenever the control plane accepts it, whatever comes first.
    #[test]
    fn the_sku_hint_names_cpu_when_it_is_offered() {
        check(&["h100", "cpu"], "`--gpu cpu`");
        check(&["cpu", "h100"], "`--gpu cpu`");
        check(&["h100"], "`--gpu h100`");
        check(&[], "`--gpu cpu`");
    }
}
