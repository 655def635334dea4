//! One module per command: each turns its arguments into div-core options, calls div-core and
//! renders what comes back.

pub(crate) mod config;
pub(crate) mod dashboard;
pub(crate) mod generate;
pub(crate) mod image;
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

/// The run a command acts on: the one named, or, when none is, the project's latest, said on
/// stderr (`run-k4t9, the latest run of quickstart`). Returns its name or id.
pub(crate) async fn which_run(
    cp: &dyn ControlPlane,
    settings: &Settings,
    printer: &mut crate::printer::Printer,
    named: Option<String>,
) -> Result<String, Failure> {
    Ok(which_run_named(cp, settings, printer, named).await?.0)
}

/// [`which_run`], and what to call the run when speaking of it: as typed, or its name.
pub(crate) async fn which_run_named(
    cp: &dyn ControlPlane,
    settings: &Settings,
    printer: &mut crate::printer::Printer,
    named: Option<String>,
) -> Result<(String, String), Failure> {
    if let Some(named) = named {
        return Ok((named.clone(), named));
    }
    let (project, run) = div_core::latest_run(cp, &settings.cwd, None, settings.project.as_deref())
        .await
        .map_err(failure)?;
    printer.status(&format!("{}, the latest run of {}", run.name, project.slug));
    Ok((run.id, run.name))
}

/// The end of a run's log, kept as it streams by, for [`div_core::missing_module_hint`], and
/// how the run was placed, for the hint's `div run` (`None`: as its record says).
#[derive(Default)]
pub(crate) struct LogTail(Vec<u8>, Option<div_core::PlacedWith>);

impl LogTail {
    /// For a run placed here and now, with the flags typed.
    pub(crate) fn placed_with(placed: div_core::PlacedWith) -> LogTail {
        LogTail(Vec::new(), Some(placed))
    }

    pub(crate) fn saw(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        let over = self.0.len().saturating_sub(div_core::LOG_TAIL_BYTES);
        if over > div_core::LOG_TAIL_BYTES {
            self.0.drain(..over);
        }
    }

    /// The run's last lines, then the hint a missing module gets.
    pub(crate) fn end(&self, printer: &mut crate::printer::Printer, run: &div_api::Run) {
        let line = div_spec::terminal_safe(&div_core::last_line(run)).into_owned();
        // Missed checks stand out: ` · missed 1 of 2 checks` in red.
        let line = match line.rsplit_once(" · missed ") {
            Some((head, missed)) if printer.colour() => {
                format!("{head} · \x1b[31;1mmissed {missed}\x1b[0m")
            }
            _ => line,
        };
        printer.status_escaped(&line);
        let placed = self
            .1
            .clone()
            .unwrap_or_else(|| div_core::PlacedWith::from_record(run));
        if let Some(hint) = div_core::missing_module_hint(&self.0, run, &placed) {
            printer.hint(&hint);
        }
    }
}

/// Colours the verdict lines the control plane writes at the end of a run's log (`check
/// failed: …` red, `check unknown: …` yellow, `check passed: …` green) as the log streams to a
/// terminal. A line is coloured only whole, from its start: a piece that may begin one is held
/// until its line ends, or the stream goes idle (then it is written plain).
pub(crate) struct LogColours {
    on: bool,
    at_line_start: bool,
    held: Vec<u8>,
}

const VERDICTS: &[(&[u8], &str)] = &[
    (b"check failed: ", "31;1"),
    (b"check unknown: ", "33;1"),
    (b"check passed: ", "32"),
];

impl LogColours {
    pub(crate) fn new(on: bool) -> LogColours {
        LogColours {
            on,
            at_line_start: true,
            held: Vec::new(),
        }
    }

    /// What to write now of `bytes`, the next piece of the log; empty `bytes` (the stream is
    /// idle) writes what was held.
    pub(crate) fn feed(&mut self, bytes: bytes::Bytes) -> bytes::Bytes {
        if !self.on {
            return bytes;
        }
        if bytes.is_empty() {
            return std::mem::take(&mut self.held).into();
        }
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(&bytes);
        let mut out = Vec::with_capacity(data.len() + 16);
        let mut rest = &data[..];
        while !rest.is_empty() {
            let (line, ended) = match rest.iter().position(|b| *b == b'\n') {
                Some(at) => (&rest[..=at], true),
                None => (rest, false),
            };
            rest = &rest[line.len()..];
            let starts = self.at_line_start;
            self.at_line_start = ended;
            if !starts {
                out.extend_from_slice(line);
                continue;
            }
            if !ended {
                // A line that may be a verdict, not yet whole: hold it.
                if VERDICTS
                    .iter()
                    .any(|(mark, _)| line.starts_with(mark) || mark.starts_with(line))
                {
                    self.held = line.to_vec();
                    self.at_line_start = true;
                } else {
                    out.extend_from_slice(line);
                }
                continue;
            }
            match VERDICTS.iter().find(|(mark, _)| line.starts_with(mark)) {
                Some((_, sgr)) => {
                    out.extend_from_slice(format!("\x1b[{sgr}m").as_bytes());
                    out.extend_from_slice(&line[..line.len() - 1]);
                    out.extend_from_slice(b"\x1b[0m\n");
                }
                None => out.extend_from_slice(line),
            }
        }
        out.into()
    }
}

/// What a follower (`div run`, `div logs --follow`) says when its control plane stops
/// answering and when it answers again (docs/run.md, "When the control plane goes away");
/// `false` for any other event.
pub(crate) fn outage_status(
    printer: &mut crate::printer::Printer,
    event: &div_core::Event,
) -> bool {
    use div_core::Event;
    match event {
        Event::ControlPlaneAway {
            run,
            cause,
            at_most,
        } => {
            printer.status(&format!(
                "div: the control plane does not answer; waiting for it while {run} may still be going (at most {})",
                div_spec::format_duration(at_most.as_secs())
            ));
            printer.status(&format!("  {cause}"));
            true
        }
        Event::ControlPlaneBack { after, .. } => {
            printer.status(&format!(
                "div: the control plane answers again after {}",
                div_spec::format_duration(after.as_secs())
            ));
            true
        }
        _ => false,
    }
}

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

/// A div-core failure, with its hint and exit code.
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
            Command::Config(args) => config::config(args, &settings, &mut printer).await,
            Command::Login(args) => config::login(args, &settings, &mut printer).await,
            Command::Image(command) => image::image(command, &settings, &mut printer).await,
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

#[cfg(test)]
mod tests {
    use super::LogColours;

    fn fed(on: bool, pieces: &[&str]) -> String {
        let mut colours = LogColours::new(on);
        let mut out = Vec::new();
        for piece in pieces {
            out.extend_from_slice(&colours.feed(bytes::Bytes::copy_from_slice(piece.as_bytes())));
        }
        out.extend_from_slice(&colours.feed(bytes::Bytes::new()));
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn verdict_lines_are_coloured_whole_however_the_log_is_cut() {
        let log = "step 1\ncheck passed: a >= 1 (found 2)\ncheck failed: b < 1 (found 2)\nsaid check failed: no\n";
        let coloured = "step 1\n\x1b[32mcheck passed: a >= 1 (found 2)\x1b[0m\n\x1b[31;1mcheck failed: b < 1 (found 2)\x1b[0m\nsaid check failed: no\n";
        assert_eq!(fed(true, &[log]), coloured);
        // Cut at every byte: the same.
        let pieces: Vec<String> = log.chars().map(String::from).collect();
        let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
        assert_eq!(fed(true, &pieces), coloured);
        assert_eq!(
            fed(true, &["step 1\nche", "ck unknown: c (nothing found)\n"]),
            "step 1\n\x1b[33;1mcheck unknown: c (nothing found)\x1b[0m\n"
        );
        // Off (a pipe, NO_COLOR): untouched.
        assert_eq!(fed(false, &[log]), log);
        // A held piece that never becomes a line is written plain at the end.
        assert_eq!(fed(true, &["ok\ncheck"]), "ok\ncheck");
    }
}
