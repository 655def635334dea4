//! The local div control plane: the server that speaks div's API on this machine and really
//! runs runs.
//!
//! [`serve`] answers the API over a Unix socket at [`socket_path`] (reachable by its owner
//! only) and, optionally, loopback TCP with a bearer token. It keeps its records in SQLite
//! under the state directory, starts queued runs when the GPUs and cores they need are free,
//! and hands each to a supervisor process ([`supervise`]) that owns it: the run survives the
//! server, and the server reconciles on start.
//!
//! Main types: [`ServerOptions`], [`GpuSource`], [`SandboxMode`], [`SupervisorCommand`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), div_server::ServerError> {
//! use div_server::{GpuSource, SandboxMode, ServerOptions, SupervisorCommand};
//! let options = ServerOptions {
//!     home: "/home/me/.local/share/div".into(),
//!     tcp: None,
//!     team: None,
//!     gpus: GpuSource::Emulate("h100:8".into()),
//!     supervisor: SupervisorCommand { program: "/usr/bin/div".into(), args: vec!["__supervise".into()] },
//!     sandbox: SandboxMode::Auto,
//!     tick: div_server::DEFAULT_TICK,
//!     images: Default::default(),
//! };
//! div_server::serve(options, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```
//!
//! How it keeps each promise of the runtime is written down in `docs/local-control-plane.md`.

// The module map and which module may use which: ARCHITECTURE.md, "div-server".
mod audit;
mod disk_pool;
mod executor;
mod fault;
mod home;
mod http;
mod inventory;
mod members;
mod models;
mod org;
mod rules;
mod runs;
mod secrets;
mod server;
mod settings;
mod state_reserve;
mod store;
mod volumes;

mod images;
pub mod local;
pub use div_runtime::sys::tune_allocator;
pub use images::{DefaultImage, ImageSettings};
pub use local::{LocalControlPlane, StartError};

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use http::dashboard::{DashboardError, DashboardLink, open_url as open_dashboard};
pub use http::tls::TlsError;
pub use inventory::{InventoryError, canonical_gpus};

/// How to run the local control plane.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The state directory: database, socket, logs, volumes. Made 0700.
    pub home: PathBuf,
    /// Also listen on loopback TCP, with a bearer token.
    pub tcp: Option<TcpOptions>,
    /// Serve the org's members on this address, each with their own token (docs/team.md);
    /// `None`: what `home/settings.json`'s `listen`, `tls_cert` and `tls_key` say, if any.
    pub team: Option<TeamListen>,
    /// Where the GPU inventory comes from.
    pub gpus: GpuSource,
    /// How to launch a run's supervisor.
    pub supervisor: SupervisorCommand,
    /// Whether runs are sandboxed with bubblewrap.
    pub sandbox: SandboxMode,
    /// How often the scheduler looks for ended runs and starts queued ones when nothing wakes
    /// it sooner (placing a run, and a log stream that sees its run's end, both do):
    /// [`DEFAULT_TICK`] unless a test says otherwise.
    pub tick: std::time::Duration,
    /// Images: what the default image means here, registries, logins.
    pub images: ImageSettings,
}

/// The scheduler's tick: 50 ms.
pub const DEFAULT_TICK: std::time::Duration = std::time::Duration::from_millis(50);

/// A loopback TCP listener, for tests that inject faults between client and server.
#[derive(Debug, Clone)]
pub struct TcpOptions {
    pub addr: SocketAddr,
    /// Every request must carry `Authorization: Bearer <token>`.
    pub token: String,
}

/// The team's listener: the API and the dashboard for the org's members, each with their own
/// token and role (docs/team.md), beside the owner's Unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamListen {
    pub addr: SocketAddr,
    /// The certificate and key it serves TLS with; plain HTTP only on a loopback address.
    pub tls: Option<TlsFiles>,
}

/// A TLS certificate chain and its private key, both PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Whether `files` can serve TLS: read and paired as the team's listener will, so a mistake is
/// said before a server is started in the background.
pub fn check_tls(files: &TlsFiles) -> Result<(), TlsError> {
    http::tls::server_config(files).map(drop)
}

/// Where the GPU inventory comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSource {
    /// `nvidia-smi --query-gpu=name --format=csv,noheader`; none when it is absent.
    Detect,
    /// A declared inventory, the `DIVERGENT_EMULATE_GPUS` value: `h100:8` or `h100:8,h200:2`.
    /// Runs on it get no GPU and say so in their first log line.
    Emulate(String),
}

/// Whether runs are sandboxed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// bubblewrap when `bwrap --ro-bind / / true` works, else degraded (said in each log).
    Auto,
    /// bubblewrap, or refuse to start.
    Bwrap,
    /// No sandbox: runs see the host, and each run's first log line says so.
    None,
}

/// How a run's supervisor is launched: `program args... <run-dir>`.
#[derive(Debug, Clone)]
pub struct SupervisorCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// The error returned by [`serve`].
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("could not prepare the state directory `{path}`")]
    Home {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another div server is already running on `{0}`")]
    AlreadyRunning(PathBuf),
    #[error("could not open the state database")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Images(#[from] div_image::StoreError),
    #[error(
        "the state database `{path}` {problem}, but {history} beside it hold earlier runs and data: starting would forget them and every secret. Put state.db (with state.db-wal, if any) back from a copy; or, to start afresh, move {history} out of the state directory"
    )]
    StateLost {
        path: PathBuf,
        problem: String,
        history: String,
    },
    #[error(
        "the write-ahead log `{path}` {problem}: starting would silently drop the changes it holds (runs, volumes and secrets written since the last clean stop). Put state.db and state.db-wal back from a copy; or, to start from state.db alone and lose what the log held, move state.db-wal and state.db-shm out of the state directory"
    )]
    WalLost { path: PathBuf, problem: String },
    #[error("bubblewrap (`bwrap`) does not work on this machine")]
    NoSandbox,
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error("could not listen on `{addr}`")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("tcp listening is loopback only; `{0}` is not a loopback address")]
    NotLoopback(SocketAddr),
    /// The team's listener without TLS on an address others can reach.
    #[error(
        "plain HTTP is refused on `{0}`, which is not a loopback address: tokens would cross the network in the clear; give it a certificate and key (`--tls-cert FILE --tls-key FILE`)"
    )]
    PlainHttp(SocketAddr),
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// `home/settings.json`'s `listen`, `tls_cert` or `tls_key` cannot be used (its words).
    #[error("{0}")]
    TeamSettings(String),
    /// `home/slurm.toml` chose Slurm, and the file or the cluster is not usable.
    #[error("the Slurm executor cannot start: {0}")]
    Slurm(String),
}

/// Where the server listens under `home`: `home/server.sock`.
pub fn socket_path(home: &Path) -> PathBuf {
    home.join("server.sock")
}

/// Runs the local control plane until `shutdown` completes. Runs keep going after it
/// returns: their supervisors own them, and the next `serve` on the same home reconciles.
pub async fn serve(
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    http::listen::serve(options, shutdown).await
}

/// The body of the per-run supervisor process (`div __supervise <run-dir>`): runs the run
/// described by `run-dir/spec.json` to its end and writes `run-dir/end.json`. Blocks; returns
/// the process's exit code.
pub fn supervise(run_dir: &Path) -> i32 {
    // On a Slurm node, or gathering a Slurm job's nodes (docs/slurm.md).
    if let Some(code) = executor::slurm::node_or_gather(run_dir) {
        return code;
    }
    div_runtime::supervisor::supervise(run_dir)
}
