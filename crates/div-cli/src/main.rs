//! The `div` command: places runs on GPUs.

mod args;
mod commands;
mod dispatch;
mod exit_codes;
mod plot;
mod printer;
mod settings;

fn main() {
    commands::shared::timings::mark_start();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `div --version` needs none of the command tree clap would build first: it answers as
    // clap does (`div 0.1.0`), in about the time `git --version` takes (docs/performance.md).
    if let [_, flag] = argv.as_slice()
        && (flag == "--version" || flag == "-V")
    {
        std::process::exit(dispatch::print_version());
    }
    // Nor does a run's supervisor (`div __supervise RUN_DIR`), which the local control plane
    // starts on the way to every run's start. Anything clap would refuse or read otherwise (a
    // flag, an empty path, more words) goes through clap.
    if let [_, verb, run_dir] = argv.as_slice()
        && verb == "__supervise"
        && !run_dir.is_empty()
        && !run_dir.as_encoded_bytes().starts_with(b"-")
    {
        std::process::exit(dispatch::supervise(std::path::Path::new(run_dir)));
    }
    let cli = args::parse(argv);
    // The local control plane moves every shipped file's bytes: its allocator is tuned for
    // that, before its first thread (a short-lived command is faster untuned: a small
    // project's run took 2–3 ms longer tuned, docs/performance.md).
    if let Ok(args::Cli {
        command: args::Command::Server(args::ServerCommand::Run(_)),
        ..
    }) = &cli
    {
        div_server::tune_allocator();
    }
    std::process::exit(dispatch::main(cli));
}
