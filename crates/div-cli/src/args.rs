//! What `div` accepts: every command and flag, parsed with clap straight into div-spec's types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use div_api::RunStatus;
use div_spec::Check;

mod models;
mod run;

pub(crate) use models::{EvalArgs, EvalsArgs, ModelsCommand};
pub(crate) use run::RunArgs;
use run::check;

mod server;
pub(crate) use server::{AuditArgs, OrgLimitArgs, RoleArg, ServeArgs, TokensCommand, UsersCommand};

/// Place runs on GPUs
#[derive(Debug, Parser)]
#[command(name = "div", version, propagate_version = true, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
pub(crate) enum Command {
    /// Place a run, ship this directory to it and follow its log until it stops
    Run(RunArgs),
    /// Place an eval run of a model's version: `div run` with the model mounted read-only
    Eval(EvalArgs),
    /// List evaluations, newest first, with their verdicts
    Evals(EvalsArgs),
    /// Push, list, show and remove models' versions
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Print a run's log from the start, ending with how it went
    Logs(LogsArgs),
    /// Stop a run
    Stop(StopArgs),
    /// List runs, newest first
    Runs(RunsArgs),
    /// Put files into volumes, get them back, list and remove volumes
    #[command(subcommand)]
    Storage(StorageCommand),
    /// Set, list and remove the secrets every run has as environment variables
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Print a run's result and each check's verdict
    Result(ResultArgs),
    /// Print a run's telemetry points and plot each series
    Telemetry(TelemetryArgs),
    /// Show the resolved settings and where each came from
    Config(ConfigArgs),
    /// Store a control plane's address and token in the user config file
    Login(LoginArgs),
    /// List and prune the local control plane's image cache
    #[command(subcommand)]
    Image(ImageCommand),
    /// Open the local control plane's dashboard: print its URL, with a fresh token
    Dashboard(DashboardArgs),
    /// Run or control the local control plane
    #[command(
        subcommand,
        after_help = "The local control plane runs on this machine's cores (`--gpu cpu`) and \
the GPUs it has. To try GPU runs on a machine without them, declare emulated GPUs before it \
starts: `DIVERGENT_EMULATE_GPUS=h100:8`, or several like `h100:8,h200:2` (b300, h200, h100). \
They are scheduled and priced like real ones, but a run gets no GPU, and its first log line \
says so."
    )]
    Server(ServerCommand),
    /// Write shell completions or the man page to stdout; `man --dir DIR` writes a page
    /// for every command into DIR
    #[command(name = "__generate", hide = true)]
    Generate {
        #[arg(value_enum)]
        what: Generate,
        /// With `man`: write div.1 and one page per command (div-run.1, div-storage-put.1, …)
        /// into this folder instead
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Own one run of the local control plane (started by the server)
    #[command(name = "__supervise", hide = true)]
    Supervise {
        /// The run's directory
        run_dir: PathBuf,
    },
}

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// The run, by name or id (default: this project's latest run)
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Follow a running run until it ends
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// Node K's log (its rank, 0…) of a run placed on several nodes (Slurm); node 0's is the
    /// run's log
    #[arg(long, value_name = "K")]
    pub(crate) node: Option<u32>,
    /// Print the run as JSON once the log is printed (the log goes to stderr)
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DashboardArgs {
    /// Also open it in this machine's browser (with `xdg-open`)
    #[arg(long)]
    pub(crate) open: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// The run, by name or id (default: this project's latest run)
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Print the run as it ended as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  div runs
  div runs --status running
  div runs --all --limit 200 --json")]
pub(crate) struct RunsArgs {
    /// The project whose runs to list (default: this directory's)
    #[arg(long, value_name = "SLUG", conflicts_with = "all")]
    pub(crate) project: Option<String>,
    /// Every project's runs
    #[arg(long)]
    pub(crate) all: bool,
    /// Only runs in this status: queued, running, succeeded, failed, canceled, stopped_by_org,
    /// hit_ceiling
    #[arg(long, value_name = "STATUS")]
    pub(crate) status: Option<RunStatus>,
    /// How many runs at most
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub(crate) limit: u32,
    /// Only the runs you placed (on a team's control plane: the member your token is)
    #[arg(long)]
    pub(crate) mine: bool,
    /// Print the runs as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum StorageCommand {
    /// Put a file or folder into a volume, making the volume when needed
    #[command(
        after_help = "A folder's contents go to the volume's root, or under --to; a file goes there \
under its own name. Only what the volume lacks is sent, so a put that was interrupted sends \
the rest when run again. A file the volume holds is replaced, as cp would; a folder is never \
replaced by a file, and nothing is written through a link in the volume.

Examples:
  div storage put mask-models ./models
  div storage put datasets ./imagenet --to imagenet/v2"
    )]
    Put {
        /// The volume
        #[arg(value_name = "NAME")]
        volume: String,
        /// The local file or folder
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// Where in the volume it goes (default: its root)
        #[arg(long, value_name = "DIR")]
        to: Option<String>,
        /// Print what was put as JSON
        #[arg(long)]
        json: bool,
    },
    /// Get a file or folder out of a volume
    #[command(after_help = "Examples:
  div storage get mask-models/base ./base
  div storage get very-cool-classifier-code/code/9f31c2ab ./what-the-run-got")]
    Get {
        /// The volume, and a path in it: `NAME`, `NAME/dir`, `NAME/dir/file`
        #[arg(value_name = "NAME[/PATH]")]
        from: String,
        /// Where to write it; nothing that exists is overwritten
        #[arg(value_name = "DEST")]
        dest: PathBuf,
        /// Print what was written as JSON
        #[arg(long)]
        json: bool,
    },
    /// List the volumes, or what is in one
    Ls {
        /// The volume, and a path in it
        #[arg(value_name = "NAME[/PATH]")]
        at: Option<String>,
        /// Everything under the path, not only what is directly in it
        #[arg(short, long)]
        recursive: bool,
        /// Print the listing as JSON
        #[arg(long)]
        json: bool,
    },
    /// Remove a volume and everything in it
    Rm {
        /// The volume
        #[arg(value_name = "NAME")]
        volume: String,
        /// Do not ask for confirmation (required without a terminal)
        #[arg(short, long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SecretsCommand {
    /// Set a secret from stdin, a prompt that does not echo, or a file; never from arguments
    #[command(after_help = "Examples:
  div secrets set HF_TOKEN
  printf %s \"$TOKEN\" | div secrets set HF_TOKEN
  div secrets set GCP_KEY --from-file key.json")]
    Set {
        /// The secret's name, as the environment variable runs will have
        #[arg(value_name = "NAME")]
        name: String,
        /// Read the value from this file, as it is
        #[arg(long, value_name = "FILE")]
        from_file: Option<PathBuf>,
    },
    /// List the secrets' names and when each was set, never their values
    Ls {
        /// Print the list as JSON
        #[arg(long)]
        json: bool,
    },
    /// Remove a secret
    Rm {
        /// The secret's name
        #[arg(value_name = "NAME")]
        name: String,
    },
}

#[derive(Debug, Args)]
#[command(
    after_help = "With --check, exits 210 when a check given here misses or is unknown.

Examples:
  div result run-k4t9
  div result run-k4t9 --check 'metrics.accuracy>=0.8' && deploy.sh"
)]
pub(crate) struct ResultArgs {
    /// The run, by name or id (default: this project's latest run)
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Judge the stored result again against this check; repeatable
    #[arg(long, value_name = "CHECK", value_parser = check)]
    pub(crate) check: Vec<Check>,
    /// Print the result and verdicts as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  div telemetry run-k4t9
  div telemetry run-k4t9 --follow
  div telemetry run-k4t9 --telemetry charts.toml
  div telemetry run-k4t9 --json")]
pub(crate) struct TelemetryArgs {
    /// The run, by name or id (default: this project's latest run)
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Keep reading while the run goes: redraw on a terminal, append points otherwise
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// Print the raw points as JSON, one object per line
    #[arg(long)]
    pub(crate) json: bool,
    /// Lay the charts out by this file (default: the run's own layout, or one chart per series)
    #[arg(long, value_name = "FILE")]
    pub(crate) telemetry: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    /// Print the settings as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "The token is read from stdin, or from a prompt that does not echo.

Example:
  div login --api-url https://api.divergentlabs.xyz"
)]
pub(crate) struct LoginArgs {
    /// The control plane's address
    #[arg(long, value_name = "URL")]
    pub(crate) api_url: String,
}

/// What `div __generate` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Generate {
    Bash,
    Zsh,
    Fish,
    Man,
}

/// `div run --pull`, docker's words (`div_api::PullPolicy`).
#[derive(Debug, Subcommand)]
pub(crate) enum ImageCommand {
    /// List the images the local control plane has pulled (each reference, its digest, when it
    /// last resolved, what was downloaded for it) and the disk they take
    Ls,
    /// Remove every cached image no queued or running run uses, and the blobs only they needed
    Prune,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ServerCommand {
    /// Run the local control plane in the foreground until interrupted
    Run(ServeArgs),
    /// Start the local control plane in the background, unless it is running
    Start(ServeArgs),
    /// Stop the local control plane; runs keep going under their supervisors
    Stop,
    /// Say whether the local control plane is running, and where
    Status,
    /// Add, list and revoke the org's members, and set their limits (docs/team.md)
    #[command(subcommand)]
    Users(UsersCommand),
    /// Add, list and revoke service tokens, for CI
    #[command(subcommand)]
    Tokens(TokensCommand),
    /// Print the audit log, newest first: who changed what, when and from where
    Audit(AuditArgs),
    /// Set or remove the org's monthly usage limit
    Limit(OrgLimitArgs),
}

/// `div`'s arguments, parsed; an unknown flag after `div run`'s entrypoint gets the tip that
/// moves it, and everything after it, behind `--`, where the script gets them.
pub(crate) fn parse(argv: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let mut e = match Cli::try_parse_from(&argv) {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    if e.kind() != ErrorKind::UnknownArgument {
        return Err(e);
    }
    // A misspelled flag of div's own (`--max-spent`) gets clap's `a similar argument exists`
    // alone: a tip to pass it to the script would only distract.
    if e.get(ContextKind::SuggestedArg).is_some() {
        e.insert(ContextKind::Suggested, ContextValue::StyledStrs(Vec::new()));
        return Err(e);
    }
    let Some(ContextValue::String(unknown)) = e.get(ContextKind::InvalidArg).cloned() else {
        return Err(e);
    };
    let is_run = argv.get(1).and_then(|w| w.to_str()) == Some("run");
    let tip = match arguments_moved(&argv, &unknown) {
        Some(moved) => format!(
            "to give `{unknown}` and what follows to the script, put them after `--`: \
             `{moved}`"
        ),
        None if is_run => format!(
            "div's flags go before the entrypoint, the script's after `--`: \
             `div run train.py -- {unknown} …`"
        ),
        None => return Err(e),
    };
    e.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![tip.into()]),
    );
    Err(e)
}

/// `argv` with `--` before the word `unknown` (`--epochs` or `--epochs=3`), as a command line,
/// when that is a `div run` that parses; `None` otherwise.
fn arguments_moved(argv: &[std::ffi::OsString], unknown: &str) -> Option<String> {
    let words: Vec<&str> = argv.iter().map(|w| w.to_str()).collect::<Option<_>>()?;
    if words.get(1) != Some(&"run") || words.contains(&"--") {
        return None;
    }
    let at = words
        .iter()
        .position(|w| *w == unknown || w.starts_with(&format!("{unknown}=")))?;
    let mut moved: Vec<&str> = words[..at].to_vec();
    moved.push("--");
    moved.extend(&words[at..]);
    let cli = Cli::try_parse_from(&moved).ok()?;
    match cli.command {
        Command::Run(run) if !run.command.is_empty() => {}
        _ => return None,
    }
    moved[0] = "div";
    Some(
        moved
            .iter()
            .map(|w| div_spec::shell_quote(w))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::Cli;

    /// `--image`'s help names the default image by hand (a doc comment cannot use the
    /// constant): it must be div-spec's.
    #[test]
    fn the_image_flag_names_the_default_image() {
        let mut cli = Cli::command();
        let run = cli.find_subcommand_mut("run").expect("the run command");
        let image = run
            .get_arguments()
            .find(|a| a.get_id() == "image")
            .expect("--image");
        let help = image.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert!(help.contains(div_core::DEFAULT_IMAGE), "{help}");
        // Not a clap default: an untyped `--image` sends no image.
        assert!(image.get_default_values().is_empty());
    }

    /// `div --version` answers before clap is reached (main.rs): with what clap would print.
    #[test]
    fn the_quick_version_is_clap_s() {
        assert_eq!(
            Cli::command().render_version(),
            format!("div {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}
