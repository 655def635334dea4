//! What was typed, run: clap's parse, the settings resolved once, the runtime, the command
//! it names, the exit code. Above every command, and named by `main.rs` alone.

use crate::args::ServerCommand;
use crate::commands::{
    config, dashboard, generate, image, logs, models, result, run, runs, secrets, server,
    server_users, stop, storage, telemetry,
};
use crate::exit_codes;
use crate::printer::Failure;
use crate::settings::Settings;

/// Run what was typed; returns the exit code.
pub(crate) fn main(parsed: Result<crate::args::Cli, clap::Error>) -> i32 {
    use crate::args::Command;
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` go to stdout and succeed; anything else is refused.
            if let Err(e) = e.print() {
                crate::printer::gone_if_broken(&e);
            }
            return if e.use_stderr() {
                exit_codes::REFUSED
            } else {
                exit_codes::SUCCESS
            };
        }
    };
    if let Command::Supervise { run_dir } = &cli.command {
        return supervise(run_dir);
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
            Command::Eval(args) => match eval_as_run(args) {
                Ok(args) => run::run(args, &settings, &mut printer).await,
                Err(failure) => Err(failure),
            },
            Command::Evals(args) => models::evals(args, &settings, &mut printer).await,
            Command::Models(command) => models::models(command, &settings, &mut printer).await,
            Command::Logs(args) => logs::logs(args, &settings, &mut printer).await,
            Command::Stop(args) => stop::stop(args, &settings, &mut printer).await,
            Command::Runs(args) => runs::runs(args, &settings, &mut printer).await,
            Command::Storage(command) => storage::storage(command, &settings, &mut printer).await,
            Command::Secrets(command) => secrets::secrets(command, &settings, &mut printer).await,
            Command::Result(args) => result::result(args, &settings, &mut printer).await,
            Command::Telemetry(args) => telemetry::telemetry(args, &settings, &mut printer).await,
            Command::Config(args) => config::config(args, &settings, &mut printer).await,
            Command::Login(args) => config::login(args, &settings, &mut printer).await,
            Command::Image(command) => image::image(command, &settings, &mut printer).await,
            Command::Dashboard(args) => dashboard::dashboard(args, &settings, &mut printer).await,
            Command::Server(ServerCommand::Users(c)) => {
                server_users::users(c, &settings, &mut printer).await
            }
            Command::Server(ServerCommand::Tokens(c)) => {
                server_users::tokens(c, &settings, &mut printer).await
            }
            Command::Server(ServerCommand::Audit(args)) => {
                server_users::audit(args, &settings, &mut printer).await
            }
            Command::Server(ServerCommand::Limit(args)) => {
                server_users::org_limit(args, &settings, &mut printer).await
            }
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

/// `div eval MODEL …` is `div run … --model MODEL`: every flag of `div run`, its output and
/// its exit code. The model is named once, first.
fn eval_as_run(args: crate::args::EvalArgs) -> Result<crate::args::RunArgs, Failure> {
    let mut run = args.run;
    if let Some(also) = &run.model {
        return Err(Failure::new(
            exit_codes::REFUSED,
            anyhow::anyhow!(
                "`div eval` names its model first; `--model {also}` names another as well"
            ),
        )
        .hint(Some(format!("drop `--model`: `div eval {} …`", args.model))));
    }
    run.model = Some(args.model);
    Ok(run)
}

/// `div __supervise RUN_DIR`: one run of the local control plane, owned until it ends.
pub(crate) fn supervise(run_dir: &std::path::Path) -> i32 {
    server::supervise(run_dir)
}

/// `div --version`, as clap prints it (`div 0.1.0`), without building the command tree.
pub(crate) fn print_version() -> i32 {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "div {}", env!("CARGO_PKG_VERSION")).and_then(|()| out.flush()) {
        crate::printer::gone_if_broken(&e);
        return exit_codes::LOCAL;
    }
    exit_codes::SUCCESS
}
