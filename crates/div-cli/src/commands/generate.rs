//! `div __generate`: shell completions and the man page, from the same clap definition as the
//! help, so they cannot drift. `cargo xtask completions` / `cargo xtask man` call it.

use std::io::Write;

use clap::CommandFactory;

use crate::args::{Cli, Generate};
use crate::exit_codes;
use crate::printer::Failure;

pub(crate) fn generate(what: Generate) -> Result<i32, Failure> {
    let mut command = Cli::command();
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
            .map_err(super::run::output_failure)?,
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&out)
        .and_then(|()| stdout.flush())
        .map_err(super::run::output_failure)?;
    Ok(exit_codes::SUCCESS)
}
