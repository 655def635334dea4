//! `div server …` and `div __supervise` (starting the local control plane on demand is
//! `shared/local.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use div_api::{ControlPlane, ListRuns, Options, RunStatus};
use div_server::{GpuSource, SandboxMode, ServerOptions, SupervisorCommand};

use super::shared::local::{
    STOP_DEADLINE, answering, client, held, pid, signal_terminate, start_serving, this_div,
};
use crate::args::{ServeArgs, ServerCommand};
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::{ImageEnv, Settings};

pub(crate) async fn server(
    command: ServerCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    match command {
        ServerCommand::Run(serve) => run(settings, printer, &serve).await,
        ServerCommand::Start(serve) => start_server(settings, printer, &serve).await,
        ServerCommand::Stop => stop(settings, printer).await,
        ServerCommand::Status => status(settings, printer).await,
        // `dispatch.rs` hands these to `server_users`.
        ServerCommand::Users(_)
        | ServerCommand::Tokens(_)
        | ServerCommand::Audit(_)
        | ServerCommand::Limit(_) => Ok(exit_codes::LOCAL),
    }
}

/// `div server start`: in the background, serving the team too where `--listen` says.
async fn start_server(
    settings: &Settings,
    printer: &mut Printer,
    serve: &ServeArgs,
) -> Result<i32, Failure> {
    let team = team_listener(settings, serve)?;
    if answering(settings).await {
        printer.status(&format!(
            "the local control plane is already running{}",
            pid(&settings.home)
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default()
        ));
        if let Some(team) = &team {
            printer.warning(
                &format!(
                    "it was not started here, so `--listen {}` is not applied",
                    team.addr
                ),
                Some("stop it first (`div server stop`), then start it again with `--listen`"),
            );
        }
        return Ok(exit_codes::SUCCESS);
    }
    let mut args = Vec::new();
    if let Some(team) = &team {
        args.extend(["--listen".to_owned(), team.addr.to_string()]);
        if let Some(tls) = &team.tls {
            args.extend(["--tls-cert".to_owned(), tls.cert.display().to_string()]);
            args.extend(["--tls-key".to_owned(), tls.key.display().to_string()]);
        }
    }
    let pid = start_serving(settings, args).await?;
    printer.status(&format!(
        "started the local control plane (pid {pid}) on {}",
        div_server::socket_path(&settings.home).display()
    ));
    if let Some(team) = &team {
        printer.status(&serving_team(team));
    }
    Ok(exit_codes::SUCCESS)
}

/// `serving the team on https://0.0.0.0:8443 (TLS)`.
fn serving_team(team: &div_server::TeamListen) -> String {
    match team.tls {
        Some(_) => format!("serving the team on https://{} (TLS)", team.addr),
        None => format!(
            "serving the team on http://{} (plain HTTP, loopback only)",
            team.addr
        ),
    }
}

/// The team's listener `--listen` asks for, its certificate and key read and checked now:
/// plain HTTP is refused on an address that is not loopback.
fn team_listener(
    settings: &Settings,
    serve: &ServeArgs,
) -> Result<Option<div_server::TeamListen>, Failure> {
    let Some(addr) = serve.listen else {
        return Ok(None);
    };
    let tls = match (&serve.tls_cert, &serve.tls_key) {
        (Some(cert), Some(key)) => Some(div_server::TlsFiles {
            cert: settings.cwd.join(cert),
            key: settings.cwd.join(key),
        }),
        _ => None,
    };
    match &tls {
        None if !addr.ip().is_loopback() => {
            return Err(Failure::new(
                exit_codes::REFUSED,
                div_server::ServerError::PlainHttp(addr),
            )
            .hint(Some(format!(
                "serve it over TLS: `div server start --listen {addr} --tls-cert cert.pem --tls-key key.pem`, or listen on loopback (`127.0.0.1:PORT`) behind a proxy that speaks TLS"
            ))));
        }
        Some(files) => div_server::check_tls(files).map_err(|e| {
            Failure::new(exit_codes::REFUSED, e).hint(Some(
                "give the certificate chain and its private key, both PEM (https://github.com/divergentlabs/div/blob/main/docs/team.md)".into(),
            ))
        })?,
        None => {}
    }
    Ok(Some(div_server::TeamListen { addr, tls }))
}

async fn run(
    settings: &Settings,
    printer: &mut Printer,
    serve: &ServeArgs,
) -> Result<i32, Failure> {
    let team = team_listener(settings, serve)?;
    let exe = this_div()
        .context("could not find the div executable, which supervises runs")
        .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
    let options = ServerOptions {
        home: settings.home.clone(),
        tcp: None,
        team: team.clone(),
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
    // The server's warnings (a Slurm controller slow to answer, what it could not remove)
    // go to its stderr, which is its log (`server.log` when `div` started it).
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .try_init();
    printer.status(&format!(
        "div server: serving {} on {}",
        settings.home.display(),
        div_server::socket_path(&settings.home).display()
    ));
    if let Some(team) = &team {
        printer.status(&format!("div server: {}", serving_team(team)));
    }
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

async fn stop(settings: &Settings, printer: &mut Printer) -> Result<i32, Failure> {
    // One that does not answer the look in time but holds its home is running all the same
    // (once taken for stopped beside the fault suite, and left going).
    let running = answering(settings).await || held(&settings.home);
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
    // It stops answering at once; it lets go of its home once the work in flight has ended
    // (up to 30 s: docs/local-control-plane.md).
    let deadline = Instant::now() + STOP_DEADLINE * 4;
    while answering(settings).await || held(&settings.home) {
        if Instant::now() > deadline {
            return Err(Failure::new(
                exit_codes::LOCAL,
                anyhow!(
                    "the local control plane (pid {pid}) is still running after {}s",
                    (STOP_DEADLINE * 4).as_secs()
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
