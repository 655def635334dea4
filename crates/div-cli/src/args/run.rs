//! `div run`'s flags, which `div eval` takes too, and the check parser every command that
//! judges a check uses.

use std::path::PathBuf;

use clap::Args;
use div_spec::{Check, CheckError, EnvPair, MemoryGib, ModelRef, Money};

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
    /// Make this an eval run of a model's version: `NAME` (its latest, pinned when the run is
    /// placed), `NAME:vN` or `NAME@sha256:…` (what `div eval` does)
    #[arg(long, value_name = "MODEL")]
    pub(crate) model: Option<ModelRef>,
}

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

/// A `--check`. One with no comparison was most likely typed unquoted, `--check
/// metrics.accuracy>0.9`: the shell took `>` for a redirection, made a file `0.9` and sent
/// div's output into it before div started. Where that can be seen (div's output or input is
/// an empty file), the refusal names the file and the check as it was meant.
pub(crate) fn check(typed: &str) -> Result<Check, String> {
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
