//! Everything `div` writes. stdout carries data only (a run's log, `--json`, a name from
//! `--detach`); status lines, progress, warnings and errors go to stderr.
//!
//! A reader that went away (`div runs | head -1`, `div run … 2>&1 | head -4`) ends `div` as it
//! ends any Unix program whose output is a closed pipe: killed by SIGPIPE, printing nothing
//! ([`reader_gone`]). Every write here goes through one place that knows it; nothing panics.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use div_spec::terminal_safe;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A failure, ready to print: the error with its causes, a hint, and the exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: anyhow::Error,
    pub(crate) hint: Option<String>,
    pub(crate) code: i32,
    /// Printed nothing: the reader of stdout went away (a broken pipe exits quietly).
    pub(crate) quiet: bool,
}

impl Failure {
    pub(crate) fn new(code: i32, error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            error: error.into(),
            hint: None,
            code,
            quiet: false,
        }
    }

    /// A failure that prints nothing and exits with `code`.
    pub(crate) fn quiet(code: i32) -> Failure {
        Failure {
            error: anyhow::anyhow!("quiet"),
            hint: None,
            code,
            quiet: true,
        }
    }

    pub(crate) fn hint(mut self, hint: Option<String>) -> Failure {
        self.hint = hint;
        self
    }
}

/// The run a closed pipe would leave going (set while `div run` or `div logs --follow` follows
/// one): [`reader_gone`] says on stderr, if it still can, that it goes on and how to reach it.
static GOING_ON: Mutex<Option<String>> = Mutex::new(None);

/// From now on a closed pipe leaves `run` going (`Some`), or no run (`None`: it ended).
pub(crate) fn following(run: Option<&str>) {
    *GOING_ON.lock().unwrap_or_else(|e| e.into_inner()) = run.map(str::to_owned);
}

/// What `div` says when it stops following `name`, which goes on (Ctrl-C on `div run` or
/// `div logs --follow`, a closed pipe): how to follow it again and how to stop it.
pub(crate) fn detached_lines(name: &str) -> [String; 3] {
    [
        format!("detached from {name}; it goes on"),
        format!("  follow it again: div logs {name} --follow"),
        format!("  stop it:         div stop {name}"),
    ]
}

/// The reader of stdout or stderr went away (a broken pipe: `| head`): `div` ends as a
/// program killed by SIGPIPE does (a shell says 141), printing nothing more, except, when a
/// run it followed goes on, [`detached_lines`] on stderr if stderr is still open. The run is
/// never stopped by this: it is the control plane's, not this process's.
pub(crate) fn reader_gone() -> ! {
    let going_on = GOING_ON.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(name) = going_on {
        let name = terminal_safe(&name).into_owned();
        let mut err = io::stderr().lock();
        for line in detached_lines(&name) {
            if writeln!(err, "{line}").is_err() {
                break;
            }
        }
    }
    // Default SIGPIPE, then raised: killed by it, as `yes | head -1` is.
    let _ = signal_hook::low_level::emulate_default_handler(signal_hook::consts::SIGPIPE);
    // Not reached where signals work; the code a shell would have shown.
    std::process::exit(128 + signal_hook::consts::SIGPIPE)
}

/// `text` and a newline on stderr; a closed stderr ends `div` ([`reader_gone`]), any other
/// failure to write is let be (there is nowhere left to say it).
pub(crate) fn to_stderr(text: std::fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    if let Err(e) = err.write_fmt(text).and_then(|()| err.write_all(b"\n")) {
        gone_if_broken(&e);
    }
}

/// `text` on stderr with no newline (a question), flushed.
pub(crate) fn prompt(text: &str) {
    let mut err = io::stderr().lock();
    if let Err(e) = err.write_all(text.as_bytes()).and_then(|()| err.flush()) {
        gone_if_broken(&e);
    }
}

/// Ends `div` ([`reader_gone`]) when `e` says the reader went away.
pub(crate) fn gone_if_broken(e: &io::Error) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        reader_gone();
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
    /// Where the log goes when stdout is not a terminal: stdout's file descriptor, duplicated,
    /// behind one buffer (no line buffering, no flush per chunk). Made at the first log bytes;
    /// flushed when the stream goes idle, before anything else is printed, and at the end.
    piped_log: Option<BufWriter<File>>,
    progress: Option<Progress>,
}

/// The buffer of a piped log: smaller writes are gathered, larger ones go straight through.
const PIPED_LOG_BUFFER: usize = 128 << 10;

#[derive(Debug)]
struct Progress {
    bar: ProgressBar,
    /// Set when the upload ended, under the lock the timer takes before showing the bar.
    done: Arc<Mutex<bool>>,
}

/// Whether an upload of `bytes` gets a progress bar (once it takes long): only on a
/// terminal, and only when something is sent.
pub(crate) fn shows_progress(stderr_is_terminal: bool, bytes: u64) -> bool {
    stderr_is_terminal && bytes > 0
}

const WARNING: anstyle::Style = anstyle::AnsiColor::Yellow.on_default().bold();
const HINT: anstyle::Style = anstyle::AnsiColor::Cyan.on_default().bold();
pub(crate) const ERROR: anstyle::Style = anstyle::AnsiColor::Red.on_default().bold();
const CAUSE: anstyle::Style = anstyle::AnsiColor::Red.on_default();

/// An upload shorter than this shows no progress bar.
const PROGRESS_AFTER: Duration = Duration::from_millis(700);

impl Printer {
    pub(crate) fn new(color: bool) -> Printer {
        Printer {
            color,
            log_to_stderr: false,
            at_line_start: true,
            piped_log: None,
            progress: None,
        }
    }

    /// Send the run's log to stderr (for `--json`).
    pub(crate) fn log_to_stderr(&mut self) {
        self.log_to_stderr = true;
    }

    /// A status line on stderr.
    pub(crate) fn status(&mut self, line: &str) {
        self.flush_log_quietly();
        self.end_log_line();
        to_stderr(format_args!("{}", terminal_safe(line)));
    }

    /// A status line whose run-provided parts went through [`terminal_safe`] already, with
    /// div's own colours in it.
    pub(crate) fn status_escaped(&mut self, line: &str) {
        self.flush_log_quietly();
        self.end_log_line();
        to_stderr(format_args!("{line}"));
    }

    /// Whether div's own colours are on (a terminal, no `NO_COLOR`, or `CLICOLOR_FORCE`).
    pub(crate) fn colour(&self) -> bool {
        self.color
    }

    /// `warning: …` and `hint: …` on stderr.
    pub(crate) fn warning(&mut self, message: &str, hint: Option<&str>) {
        self.flush_log_quietly();
        self.end_log_line();
        to_stderr(format_args!(
            "{}: {}",
            self.paint("warning", WARNING),
            terminal_safe(message)
        ));
        if let Some(hint) = hint {
            to_stderr(format_args!(
                "{}: {}",
                self.paint("hint", HINT),
                terminal_safe(hint)
            ));
        }
    }

    /// `hint: …` on stderr.
    pub(crate) fn hint(&mut self, hint: &str) {
        self.flush_log_quietly();
        self.end_log_line();
        to_stderr(format_args!(
            "{}: {}",
            self.paint("hint", HINT),
            terminal_safe(hint)
        ));
    }

    /// Bytes of the run's log, as they arrive; none means the stream is caught up for now,
    /// so what is buffered is written.
    ///
    /// To a terminal (or stderr) each piece is written and flushed as it comes. To a pipe or
    /// file, whole pieces go through one buffer on stdout's file descriptor, written when the
    /// buffer fills, the stream goes idle, something else is printed, or the printer drops.
    ///
    /// A reader that went away ends `div` here ([`reader_gone`]); other errors are returned.
    pub(crate) fn log(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_log(bytes).inspect_err(gone_if_broken)
    }

    fn write_log(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return self.flush_log();
        }
        self.at_line_start = bytes.ends_with(b"\n");
        if self.log_to_stderr {
            let mut err = io::stderr().lock();
            err.write_all(bytes)?;
            return err.flush();
        }
        if self.piped_log.is_none() && !io::stdout().is_terminal() {
            let fd = io::stdout().as_fd().try_clone_to_owned()?;
            self.piped_log = Some(BufWriter::with_capacity(PIPED_LOG_BUFFER, File::from(fd)));
        }
        match &mut self.piped_log {
            Some(out) => out.write_all(bytes),
            None => {
                let mut out = io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()
            }
        }
    }

    /// Write what the piped log has buffered.
    fn flush_log(&mut self) -> io::Result<()> {
        match &mut self.piped_log {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }

    /// Write what the piped log has buffered before something else is printed; a reader
    /// that went away is told by the next write, not here.
    fn flush_log_quietly(&mut self) {
        if self.flush_log().is_err() {
            // The buffer keeps the bytes it could not write; drop them with the writer, so
            // later writes do not retry them.
            if let Some(out) = self.piped_log.take() {
                let _ = out.into_parts();
            }
        }
    }

    /// Data on stdout: a line of it. Characters a terminal would act on are escaped
    /// (`div_spec::terminal_safe`): names, paths and strings in data come from runs.
    pub(crate) fn data(&mut self, text: &str) -> io::Result<()> {
        self.data_after_control("", text)
    }

    /// `text` as it is, for output whose run-provided parts the caller has already passed
    /// through [`terminal_safe`] (a verdict line coloured after it was escaped).
    pub(crate) fn data_escaped(&mut self, text: &str) -> io::Result<()> {
        self.data_after_control(text, "")
    }

    /// `control` (div's own terminal sequences, such as clearing the screen) as it is, then
    /// `text` as [`Printer::data`] writes it.
    ///
    /// A reader that went away ends `div` here ([`reader_gone`]); other errors are returned.
    pub(crate) fn data_after_control(&mut self, control: &str, text: &str) -> io::Result<()> {
        self.write_data(control, text).inspect_err(gone_if_broken)
    }

    fn write_data(&mut self, control: &str, text: &str) -> io::Result<()> {
        self.flush_log()?;
        let mut out = io::stdout().lock();
        out.write_all(control.as_bytes())?;
        out.write_all(terminal_safe(text).as_bytes())?;
        let ended = text.ends_with('\n') || (text.is_empty() && control.ends_with('\n'));
        if !ended {
            out.write_all(b"\n")?;
        }
        out.flush()
    }

    /// An upload's own events shown as they come (its progress bar); any other is not one.
    pub(crate) fn upload_event(&mut self, event: &div_core::Event) {
        match event {
            div_core::Event::UploadStarted { bytes, .. } => self.upload_started(*bytes),
            div_core::Event::UploadProgress { sent } => self.upload_progress(*sent),
            div_core::Event::UploadFinished => self.upload_finished(),
            _ => {}
        }
    }

    /// An upload of `bytes` began: on a terminal, a progress bar once it has taken
    /// [`PROGRESS_AFTER`] (shown by a timer, so one large file that takes long shows it too).
    pub(crate) fn upload_started(&mut self, bytes: u64) {
        self.upload_finished();
        if !shows_progress(io::stderr().is_terminal(), bytes) {
            return;
        }
        let bar = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::hidden());
        // Bytes in the shipping line's units (`3.0 GB`), not indicatif's binary ones.
        bar.set_style(
            ProgressStyle::with_template("uploading {bar:30} {sent}/{total} {elapsed}")
                .map(|style| {
                    style
                        .with_key(
                            "sent",
                            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                                let _ = w.write_str(&div_spec::format_bytes(state.pos()));
                            },
                        )
                        .with_key(
                            "total",
                            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                                let total = state.len().unwrap_or_default();
                                let _ = w.write_str(&div_spec::format_bytes(total));
                            },
                        )
                })
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let done = Arc::new(Mutex::new(false));
        let (timer_bar, timer_done) = (bar.clone(), Arc::clone(&done));
        let shown = std::thread::Builder::new()
            .name("upload-progress".into())
            .spawn(move || {
                std::thread::sleep(PROGRESS_AFTER);
                let done = timer_done.lock().unwrap_or_else(|e| e.into_inner());
                if !*done {
                    timer_bar.set_draw_target(ProgressDrawTarget::stderr());
                    timer_bar.enable_steady_tick(Duration::from_millis(200));
                }
            });
        if shown.is_ok() {
            self.progress = Some(Progress { bar, done });
        }
    }

    /// What is shipped is being hashed: on a terminal, once it has taken [`PROGRESS_AFTER`],
    /// `hashing 1.2 GB 3s`, read from `hashed` until [`Printer::upload_finished`] (which ends
    /// any progress shown).
    pub(crate) fn hashing_started(&mut self, hashed: Arc<std::sync::atomic::AtomicU64>) {
        self.upload_finished();
        if !io::stderr().is_terminal() {
            return;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("hashing what to ship {sent} {elapsed}")
                .map(|style| {
                    style.with_key(
                        "sent",
                        |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                            let _ = w.write_str(&div_spec::format_bytes(state.pos()));
                        },
                    )
                })
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let done = Arc::new(Mutex::new(false));
        let (timer_bar, timer_done) = (bar.clone(), Arc::clone(&done));
        let shown = std::thread::Builder::new()
            .name("hashing-progress".into())
            .spawn(move || {
                std::thread::sleep(PROGRESS_AFTER);
                loop {
                    let done = timer_done.lock().unwrap_or_else(|e| e.into_inner());
                    if *done {
                        return;
                    }
                    if timer_bar.is_hidden() {
                        timer_bar.set_draw_target(ProgressDrawTarget::stderr());
                    }
                    timer_bar.set_position(hashed.load(std::sync::atomic::Ordering::Relaxed));
                    drop(done);
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        if shown.is_ok() {
            self.progress = Some(Progress { bar, done });
        }
    }

    pub(crate) fn upload_progress(&mut self, sent: u64) {
        if let Some(p) = &self.progress {
            p.bar.set_position(sent);
        }
    }

    pub(crate) fn upload_finished(&mut self) {
        if let Some(p) = self.progress.take() {
            let mut done = p.done.lock().unwrap_or_else(|e| e.into_inner());
            *done = true;
            p.bar.finish_and_clear();
        }
    }

    /// `error: …`, one `caused by: …` per source, then `hint: …`.
    pub(crate) fn failure(&mut self, failure: &Failure) {
        self.flush_log_quietly();
        self.upload_finished();
        if failure.quiet {
            return;
        }
        self.end_log_line();
        let safe = |text: String| terminal_safe(&text).into_owned();
        to_stderr(format_args!(
            "{}: {}",
            self.paint("error", ERROR),
            safe(failure.error.to_string())
        ));
        for cause in failure.error.chain().skip(1) {
            to_stderr(format_args!(
                "{}: {}",
                self.paint("caused by", CAUSE),
                safe(cause.to_string())
            ));
        }
        if let Some(hint) = &failure.hint {
            to_stderr(format_args!(
                "{}: {}",
                self.paint("hint", HINT),
                terminal_safe(hint)
            ));
        }
    }

    /// A log that did not end its last line gets one before a status line, so the status
    /// starts at the left edge.
    fn end_log_line(&mut self) {
        if !self.at_line_start {
            self.at_line_start = true;
            if self.log_to_stderr || io::stdout().is_terminal() {
                to_stderr(format_args!(""));
            }
        }
    }

    /// `text` in `style` when colour is on (anstream's choice: a terminal, `NO_COLOR`, `CLICOLOR_FORCE`).
    pub(crate) fn paint(&self, text: &str, style: anstyle::Style) -> String {
        if self.color {
            format!("{style}{text}{style:#}")
        } else {
            text.to_string()
        }
    }
}

impl Drop for Printer {
    fn drop(&mut self) {
        self.flush_log_quietly();
    }
}

#[cfg(test)]
mod tests {
    fn check(terminal: bool, bytes: u64, expect: bool) {
        assert_eq!(
            super::shows_progress(terminal, bytes),
            expect,
            "{terminal} {bytes}"
        );
    }

    #[test]
    fn a_progress_bar_only_on_a_terminal_and_only_when_something_is_sent() {
        check(true, 1, true);
        check(true, 6_000_000_000, true);
        check(true, 0, false);
        check(false, 6_000_000_000, false);
    }
}
