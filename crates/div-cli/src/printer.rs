//! Everything `div` writes. stdout carries data only (a run's log, `--json`, a name from
//! `--detach`); status lines, progress, warnings and errors go to stderr.
#![allow(clippy::print_stderr)]

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A failure, ready to print: the error with its causes, a hint, and the exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: anyhow::Error,
    pub(crate) hint: Option<String>,
    pub(crate) code: i32,
}

impl Failure {
    pub(crate) fn new(code: i32, error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            error: error.into(),
            hint: None,
            code,
        }
    }

    pub(crate) fn hint(mut self, hint: Option<String>) -> Failure {
        self.hint = hint;
        self
    }
}

/// Where output goes and how it looks.
#[derive(Debug)]
pub(crate) struct Printer {
    color: bool,
    /// Whether the run's log goes to stderr (`--json`, so stdout is exactly the JSON).
    log_to_stderr: bool,
    /// Whether the last byte of the log written ended a line.
    at_line_start: bool,
    progress: Option<Progress>,
}

#[derive(Debug)]
struct Progress {
    bar: ProgressBar,
    started: Instant,
    shown: bool,
}

/// An upload shorter than this shows no progress bar.
const PROGRESS_AFTER: Duration = Duration::from_millis(700);

impl Printer {
    pub(crate) fn new(color: bool) -> Printer {
        Printer {
            color,
            log_to_stderr: false,
            at_line_start: true,
            progress: None,
        }
    }

    /// Send the run's log to stderr (for `--json`).
    pub(crate) fn log_to_stderr(&mut self) {
        self.log_to_stderr = true;
    }

    /// A status line on stderr.
    pub(crate) fn status(&mut self, line: &str) {
        self.end_log_line();
        eprintln!("{line}");
    }

    /// `warning: …` and `hint: …` on stderr.
    pub(crate) fn warning(&mut self, message: &str, hint: Option<&str>) {
        self.end_log_line();
        eprintln!("{}: {message}", self.paint("warning", "33;1"));
        if let Some(hint) = hint {
            eprintln!("{}: {hint}", self.paint("hint", "36;1"));
        }
    }

    /// Bytes of the run's log, as they arrive.
    pub(crate) fn log(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.at_line_start = bytes.ends_with(b"\n");
        if self.log_to_stderr {
            let mut err = io::stderr().lock();
            err.write_all(bytes)?;
            err.flush()
        } else {
            let mut out = io::stdout().lock();
            out.write_all(bytes)?;
            out.flush()
        }
    }

    /// Data on stdout: a line of it.
    pub(crate) fn data(&mut self, text: &str) -> io::Result<()> {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes())?;
        if !text.ends_with('\n') {
            out.write_all(b"\n")?;
        }
        out.flush()
    }

    /// An upload of `bytes` began: a progress bar on a terminal, once it takes a while.
    pub(crate) fn upload_started(&mut self, bytes: u64) {
        if !io::stderr().is_terminal() || bytes == 0 {
            return;
        }
        let bar = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "uploading {bar:30} {binary_bytes}/{binary_total_bytes} {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        self.progress = Some(Progress {
            bar,
            started: Instant::now(),
            shown: false,
        });
    }

    pub(crate) fn upload_progress(&mut self, sent: u64) {
        if let Some(p) = &mut self.progress {
            if !p.shown && p.started.elapsed() >= PROGRESS_AFTER {
                p.bar.set_draw_target(ProgressDrawTarget::stderr());
                p.shown = true;
            }
            p.bar.set_position(sent);
        }
    }

    pub(crate) fn upload_finished(&mut self) {
        if let Some(p) = self.progress.take() {
            p.bar.finish_and_clear();
        }
    }

    /// `error: …`, one `caused by: …` per source, then `hint: …`.
    pub(crate) fn failure(&mut self, failure: &Failure) {
        self.upload_finished();
        self.end_log_line();
        eprintln!("{}: {}", self.paint("error", "31;1"), failure.error);
        for cause in failure.error.chain().skip(1) {
            eprintln!("{}: {cause}", self.paint("caused by", "31"));
        }
        if let Some(hint) = &failure.hint {
            eprintln!("{}: {hint}", self.paint("hint", "36;1"));
        }
    }

    /// A log that did not end its last line gets one before a status line, so the status
    /// starts at the left edge.
    fn end_log_line(&mut self) {
        if !self.at_line_start {
            self.at_line_start = true;
            if self.log_to_stderr || io::stdout().is_terminal() {
                eprintln!();
            }
        }
    }

    fn paint(&self, text: &str, sgr: &str) -> String {
        if self.color {
            format!("\x1b[{sgr}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}
