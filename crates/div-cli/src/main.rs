//! The `div` command: places runs on GPUs.

mod args;
mod commands;
mod exit_codes;
mod plot;
mod printer;
mod settings;

use clap::Parser;

fn main() {
    commands::mark_start();
    std::process::exit(commands::main(args::Cli::try_parse()));
}
