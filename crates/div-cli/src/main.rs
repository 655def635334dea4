//! The `div` command: places runs on GPUs.

mod args;
mod commands;
mod exit_codes;
mod plot;
mod printer;
mod settings;

fn main() {
    commands::mark_start();
    let cli = args::parse(std::env::args_os().collect());
    // The local control plane moves every shipped file's bytes: its allocator is tuned for
    // that, before its first thread (a short-lived command is faster untuned: a small
    // project's run took 2–3 ms longer tuned, docs/performance.md).
    if let Ok(args::Cli {
        command: args::Command::Server(args::ServerCommand::Run),
        ..
    }) = &cli
    {
        div_server::tune_allocator();
    }
    std::process::exit(commands::main(cli));
}
