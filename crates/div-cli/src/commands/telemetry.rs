//! `div telemetry`.

use std::io::IsTerminal;
use std::time::Duration;

use div_api::TelemetryPoint;
use div_core::Layout;

use super::shared::connect::{connect, which_run};
use super::shared::output::{failure, output_failure};
use crate::args::TelemetryArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

/// How often `--follow` asks for new points.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// Chart width in cells when stdout is not a terminal (on one, the terminal's width).
const WIDTH: usize = 60;
/// Chart height in character cells.
const HEIGHT: usize = 8;

/// How wide `chart` is drawn: to fill the terminal when stdout is one, else [`WIDTH`] cells.
fn width(chart: &div_core::Chart) -> usize {
    match terminal_size::terminal_size_of(std::io::stdout()) {
        Some((terminal_size::Width(columns), _)) => {
            crate::plot::width_for(chart, usize::from(columns))
        }
        None => WIDTH,
    }
}

pub(crate) async fn telemetry(
    args: TelemetryArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    // A layout named on the command line is read before anything is asked.
    let given = match &args.telemetry {
        Some(path) => {
            let path = settings.cwd.join(path);
            let text = std::fs::read_to_string(&path)
                .map_err(|source| failure(div_core::RunError::Read { path, source }))?;
            Some(Layout::parse(&text).map_err(|e| failure(e.into()))?)
        }
        None => None,
    };
    let cp = connect(settings).await?;
    let named = which_run(&*cp, settings, printer, args.run).await?;
    let first = div_core::telemetry(&*cp, &named, 0)
        .await
        .map_err(failure)?;
    let layout = match given {
        Some(layout) => Some(layout),
        None => match &first.run.telemetry_layout {
            Some(text) => Some(Layout::parse(text).map_err(|e| failure(e.into()))?),
            None => None,
        },
    };
    let mut points = first.telemetry.points;
    for bad in &first.telemetry.bad_lines {
        printer.warning(
            &format!(
                "line {} of the telemetry is not a JSON object: {}",
                bad.line, bad.error
            ),
            None,
        );
    }
    let terminal = std::io::stdout().is_terminal();
    let draw = |points: &[TelemetryPoint]| -> String {
        let layout = layout
            .clone()
            .unwrap_or_else(|| Layout::default_for(points));
        div_core::charts(&layout, points)
            .iter()
            .map(|c| crate::plot::render(c, width(c), HEIGHT))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let print_points = |printer: &mut Printer, new: &[TelemetryPoint]| -> Result<(), Failure> {
        if new.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for p in new {
            text.push_str(&p.point.to_string());
            text.push('\n');
        }
        printer.data(&text).map_err(output_failure)
    };
    if args.json || (args.follow && !terminal) {
        print_points(printer, &points)?;
    }
    let mut run = first.run;
    if args.follow {
        while !run.status.is_terminal() {
            if terminal && !args.json {
                printer
                    .data_after_control("\x1b[H\x1b[2J", &draw(&points))
                    .map_err(output_failure)?;
                printer.status(&div_core::last_line(&run));
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            let after = points.last().map_or(0, |p| p.line);
            let next = div_core::telemetry(&*cp, &run.id, after)
                .await
                .map_err(failure)?;
            if args.json || !terminal {
                print_points(printer, &next.telemetry.points)?;
            }
            points.extend(next.telemetry.points);
            run = next.run;
        }
        if terminal && !args.json {
            printer
                .data_after_control("\x1b[H\x1b[2J", "")
                .map_err(output_failure)?;
        }
    }
    if !args.json {
        if points.is_empty() {
            printer.status(&format!("{} has no telemetry points", run.name));
        } else {
            printer.data(&draw(&points)).map_err(output_failure)?;
        }
    }
    if args.follow {
        printer.status(&div_core::last_line(&run));
    }
    Ok(exit_codes::SUCCESS)
}
