//! `div server …`, `div __supervise`, and starting the local control plane on demand.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use div_api::{ControlPlane, Endpoint, HttpControlPlane, ListRuns, Options, RunStatus};
use div_server::{
    GpuSource, LocalControlPlane, SandboxMode, ServerOptions, StartError, SupervisorCommand,
};

use crate::args::ServerCommand;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::{ImageEnv, Settings};

/// How long `div server stop` waits for it to go.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// The local control plane of the settings' home, served by this `div`.
fn local(settings: &Settings) -> Result<LocalControlPlane, Failure> {
    let exe = std::env::current_exe()
        .context("could not find the div executable to start the local control plane")
        .map_err(|e| Failure::new(exit_codes::UNREACHABLE, e))?;
    Ok(LocalControlPlane::new(&settings.home, exe).emulate_gpus(settings.emulate_gpus.clone()))
}

fn client(settings: &Settings, options: Options) -> Result<HttpControlPlane, Failure> {
    let socket = div_server::socket_path(&settings.home);
    HttpControlPlane::new(Endpoint::unix(socket), options)
        .map_err(|e| Failure::new(exit_codes::LOCAL, e))
}

/// Whether the local control plane answers `/v1/health` now.
async fn answering(settings: &Settings) -> bool {
    match local(settings) {
        Ok(local) => local.answering().await,
        Err(_) => false,
    }
}

fn start_failure(e: StartError) -> Failure {
    let hint = e.hint();
    Failure::new(exit_codes::UNREACHABLE, e).hint(hint)
}

/// The local control plane, started in the background when it is not answering.
pub(crate) async fn connect_local(
    settings: &Settings,
    options: Options,
) -> Result<Box<dyn ControlPlane>, Failure> {
    if answering(settings).await {
        match_inventory(settings).await?;
    }
    let cp = local(settings)?
        .connect(options)
        .await
        .map_err(start_failure)?;
    Ok(Box::new(cp))
}

/// The GPU inventory of the local control plane running now, in words (`emulated GPUs
/// \`h100:8\``, `this machine's own GPUs`); `None` when none answers. Nothing is started.
pub(crate) async fn inventory_in_effect(settings: &Settings) -> Option<String> {
    if !answering(settings).await {
        return None;
    }
    let health = client(settings, Options::default())
        .ok()?
        .health()
        .await
        .ok()?;
    let in_effect = health.extra.get("emulated_gpus")?;
    Some(inventory_words(in_effect.as_str()))
}

/// Words for an inventory: `emulated GPUs h100:8`, or `this machine's own GPUs`.
fn inventory_words(gpus: Option<&str>) -> String {
    match gpus {
        Some(g) => format!("emulated GPUs `{g}`"),
        None => "this machine's own GPUs".to_owned(),
    }
}

/// A running local control plane whose GPU inventory is not the one asked for
/// (`DIVERGENT_EMULATE_GPUS`) is stopped, so that it starts again with the
/// one asked for, when no run is going on it; otherwise the failure says exactly that.
async fn match_inventory(settings: &Settings) -> Result<(), Failure> {
    let cp = client(settings, Options::default())?;
    let Ok(health) = cp.health().await else {
        return Ok(());
    };
    // A server that does not say which inventory it has is left as it is.
    let Some(in_effect) = health.extra.get("emulated_gpus") else {
        return Ok(());
    };
    let in_effect = in_effect.as_str().map(str::to_owned);
    // Only a declared inventory is asked for: a `div` without `DIVERGENT_EMULATE_GPUS` uses
    // whichever server is running (its dashboard link, its runs) rather than restart it.
    let Some(text) = settings.emulate_gpus.as_deref() else {
        return Ok(());
    };
    // A declaration the server cannot read is its to refuse, once started with it.
    let asked = Some(div_server::canonical_gpus(text).unwrap_or_else(|_| text.to_owned()));
    if asked == in_effect {
        return Ok(());
    }
    let mut going = 0;
    for status in [RunStatus::Running, RunStatus::Queued] {
        let query = ListRuns {
            status: Some(status),
            limit: Some(1000),
            ..ListRuns::default()
        };
        let list = cp.list_runs(&query).await.map_err(|e| {
            Failure::new(exit_codes::CONTROL_PLANE, anyhow!(div_api::error_chain(&e)))
        })?;
        going += list.runs.len();
    }
    if going > 0 {
        let runs = if going == 1 { "1 run is" } else { "runs are" };
        return Err(Failure::new(
            exit_codes::REFUSED,
            anyhow!(
                "the local control plane is running with {}, not the {} asked for, and {runs} going on it, so it cannot be restarted with them now",
                inventory_words(in_effect.as_deref()),
                inventory_words(asked.as_deref()),
            ),
        )
        .hint(Some(match in_effect {
            Some(g) => format!(
                "wait for its runs to end (`div runs`) or stop them (`div stop RUN`), or use the inventory in effect with `DIVERGENT_EMULATE_GPUS={g}`"
            ),
            None => "wait for its runs to end (`div runs`) or stop them (`div stop RUN`), or use the inventory in effect by unsetting `DIVERGENT_EMULATE_GPUS`".to_owned(),
        })));
    }
    let Some(pid) = pid(&settings.home) else {
        return Ok(());
    };
    if !signal_terminate(pid) {
        return Ok(());
    }
    let deadline = Instant::now() + STOP_DEADLINE;
    while answering(settings).await && Instant::now() <= deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Start `<this exe> server run` in its own session, its output in `home/server.log`, and
/// wait for it to answer.
async fn start(settings: &Settings) -> Result<u32, Failure> {
    local(settings)?.start().await.map_err(start_failure)
}

pub(crate) async fn server(
    command: ServerCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    match command {
        ServerCommand::Run => run(settings, printer).await,
        ServerCommand::Start => {
            if answering(settings).await {
                printer.status(&format!(
                    "the local control plane is already running{}",
                    pid(&settings.home)
                        .map(|p| format!(" (pid {p})"))
                        .unwrap_or_default()
                ));
            } else {
                let pid = start(settings).await?;
                printer.status(&format!(
                    "started the local control plane (pid {pid}) on {}",
                    div_server::socket_path(&settings.home).display()
                ));
            }
            Ok(exit_codes::SUCCESS)
        }
        ServerCommand::Stop => stop(settings, printer).await,
        ServerCommand::Status => status(settings, printer).await,
    }
}

async fn run(settings: &Settings, printer: &mut Printer) -> Result<i32, Failure> {
    let exe = std::env::current_exe()
        .context("could not find the div executable, which supervises runs")
        .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
    let options = ServerOptions {
        home: settings.home.clone(),
        tcp: None,
        gpus: match &settings.emulate_gpus {
            Some(g) => GpuSource::Emulate(g.clone()),
            None => GpuSource::Detect,
        },
        supervisor: SupervisorCommand {
            program: exe,
            args: vec!["__supervise".into()],
        },
        sandbox: SandboxMode::Auto,
        tick: div_server::DEFAULT_TICK,
        images: image_settings(&settings.images)?,
    };
    printer.status(&format!(
        "div server: serving {} on {}",
        settings.home.display(),
        div_server::socket_path(&settings.home).display()
    ));
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match &mut term { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
    };
    div_server::serve(options, shutdown)
        .await
        .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
    printer.status("div server: stopped; runs go on under their supervisors");
    Ok(exit_codes::SUCCESS)
}

/// The pid in `home/server.pid`, when there is one.
fn pid(home: &Path) -> Option<i32> {
    std::fs::read_to_string(home.join("server.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|p| *p > 0)
}

async fn stop(settings: &Settings, printer: &mut Printer) -> Result<i32, Failure> {
    let running = answering(settings).await;
    let Some(pid) = pid(&settings.home).filter(|_| running) else {
        printer.status("the local control plane is not running");
        return Ok(exit_codes::SUCCESS);
    };
    if !signal_terminate(pid) {
        return Err(Failure::new(
            exit_codes::LOCAL,
            anyhow!("could not signal the local control plane (pid {pid})"),
        ));
    }
    let deadline = Instant::now() + STOP_DEADLINE;
    while answering(settings).await {
        if Instant::now() > deadline {
            return Err(Failure::new(
                exit_codes::LOCAL,
                anyhow!(
                    "the local control plane (pid {pid}) is still answering after {}s",
                    STOP_DEADLINE.as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    printer.status(&format!(
        "stopped the local control plane (pid {pid}); runs go on under their supervisors"
    ));
    Ok(exit_codes::SUCCESS)
}

/// SIGTERM to `pid` (which `pid()` already checked is positive).
fn signal_terminate(pid: i32) -> bool {
    use rustix::process::{Pid, Signal, kill_process};
    Pid::from_raw(pid).is_some_and(|pid| kill_process(pid, Signal::TERM).is_ok())
}

async fn status(settings: &Settings, printer: &mut Printer) -> Result<i32, Failure> {
    let socket = div_server::socket_path(&settings.home);
    if !answering(settings).await {
        printer.status("the local control plane is not running");
        printer.status(&format!("home    {}", settings.home.display()));
        printer.status(&format!("socket  {}", socket.display()));
        return Ok(exit_codes::SUCCESS);
    }
    let cp = client(settings, Options::default())?;
    let mut going = 0;
    for status in [RunStatus::Running, RunStatus::Queued] {
        let query = ListRuns {
            status: Some(status),
            limit: Some(1000),
            ..ListRuns::default()
        };
        if let Ok(list) = cp.list_runs(&query).await {
            going += list.runs.len();
        }
    }
    printer.status("the local control plane is running");
    printer.status(&format!("home    {}", settings.home.display()));
    printer.status(&format!("socket  {}", socket.display()));
    if let Some(pid) = pid(&settings.home) {
        printer.status(&format!("pid     {pid}"));
    }
    printer.status(&format!("runs    {going} going"));
    if let Ok(health) = cp.health().await
        && let Some(executor) = health.extra.get("executor").and_then(|e| e.as_str())
    {
        printer.status(&format!("executor  {executor}"));
    }
    Ok(exit_codes::SUCCESS)
}

/// `div __supervise <run-dir>`.
pub(crate) fn supervise(run_dir: &Path) -> i32 {
    div_server::supervise(run_dir)
}

/// The server's image settings, from its environment: `DIVERGENT_DEFAULT_IMAGE` (`host`, the
/// default: this machine's system stands in for the default image; `pull`: pull it),
/// `DIVERGENT_INSECURE_REGISTRIES` (comma-separated `host:port`s reached over plain HTTP), and
/// the places docker, podman and skopeo keep logins.
fn image_settings(env: &ImageEnv) -> Result<div_server::ImageSettings, Failure> {
    let default_image = match env.default_image.as_deref() {
        None | Some("") | Some("host") => div_server::DefaultImage::Host,
        Some("pull") => div_server::DefaultImage::Pull,
        Some(other) => {
            return Err(Failure::new(
                exit_codes::LOCAL,
                anyhow!(
                    "DIVERGENT_DEFAULT_IMAGE is `{other}`; it is `host` (this machine's system stands in for the default image) or `pull` (pull {})",
                    div_core::DEFAULT_IMAGE
                ),
            ));
        }
    };
    let path = |v: &Option<String>| v.as_ref().filter(|v| !v.is_empty()).map(Into::into);
    Ok(div_server::ImageSettings {
        default_image,
        insecure_registries: env
            .insecure_registries
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        credentials: div_image::CredentialSources {
            registry_auth_file: path(&env.registry_auth_file),
            xdg_runtime_dir: path(&env.xdg_runtime_dir),
            docker_config_dir: path(&env.docker_config),
            home: path(&env.home),
        },
    })
}
