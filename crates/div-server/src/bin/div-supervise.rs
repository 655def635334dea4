//! The per-run supervisor, on its own: `div-supervise <run-dir>`. The `div` binary offers the
//! same as `div __supervise <run-dir>`; this one lets div-server's tests run without it.

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(run_dir) = args.next() else {
        std::process::exit(2);
    };
    std::process::exit(div_server::supervise(std::path::Path::new(&run_dir)));
}
