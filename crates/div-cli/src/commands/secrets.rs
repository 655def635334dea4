//! `div secrets`: values come from stdin, a prompt that does not echo, or a file — never from
//! the command line, so they stay out of shell history and `ps`.

use std::io::{IsTerminal, Read};
use std::path::Path;

use anyhow::{Context, anyhow};

use crate::args::SecretsCommand;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn secrets(
    command: SecretsCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    match command {
        SecretsCommand::Set { name, from_file } => {
            if !div_spec::is_env_key(&name) {
                return Err(super::failure(div_core::RunError::SecretName(name)));
            }
            let value = read_value(
                &format!("value for {name} (not shown): "),
                from_file
                    .as_deref()
                    .map(|f| settings.cwd.join(f))
                    .as_deref(),
            )?;
            // Refused here, before the control plane is asked: no NUL, at most 128 KiB.
            div_spec::check_env_value(&name, &value)
                .map_err(|e| Failure::new(exit_codes::REFUSED, anyhow!(e)))?;
            let cp = super::connect(settings).await?;
            div_core::secret_set(&*cp, &name, &value)
                .await
                .map_err(super::failure)?;
            printer.status(&format!(
                "secret {name} set; every run placed from now on has it (an --env of the same name wins)"
            ));
        }
        SecretsCommand::Ls { json } => {
            let cp = super::connect(settings).await?;
            let list = div_core::secret_list(&*cp).await.map_err(super::failure)?;
            if json {
                super::run::print_json(printer, &list)?;
            } else if list.is_empty() {
                printer.status("no secrets");
            } else {
                let mut rows = vec![vec!["NAME".to_string(), "UPDATED".to_string()]];
                rows.extend(
                    list.iter()
                        .map(|s| vec![s.name.clone(), s.updated_at.clone()]),
                );
                printer
                    .data(&super::runs::columns(&rows))
                    .map_err(super::run::output_failure)?;
            }
        }
        SecretsCommand::Rm { name } => {
            let cp = super::connect(settings).await?;
            div_core::secret_remove(&*cp, &name)
                .await
                .map_err(super::failure)?;
            printer.status(&format!("secret {name} removed"));
        }
    }
    Ok(exit_codes::SUCCESS)
}

/// Past this, a value is refused anyway (`div_spec::MAX_ENV_VALUE_BYTES`): reading stops
/// there rather than hold an endless stdin in memory.
const READ_AT_MOST: u64 = div_spec::MAX_ENV_VALUE_BYTES as u64 + 3;

/// A secret value: the file's bytes as they are; else a prompt that does not echo when stdin
/// is a terminal; else all of stdin, less one trailing newline. An empty value is refused.
pub(crate) fn read_value(prompt: &str, from_file: Option<&Path>) -> Result<String, Failure> {
    let value = match from_file {
        Some(path) => {
            let mut text = String::new();
            std::fs::File::open(path)
                .and_then(|f| f.take(READ_AT_MOST).read_to_string(&mut text))
                .with_context(|| format!("could not read `{}`", path.display()))
                .map_err(|e| Failure::new(exit_codes::REFUSED, e))?;
            text
        }
        None if std::io::stdin().is_terminal() => prompt_hidden(prompt).map_err(|e| {
            Failure::new(
                exit_codes::LOCAL,
                anyhow!(e).context("could not read the value"),
            )
        })?,
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

/// Ask on stderr and read a line from the terminal with echo off (`stty -echo`), restoring it
/// afterwards.
#[allow(clippy::print_stderr)]
fn prompt_hidden(prompt: &str) -> std::io::Result<String> {
    let stty = |arg: &str| {
        std::process::Command::new("stty")
            .arg(arg)
            .stdin(std::process::Stdio::inherit())
            .status()
    };
    eprint!("{prompt}");
    let hidden = stty("-echo").is_ok_and(|s| s.success());
    let mut line = String::new();
    let read = std::io::stdin().read_line(&mut line);
    if hidden {
        let _ = stty("echo");
    }
    eprintln!();
    read?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}
