//! `div models`, `div eval` and `div evals`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use div_spec::{Check, ModelRef};

use super::run::{RunArgs, check};

#[derive(Debug, Subcommand)]
pub(crate) enum ModelsCommand {
    /// Push a folder or file as the model's next version (nothing is sent, and no version
    /// made, when it is the same as the latest)
    #[command(after_help = "Examples:
  div models push mask-rcnn ./checkpoints/best
  div models push mask-rcnn --from ckpt-vol/run-k4t9/best

Prints the version and its digest: `mask-rcnn v3 sha256:…`. --from copies a volume's folder
or file (what a run wrote to /mnt/<volume>) without sending it again.")]
    Push {
        /// The model's name (a volume's rules: lowercase letters, digits, `-`, `_`, `.`)
        #[arg(value_name = "NAME")]
        name: String,
        /// The local folder or file
        #[arg(
            value_name = "PATH",
            required_unless_present = "from",
            conflicts_with = "from"
        )]
        path: Option<PathBuf>,
        /// A volume's folder or file instead: `VOLUME/PATH`
        #[arg(long, value_name = "VOLUME/PATH")]
        from: Option<String>,
        /// Print the version as JSON
        #[arg(long)]
        json: bool,
    },
    /// List the models, each with its latest version
    Ls {
        /// Print the list as JSON
        #[arg(long)]
        json: bool,
    },
    /// Show a model's versions (digests, sizes, when and by whom) and their evaluations
    Show {
        #[arg(value_name = "NAME")]
        name: String,
        /// Print the model as JSON
        #[arg(long)]
        json: bool,
    },
    /// Remove a model's version (`NAME:vN`), or the whole model (`NAME`); refused while an
    /// eval run of it is going
    Rm {
        #[arg(value_name = "NAME[:vN]")]
        model: ModelRef,
    },
}

/// `div eval MODEL ENTRYPOINT [every div run flag]`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  div eval mask-rcnn eval.py --check 'metrics.accuracy>=0.8'
  div eval mask-rcnn:v3 --gpu h100 eval.py::main
  div eval mask-rcnn@sha256:… -- 'python eval.py --split test'

The run reads the model, read-only, at $DIVERGENT_MODEL_PATH; $DIVERGENT_MODEL,
$DIVERGENT_MODEL_VERSION_ID, $DIVERGENT_MODEL_DIGEST and $DIVERGENT_EVALUATION say which.
A name alone is its latest version, pinned when the run is placed. The run's checks are the
evaluation's verdicts: `div evals` lists them.")]
#[command(mut_arg("model", |a| a.hide(true)))]
pub(crate) struct EvalArgs {
    /// The model version to evaluate: `NAME`, `NAME:vN` or `NAME@sha256:…`
    #[arg(id = "eval_model", value_name = "MODEL")]
    pub(crate) model: ModelRef,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// `div evals [MODEL]`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  div evals
  div evals mask-rcnn
  div evals mask-rcnn:v3 --json
  div evals mask-rcnn --check 'metrics.accuracy>=0.9'

With --check, the latest evaluation's result is judged: div exits 210 when a check misses.")]
pub(crate) struct EvalsArgs {
    /// A model (`NAME`) or one of its versions (`NAME:vN`, `NAME@sha256:…`)
    #[arg(value_name = "MODEL")]
    pub(crate) model: Option<ModelRef>,
    /// Judge the latest evaluation's result against this check; repeatable
    #[arg(long, value_name = "CHECK", value_parser = check)]
    pub(crate) check: Vec<Check>,
    /// Print the evaluations as JSON (the whole record of each)
    #[arg(long)]
    pub(crate) json: bool,
}
