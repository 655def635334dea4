//! A secret value read as `div secrets set` and `div login` read one: from a file, a prompt
//! that does not echo, or stdin; never from the command line.

use std::io::{IsTerminal, Read};
use std::path::Path;

use anyhow::{Context, anyhow};

use crate::exit_codes;
use crate::printer::Failure;

/// Past this, a value is refused anyway (`div_spec::MAX_ENV_VALUE_BYTES`): reading stops
/// there rather than hold an endless stdin in memory.
const READ_AT_MOST: u64 = div_spec::MAX_ENV_VALUE_BYTES as u64 + 3;

/// A secret value: the file's bytes as they are; else a prompt that does not echo when stdin
/// is a terminal; else all of stdin, less one trailing newline. An empty value is refused.
pub(crate) async fn read_value(prompt: &str, from_file: Option<&Path>) -> Result<String, Failure> {
    let value = match from_file {
        Some(path) => {
            let mut text = String::new();
            std::fs::File::open(path)
                .and_then(|f| f.take(READ_AT_MOST).read_to_string(&mut text))
                .with_context(|| format!("could not read `{}`", path.display()))
                .map_err(|e| Failure::new(exit_codes::REFUSED, e))?;
            text
        }
        None if std::io::stdin().is_terminal() => match prompt_hidden(prompt).await {
            Ok(Some(value)) => value,
            Ok(None) => return Err(Failure::quiet(exit_codes::INTERRUPTED)),
            Err(e) => {
                return Err(Failure::new(
                    exit_codes::LOCAL,
                    anyhow!(e).context("could not read the value"),
                ));
            }
        },
        None => {
            let mut text = String::new();
            std::io::stdin()
                .take(READ_AT_MOST)
                .read_to_string(&mut text)
                .context("could not read the value from stdin")
                .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
            let trimmed = text
                .strip_suffix("\r\n")
                .or_else(|| text.strip_suffix('\n'))
                .unwrap_or(&text);
            trimmed.to_string()
        }
    };
    if value.is_empty() {
        return Err(Failure::new(exit_codes::REFUSED, anyhow!("the value is empty")).hint(Some(
            "pipe it in (`printf %s \"$TOKEN\" | div secrets set NAME`), type it at the prompt, or pass `--from-file`".into(),
        )));
    }
    Ok(value)
}

/// Ask on stderr and read a line from the terminal with echo off; `None` when a Ctrl-C (or a
/// SIGTERM or SIGHUP) came first. The terminal's settings are put back however it ends: the
/// signals are caught for the prompt's lifetime, so none of them kills `div` with echo off
/// (`tests/it/terminal.rs`: `ctrl_c_at_the_secret_prompt_leaves_echo_on`).
async fn prompt_hidden(prompt: &str) -> std::io::Result<Option<String>> {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
    use tokio::signal::unix::{SignalKind, signal};

    /// Puts the terminal's settings back when dropped.
    struct Restore(rustix::termios::Termios);
    impl Drop for Restore {
        fn drop(&mut self) {
            // Nothing more can be done for a terminal that refuses its own settings back.
            tcsetattr(std::io::stdin(), OptionalActions::Now, &self.0).ok();
        }
    }

    // The handlers first, so that no moment has echo off and the default action armed.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let saved = tcgetattr(std::io::stdin())?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    let restore = Restore(saved);
    tcsetattr(std::io::stdin(), OptionalActions::Now, &quiet)?;
    // With echo off, nothing may end `div` before it is put back: a closed stderr only
    // loses the question.
    {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(prompt.as_bytes()).and_then(|()| err.flush());
    }
    // A blocking read on its own thread; one left behind by a signal ends with the process.
    let read = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    let line = tokio::select! {
        line = read => Some(line.map_err(std::io::Error::other)??),
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
        _ = hangup.recv() => None,
    };
    drop(restore);
    crate::printer::to_stderr(format_args!(""));
    // Tokio's handlers stay installed for the rest of the process: from here on a Ctrl-C (or a
    // SIGTERM, SIGHUP) ends `div` at once, as it would have without them, rather than being
    // swallowed while the value is sent.
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
            _ = hangup.recv() => {}
        }
        std::process::exit(crate::exit_codes::INTERRUPTED);
    });
    Ok(line.map(|l| l.trim_end_matches(['\r', '\n']).to_string()))
}
