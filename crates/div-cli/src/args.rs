//! What `div` accepts: every command and flag, parsed with clap straight into div-spec's types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use div_api::RunStatus;
use div_spec::{Check, CheckError, EnvPair, MemoryGib, Money};

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
#[command(after_help = "Examples:
  div run --gpu h100 train.py::run --max-spend 5.00
  div run --gpu h200 --gpus 32 finetune.py::lora --max-spend 1500
  div run --cpu 8 --memory 64G train.py --max-spend 10
  div run --detach -- torchrun --nproc-per-node 8 train.py
  div run eval.py --check 'metrics.accuracy>=0.8'
  div run --gpu cpu train.py -- --epochs 3

div's own flags go before `--`; what follows it is the script's arguments, or, with nothing
before `--`, your own command.

The run writes its result (JSON, judged by --check) to $DIVERGENT_RESULT_PATH and telemetry
points to $DIVERGENT_TELEMETRY_PATH; a volume is at /mnt/<volume> (made first when the
command or an --env value names it); a stop or the ceiling sends SIGTERM, then SIGKILL after
a grace (10 s; --env DIVERGENT_STOP_GRACE=30). All of it:
https://github.com/divergentlabs/div/blob/main/docs/runtime.md")]
pub(crate) struct RunArgs {
    /// What to run: `train.py::run`, `train.py`, or your own command (after `--`)
    #[arg(value_name = "ENTRYPOINT", num_args = 0..)]
    pub(crate) command: Vec<String>,

    /// After `--`: the script's arguments (`train.py -- --epochs 3`), or, with no entrypoint
    /// before `--`, your own command (`-- torchrun --nproc-per-node 8 train.py`)
    #[arg(value_name = "ARGS", last = true)]
    pub(crate) args: Vec<String>,

    /// `b300`, `h200`, `h100` or `cpu`
    #[arg(long, value_name = "SKU", default_value = "h100")]
    pub(crate) gpu: String,

    /// How many of them
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) gpus: u32,

    /// Physical cores for the container (default: what comes with the SKU)
    #[arg(long, value_name = "N")]
    pub(crate) cpu: Option<u32>,

    /// Memory for the container in whole GiB, like `64G` (default: what comes with the SKU)
    #[arg(long, value_name = "GiB")]
    pub(crate) memory: Option<MemoryGib>,

    /// Stop the run when it has cost this much, in dollars
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub(crate) max_spend: Option<Money>,

    /// The project it belongs to (default: this directory's name)
    #[arg(long, value_name = "SLUG")]
    pub(crate) project: Option<String>,

    /// What to call it (default: one the control plane picks)
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,

    /// The container image to run in (default: pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime,
    /// or what the control plane lets stand in for it)
    #[arg(long, value_name = "REF")]
    pub(crate) image: Option<String>,

    /// When the control plane asks the registry for the image: `missing` (the default: only
    /// what its cache lacks, so a tag stays where it last resolved), `always` (resolve the tag
    /// each time, and pull it where it moved), `never` (the cache alone; a reference not in
    /// it is refused)
    #[arg(long, value_name = "WHEN", value_enum)]
    pub(crate) pull: Option<Pull>,

    /// An environment variable for the run; repeatable. Kept with the run and shown back: put
    /// credentials in a secret
    #[arg(long, value_name = "KEY=value")]
    pub(crate) env: Vec<EnvPair>,

    /// What the run's result must say, like `metrics.accuracy>=0.8` (quoted: a shell takes
    /// `>` and `<` for redirections); repeatable
    #[arg(long, value_name = "CHECK", value_parser = check)]
    pub(crate) check: Vec<Check>,

    /// How the run's Telemetry tab is laid out (default: the `telemetry.toml` shipped)
    #[arg(long, value_name = "FILE")]
    pub(crate) telemetry: Option<PathBuf>,

    /// The volume the code is shipped to (default `<project>-code`)
    #[arg(long, value_name = "NAME")]
    pub(crate) volume: Option<String>,

    /// Run the image as it is, ship nothing
    #[arg(long)]
    pub(crate) no_upload: bool,

    /// Print the run's name and return once it is placed
    #[arg(short, long)]
    pub(crate) detach: bool,

    /// Print the run as JSON
    #[arg(long)]
    pub(crate) json: bool,

    /// Check everything, show what would ship and what it costs, place nothing
    #[arg(long)]
    pub(crate) dry_run: bool,

    /// Refused: runs are placed in GPUs
    #[arg(long, value_name = "N", hide = true, num_args = 0..=1, default_missing_value = "")]
    pub(crate) nodes: Option<String>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Pull {
    Missing,
    Always,
    Never,
}

impl From<Pull> for div_api::PullPolicy {
    fn from(pull: Pull) -> div_api::PullPolicy {
        match pull {
            Pull::Missing => div_api::PullPolicy::Missing,
            Pull::Always => div_api::PullPolicy::Always,
            Pull::Never => div_api::PullPolicy::Never,
        }
    }
}

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

/// A `--check`. One with no comparison was most likely typed unquoted, `--check
/// metrics.accuracy>0.9`: the shell took `>` for a redirection, made a file `0.9` and sent
/// div's output into it before div started. Where that can be seen (div's output or input is
/// an empty file), the refusal names the file and the check as it was meant.
fn check(typed: &str) -> Result<Check, String> {
    typed.parse::<Check>().map_err(|e| match e {
        CheckError::NoOperator { .. } => format!("{e}; {}", unquoted_check(typed)),
        e => e.to_string(),
    })
}

/// What a shell most likely did with an unquoted check, and the check quoted.
fn unquoted_check(typed: &str) -> String {
    // `>` made div's output a file; `<` made its input one (the shell refuses a `<` of a file
    // that does not exist before div starts).
    for (fd, op, flow) in [(1, ">", "output"), (0, "<", "input")] {
        let Some(name) = redirected_to_empty_file(fd) else {
            continue;
        };
        let meant = div_spec::shell_quote(&format!("{typed}{op}{name}"));
        let made = if op == ">" {
            " (which it probably just made: remove it)"
        } else {
            ""
        };
        return format!(
            "unquoted, the shell took `{op}` for a redirection: div's {flow} is the file `{name}`{made}; \
             quote the check: `--check {meant}`"
        );
    }
    "quote it, like `--check 'metrics.accuracy>=0.8'`: unquoted, a shell takes `>` and `<` \
     for redirections"
        .to_owned()
}

/// The name of the empty regular file that `fd` is, if it is one.
fn redirected_to_empty_file(fd: u32) -> Option<String> {
    let link = std::path::PathBuf::from(format!("/proc/self/fd/{fd}"));
    let meta = std::fs::metadata(&link).ok()?;
    if !meta.is_file() || meta.len() != 0 {
        return None;
    }
    let target = std::fs::read_link(&link).ok()?;
    let name = target.file_name()?.to_str()?.to_owned();
    // Only a name that reads as the rest of a check: `0.9`, `=0.8`, `=true`; not a log that
    // output was sent to on purpose (`div run … > run.log`).
    let value = name.strip_prefix('=').unwrap_or(&name);
    let number = value.parse::<f64>().is_ok();
    (number || (name.starts_with('=') && !value.is_empty())).then_some(name)
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
