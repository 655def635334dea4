//! `div logs`.

use div_core::{Event, LogsOptions};

use super::shared::connect::{connect, which_run_named};
use super::shared::follow::{LogColours, LogTail, outage_status};
use super::shared::output::{detached, failure, print_json};
use crate::args::LogsArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn logs(
    args: LogsArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    if args.json {
        printer.log_to_stderr();
    }
    let (run, called) = which_run_named(&*cp, settings, printer, args.run).await?;
    let options = LogsOptions {
        run,
        follow: args.follow,
        node: args.node,
    };
    let mut tail = LogTail::default();
    // The log goes to stdout, or to stderr with `--json` (whose terminal `color` speaks for).
    let mut colours = LogColours::new(
        settings.color && (args.json || std::io::IsTerminal::is_terminal(&std::io::stdout())),
    );
    let mut sink = |event: Event| {
        let bytes = match event {
            Event::Log(bytes) => bytes,
            // A held piece of the log's last line is written before the end.
            Event::Ended(_) => Default::default(),
            Event::Queued { reason } => {
                printer.status(&format!("queued: {reason}"));
                return;
            }
            Event::Started { run } => {
                printer.status(&format!("{} started", run.name));
                return;
            }
            other => {
                outage_status(printer, &other);
                return;
            }
        };
        {
            tail.saw(&bytes);
            let idle = bytes.is_empty();
            let now = colours.feed(bytes);
            // A reader that went away ends `div` in the printer ([`crate::printer::reader_gone`]).
            let mut write = |bytes: &[u8]| {
                let _ = printer.log(bytes);
            };
            write(&now);
            if idle && !now.is_empty() {
                write(&[]);
            }
        }
    };
    // Following, Ctrl-C (or a closed pipe) stops following and leaves the run going, as
    // `div run`'s detach does, with the same lines and exit code.
    let ended = if args.follow {
        crate::printer::following(Some(&called));
        let work = div_core::logs(&*cp, &options, &mut sink);
        tokio::select! {
            ended = work => Some(ended),
            _ = tokio::signal::ctrl_c() => None,
        }
    } else {
        Some(div_core::logs(&*cp, &options, &mut sink).await)
    };
    crate::printer::following(None);
    let Some(ended) = ended else {
        detached(printer, &called);
        return Ok(exit_codes::INTERRUPTED);
    };
    let run = ended.map_err(failure)?;
    tail.end(printer, &run);
    if args.json {
        print_json(printer, &run)?;
    }
    // Followed to its end, the log is as good as having stayed attached: `div run`'s exit
    // code. Without `--follow`, printing what there is succeeded.
    Ok(if args.follow {
        exit_codes::for_run(&run)
    } else {
        exit_codes::SUCCESS
    })
}
