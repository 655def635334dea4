//! `div __generate`: shell completions and the man pages, from the same clap definition as
//! the help, so they cannot drift.

use std::io::Write;
use std::path::Path;

use anyhow::anyhow;

use clap::CommandFactory;

use super::shared::output::output_failure;
use crate::args::{Cli, Generate};
use crate::exit_codes;
use crate::printer::Failure;

pub(crate) fn generate(what: Generate, dir: Option<&Path>) -> Result<i32, Failure> {
    let mut command = Cli::command();
    if let Some(dir) = dir {
        if !matches!(what, Generate::Man) {
            return Err(Failure::new(
                exit_codes::REFUSED,
                anyhow!("`--dir` goes with `man` only; completions are one file, on stdout"),
            ));
        }
        std::fs::create_dir_all(dir)
            .and_then(|()| clap_mangen::generate_to(command, dir))
            .map_err(|e| {
                Failure::new(
                    exit_codes::LOCAL,
                    anyhow!(
                        "could not write the man pages into `{}`: {e}",
                        dir.display()
                    ),
                )
            })?;
        return Ok(exit_codes::SUCCESS);
    }
    let mut out = Vec::new();
    match what {
        Generate::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut command, "div", &mut out)
        }
        Generate::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut command, "div", &mut out)
        }
        Generate::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut command, "div", &mut out)
        }
        Generate::Man => clap_mangen::Man::new(command)
            .render(&mut out)
            .map_err(output_failure)?,
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&out)
        .and_then(|()| stdout.flush())
        .map_err(output_failure)?;
    Ok(exit_codes::SUCCESS)
}
