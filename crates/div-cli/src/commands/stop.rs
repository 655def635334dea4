//! `div stop`.

use div_core::{StopOutcome, last_line};

use crate::args::StopArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn stop(
    args: StopArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = super::connect(settings).await?;
    let named = super::which_run(&*cp, settings, printer, args.run).await?;
    let run = match div_core::stop(&*cp, &named).await.map_err(super::failure)? {
        StopOutcome::Stopped(run) => {
            printer.status(&last_line(&run));
            run
        }
        StopOutcome::AlreadyEnded(run) => {
            printer.status(&format!("{} had already ended", run.name));
            printer.status(&last_line(&run));
            run
        }
    };
    if args.json {
        super::run::print_json(printer, &run)?;
    }
    Ok(exit_codes::SUCCESS)
}
