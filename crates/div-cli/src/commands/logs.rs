//! `div logs`.

use div_core::{Event, LogsOptions};

use crate::args::LogsArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn logs(
    args: LogsArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = super::connect(settings).await?;
    if args.json {
        printer.log_to_stderr();
    }
    let run = super::which_run(&*cp, settings, printer, args.run).await?;
    let options = LogsOptions {
        run,
        follow: args.follow,
    };
    let mut tail = super::LogTail::default();
    let mut sink = |event: Event| {
        if let Event::Log(bytes) = event {
            tail.saw(&bytes);
            if let Err(e) = printer.log(&bytes)
                && e.kind() == std::io::ErrorKind::BrokenPipe
            {
                std::process::exit(exit_codes::SUCCESS);
            }
        }
    };
    let run = div_core::logs(&*cp, &options, &mut sink)
        .await
        .map_err(super::failure)?;
    tail.end(printer, &run);
    if args.json {
        super::run::print_json(printer, &run)?;
    }
    // Followed to its end, the log is as good as having stayed attached: `div run`'s exit
    // code. Without `--follow`, printing what there is succeeded.
    Ok(if args.follow {
        exit_codes::for_run(&run)
    } else {
        exit_codes::SUCCESS
    })
}
