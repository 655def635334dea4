//! One module per command: each turns its arguments into div-core options, calls div-core and
//! renders what comes back.

pub(crate) mod config;
pub(crate) mod dashboard;
pub(crate) mod generate;
pub(crate) mod logs;
pub(crate) mod result;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod secrets;
pub(crate) mod server;
pub(crate) mod stop;
pub(crate) mod storage;
pub(crate) mod telemetry;

use anyhow::anyhow;
use div_api::{ControlPlane, Endpoint, HttpControlPlane, Options, Token};
use div_core::RunError;

use crate::exit_codes;
use crate::printer::Failure;
use crate::settings::{Settings, Target};

/// The control plane the settings name: a remote one, or the local one (started on demand).
pub(crate) async fn connect(settings: &Settings) -> Result<Box<dyn ControlPlane>, Failure> {
    let mut options = Options::default();
    if let Some(deadline) = settings.deadline {
        options.deadline = deadline;
    }
    match &settings.target {
        Target::Remote { url, token, from } => {
            let endpoint = Endpoint::parse(url).map_err(|e| {
                Failure::new(
                    exit_codes::REFUSED,
                    anyhow!(e).context(format!("`{url}` ({from}) is not a control plane address")),
                )
                .hint(Some("write it like `https://api.example.com`".into()))
            })?;
            options.token = token.clone().map(Token::new);
            let cp = HttpControlPlane::new(endpoint, options)
                .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
            Ok(Box::new(cp))
        }
        Target::Local => server::connect_local(settings, options).await,
    }
}

/// A div-core failure, with its hint and exit code.
/// When `main` began, for `DIVERGENT_TIMINGS`.
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Notes the moment the process began its work (the first thing `main` does).
pub(crate) fn mark_start() {
    let _ = STARTED.set(std::time::Instant::now());
}

/// When `main` began (now, if it never said).
pub(crate) fn started() -> std::time::Instant {
    *STARTED.get_or_init(std::time::Instant::now)
}

pub(crate) fn failure(e: RunError) -> Failure {
    let code = exit_codes::for_failure(e.kind());
    let hint = e.hint();
    Failure::new(code, e).hint(hint)
}

/// Run what was typed; returns the exit code.
pub(crate) fn main(parsed: Result<crate::args::Cli, clap::Error>) -> i32 {
    use crate::args::Command;
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` go to stdout and succeed; anything else is refused.
            let _ = e.print();
            return if e.use_stderr() {
                exit_codes::REFUSED
            } else {
                exit_codes::SUCCESS
            };
        }
    };
    if let Command::Supervise { run_dir } = &cli.command {
        return server::supervise(run_dir);
    }
    if let Command::Generate { what, dir } = &cli.command {
        return match generate::generate(*what, dir.as_deref()) {
            Ok(code) => code,
            Err(failure) => {
                crate::printer::Printer::new(false).failure(&failure);
                failure.code
            }
        };
    }
    let mut printer = crate::printer::Printer::new(false);
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            printer.failure(&Failure::new(exit_codes::LOCAL, e));
            return exit_codes::LOCAL;
        }
    };
    let mut printer = crate::printer::Printer::new(settings.color);
    // `run` and `logs` stream a log on one thread: the connection and its reader then hand
    // bytes over without waking another thread for each piece (blocking work still goes to
    // tokio's pool). The rest, the control plane (`div server run`) among them, keep two.
    let mut builder = if matches!(cli.command, Command::Run(_) | Command::Logs(_)) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    };
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            printer.failure(&Failure::new(exit_codes::LOCAL, e));
            return exit_codes::LOCAL;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args, &settings, &mut printer).await,
            Command::Logs(args) => logs::logs(args, &settings, &mut printer).await,
            Command::Stop(args) => stop::stop(args, &settings, &mut printer).await,
            Command::Runs(args) => runs::runs(args, &settings, &mut printer).await,
            Command::Storage(command) => storage::storage(command, &settings, &mut printer).await,
            Command::Secrets(command) => secrets::secrets(command, &settings, &mut printer).await,
            Command::Result(args) => result::result(args, &settings, &mut printer).await,
            Command::Telemetry(args) => telemetry::telemetry(args, &settings, &mut printer).await,
            Command::Config(args) => config::config(args, &settings, &mut printer),
            Command::Login(args) => config::login(args, &settings, &mut printer),
            Command::Dashboard(args) => dashboard::dashboard(args, &settings, &mut printer).await,
            Command::Server(command) => server::server(command, &settings, &mut printer).await,
            Command::Supervise { .. } | Command::Generate { .. } => Ok(exit_codes::LOCAL),
        }
    });
    // Leave background work (a blocked stdin read, a retry) behind rather than wait for it.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(failure) => {
            printer.failure(&failure);
            failure.code
        }
    }
}
