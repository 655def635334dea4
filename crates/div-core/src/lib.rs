//! One call per div user action — [`run()`], [`logs()`], [`stop()`], [`runs()`],
//! [`storage_put()`] and the other storage calls, [`secret_set()`] and the other secrets
//! calls, [`image_list()`] and [`image_prune()`], [`result()`], [`telemetry()`] — composing
//! div-spec, div-pricing, div-ship and a [`ControlPlane`].
//!
//! div-core does the work and tells an [`EventSink`] what happens ([`Event`]): it never
//! prints, reads the environment or touches a terminal, so any program can embed it. The
//! `div` command is one such program; [`last_line`] is the sentence every one of its commands
//! ends with. Which control plane to talk to is [`resolve_target`]'s answer, from values the
//! program read; `div_server::LocalControlPlane` reaches the local one, starting it on
//! demand, and `examples/sweep` is a whole program built this way.
//!
//! ```no_run
//! use div_core::{Event, RunOptions, RunOutcome, last_line};
//!
//! # async fn example(cp: &dyn div_api::ControlPlane) -> Result<(), div_core::RunError> {
//! let mut options = RunOptions::new("/home/me/very-cool-classifier", vec!["train.py::run".into()]);
//! options.max_spend = Some("5.00".parse().expect("a ceiling"));
//! let mut log = Vec::new();
//! let mut sink = |event: Event| match event {
//!     Event::Placed { header, .. } => eprintln!("{header}"),
//!     Event::Log(bytes) => log.extend_from_slice(&bytes),
//!     _ => {}
//! };
//! if let RunOutcome::Ended(run) = div_core::run(cp, &options, &mut sink).await? {
//!     eprintln!("{}", last_line(&run));
//! }
//! # Ok(())
//! # }
//! ```

mod error;
mod event;
mod fmt;
mod follow;
mod images;
mod last_line;
mod missing_module;
mod models;
mod outage;
mod project;
pub mod pyscan;
mod result;
mod run;
mod runs;
mod secrets;
mod storage;
mod target;
mod team;
mod telemetry;
mod upload;

pub use div_api::ControlPlane;
pub use error::{FailureKind, RunError};
pub use event::{
    Event, EventSink, Step, new_volume_line, new_volume_line_for, outside_repository_line,
    shipping_line,
};
pub use follow::{LogsOptions, StopOutcome, logs, stop};
pub use images::{image_list, image_prune};
pub use last_line::{checks_said, last_line};
pub use missing_module::{LOG_TAIL_BYTES, PlacedWith, missing_module_hint};
pub use models::{
    MODELS_VOLUME, PushFrom, Pushed, evaluations, judge, model, models, push_model, remove_model,
};
pub use project::{
    PROJECT_FILE, Project, ProjectError, ProjectFile, ProjectOrigin, find_project_file,
    resolve_project,
};
pub use result::{ResultReport, pretty_json, result};
pub use run::options::{
    DEFAULT_IMAGE, DryRun, NewVolume, RunOptions, RunOutcome, ShipmentSummary, volumes_named,
};
pub use run::{LARGE_SHIPMENT_BYTES, run};
pub use runs::{RUNS_PAGE, RunsListing, RunsOptions, latest_run, runs};
pub use secrets::{secret_list, secret_remove, secret_set};
pub use storage::get::{GetSummary, storage_get};
pub use storage::ls::{Listing, storage_ls};
pub use storage::place::VolumePath;
pub use storage::put::{PutOptions, PutSummary, storage_put};
pub use storage::storage_rm;
pub use target::{
    ConfigError, ConfigFileRef, Target, default_local_home, read_config_file, resolve_target,
    user_config_path,
};
pub use team::{
    MemberChange, audit, member_add, member_revoke, member_set, members, org_limit, whoami,
};
pub use telemetry::{
    Chart, ChartSpec, Layout, LayoutError, Series, TelemetryRead, X_LINE, X_STEP, charts,
    number_at, telemetry,
};
pub use upload::UPLOAD_PIECE_BYTES;
