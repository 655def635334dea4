//! What `div` accepts: every command and flag, parsed with clap straight into div-spec's types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use div_spec::{Check, EnvPair, MemoryGib, Money};

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
    /// Run or control the local control plane
    #[command(subcommand)]
    Server(ServerCommand),
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
  div run eval.py --check 'metrics.accuracy>=0.8'")]
pub(crate) struct RunArgs {
    /// What to run: `train.py::run`, `train.py`, or your own command (after `--`)
    #[arg(value_name = "ENTRYPOINT", num_args = 0..)]
    pub(crate) command: Vec<String>,

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
    #[arg(long, value_name = "USD")]
    pub(crate) max_spend: Option<Money>,

    /// The project it belongs to (default: this directory's name)
    #[arg(long, value_name = "SLUG")]
    pub(crate) project: Option<String>,

    /// What to call it (default: one the control plane picks)
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,

    /// The container image to run in
    #[arg(long, value_name = "REF", default_value = div_core::DEFAULT_IMAGE)]
    pub(crate) image: String,

    /// An environment variable for the run; repeatable. Kept with the run and shown back: put
    /// credentials in a secret
    #[arg(long, value_name = "KEY=value")]
    pub(crate) env: Vec<EnvPair>,

    /// What the run's result must say, like `metrics.accuracy>=0.8`; repeatable
    #[arg(long, value_name = "CHECK")]
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
    /// The run, by name or id
    #[arg(value_name = "RUN")]
    pub(crate) run: String,
    /// Follow a running run until it ends
    #[arg(short, long)]
    pub(crate) follow: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// The run, by name or id
    #[arg(value_name = "RUN")]
    pub(crate) run: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ServerCommand {
    /// Run the local control plane in the foreground until interrupted
    Run,
    /// Start the local control plane in the background, unless it is running
    Start,
    /// Stop the local control plane; runs keep going under their supervisors
    Stop,
    /// Say whether the local control plane is running, and where
    Status,
}
