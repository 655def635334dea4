//! The local control plane on its own: `div-serve <home> <supervisor-program>
//! [<emulated-gpus>]`, serving until SIGTERM or SIGINT. The `div` binary offers the same as
//! `div server`; this one lets div-server's tests run the server as another user.

use std::io::Write;

use div_server::{GpuSource, SandboxMode, ServerOptions, SupervisorCommand};

/// Says why on stderr (this binary's only output) and exits with `code`.
fn fail(lines: &[String], code: i32) -> ! {
    let mut err = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "{line}");
    }
    std::process::exit(code)
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let (Some(home), Some(supervisor)) = (args.first(), args.get(1)) else {
        fail(
            &["usage: div-serve <home> <supervisor-program> [<emulated-gpus>]".to_owned()],
            2,
        );
    };
    let gpus = match args.get(2) {
        Some(g) => GpuSource::Emulate(g.to_string_lossy().into_owned()),
        None => GpuSource::Detect,
    };
    let options = ServerOptions {
        home: home.into(),
        tcp: None,
        team: None,
        gpus,
        supervisor: SupervisorCommand {
            program: supervisor.into(),
            args: Vec::new(),
        },
        sandbox: SandboxMode::Auto,
        tick: div_server::DEFAULT_TICK,
        images: Default::default(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => fail(
            &[format!("error: could not start the async runtime: {e}")],
            1,
        ),
    };
    let result = runtime.block_on(div_server::serve(options, async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }));
    if let Err(e) = result {
        fail(&[format!("error: {}", div_api::error_chain(&e))], 1);
    }
}
