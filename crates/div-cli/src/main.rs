//! The `div` command: places runs on GPUs.

mod args;
mod commands;
mod exit_codes;
mod plot;
mod printer;
mod settings;

fn main() {
    div_server::tune_allocator();
    commands::mark_start();
    std::process::exit(commands::main(args::parse(std::env::args_os().collect())));
}
