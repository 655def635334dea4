//! `div result`.

use std::io::IsTerminal;

use div_api::CheckOutcome;

use super::shared::connect::{connect, which_run};
use super::shared::output::{failure, output_failure};
use crate::args::ResultArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn result(
    args: ResultArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let named = which_run(&*cp, settings, printer, args.run).await?;
    let report = div_core::result(&*cp, &named, &args.check)
        .await
        .map_err(failure)?;
    let stored_missed = report
        .result
        .verdicts
        .iter()
        .any(|v| v.outcome != CheckOutcome::Passed);
    let code = if stored_missed || !report.all_passed() {
        exit_codes::CHECK_MISSED
    } else {
        exit_codes::SUCCESS
    };
    if args.json {
        // Written out through the object's text, so that its numbers read as the run wrote
        // them, then laid out as `serde_json` would.
        let shown = Shown::new(
            &report.result,
            report.text.as_deref(),
            (!args.check.is_empty()).then_some(report.judged.as_slice()),
        );
        let compact =
            serde_json::to_string(&shown).map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
        printer
            .data(&div_core::pretty_json(&compact))
            .map_err(output_failure)?;
        return Ok(code);
    }
    let mut out = String::new();
    match (&report.text, &report.result.result) {
        (Some(text), _) => {
            // The text's escapes are kept; C1 and bidi characters written as they are are
            // escaped for the terminal (the `\u` escapes it writes keep the JSON valid).
            out.push_str(&div_spec::terminal_safe(&div_core::pretty_json(text.get())));
            out.push('\n');
        }
        (None, Some(object)) => {
            // serde_json escapes C0 controls but not C1 or bidi ones: escape those too (the
            // `\u` escapes it writes keep the JSON valid).
            out.push_str(&div_spec::terminal_safe(
                &serde_json::to_string_pretty(object)
                    .map_err(|e| Failure::new(exit_codes::LOCAL, e))?,
            ));
            out.push('\n');
        }
        (None, None) => {
            let why = report
                .result
                .problem
                .as_deref()
                .unwrap_or("it wrote nothing to DIVERGENT_RESULT_PATH");
            printer.status(&format!("{} has no result: {why}", report.result.run));
        }
    }
    // Verdicts go to stdout: coloured only when it is a terminal too.
    let colour = settings.color && std::io::stdout().is_terminal();
    for verdict in &report.result.verdicts {
        out.push_str(&paint_verdict(&verdict.line, verdict.outcome, colour));
        out.push('\n');
    }
    if !report.judged.is_empty() {
        for verdict in &report.judged {
            let outcome = match verdict.outcome {
                div_spec::Outcome::Passed => CheckOutcome::Passed,
                div_spec::Outcome::Failed => CheckOutcome::Failed,
                div_spec::Outcome::Unknown => CheckOutcome::Unknown,
            };
            let line = format!("{} · judged here", verdict.line());
            out.push_str(&paint_verdict(&line, outcome, colour));
            out.push('\n');
        }
    }
    if !out.is_empty() {
        // The JSON and each verdict line (`paint_verdict`) were escaped above.
        printer.data_escaped(&out).map_err(output_failure)?;
    }
    Ok(code)
}

/// `div result --json`: the API's result object with `result` as its text (numbers as the
/// run wrote them), and the checks judged here under `judged` when some were given.
#[derive(serde::Serialize)]
struct Shown<'a> {
    run: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<ShownResult<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<&'a str>,
    verdicts: &'a [div_api::CheckVerdict],
    #[serde(flatten)]
    extra: &'a div_api::Extra,
    #[serde(skip_serializing_if = "Option::is_none")]
    judged: Option<&'a [div_spec::Verdict]>,
}

/// The object: its text when there is one, else the parsed value.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum ShownResult<'a> {
    Text(&'a serde_json::value::RawValue),
    Value(&'a serde_json::Value),
}

impl<'a> Shown<'a> {
    fn new(
        result: &'a div_api::RunResult,
        text: Option<&'a serde_json::value::RawValue>,
        judged: Option<&'a [div_spec::Verdict]>,
    ) -> Shown<'a> {
        Shown {
            run: &result.run,
            result: text
                .map(ShownResult::Text)
                .or(result.result.as_ref().map(ShownResult::Value)),
            problem: result.problem.as_deref(),
            verdicts: &result.verdicts,
            extra: &result.extra,
            judged,
        }
    }
}

/// A verdict's line, escaped for the terminal, then coloured by how it went when `colour`: a
/// miss red, an unknown yellow, a pass green.
pub(crate) fn paint_verdict(line: &str, outcome: CheckOutcome, colour: bool) -> String {
    let line = div_spec::terminal_safe(line);
    let sgr = match outcome {
        CheckOutcome::Passed => "32",
        CheckOutcome::Failed => "31;1",
        _ => "33;1",
    };
    if colour {
        format!("\x1b[{sgr}m{line}\x1b[0m")
    } else {
        line.to_string()
    }
}
