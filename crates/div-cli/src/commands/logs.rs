//! `div logs`.

use div_core::{Event, LogsOptions, last_line};

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
    let options = LogsOptions {
        run: args.run,
        follow: args.follow,
    };
    let mut sink = |event: Event| {
        if let Event::Log(bytes) = event
            && let Err(e) = printer.log(&bytes)
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            std::process::exit(exit_codes::SUCCESS);
        }
    };
    let run = div_core::logs(&*cp, &options, &mut sink)
        .await
        .map_err(super::failure)?;
    printer.status(&last_line(&run));
    if args.json {
        super::run::print_json(printer, &run)?;
    }
    Ok(exit_codes::SUCCESS)
}
