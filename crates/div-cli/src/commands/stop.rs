//! `div stop`.

use div_core::{StopOutcome, last_line};

use super::shared::connect::{connect, which_run};
use super::shared::output::{failure, print_json};
use crate::args::StopArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn stop(
    args: StopArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let named = which_run(&*cp, settings, printer, args.run).await?;
    let run = match div_core::stop(&*cp, &named).await.map_err(failure)? {
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
        print_json(printer, &run)?;
    }
    Ok(exit_codes::SUCCESS)
}
