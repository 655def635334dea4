//! How every command answers: a div-core failure as `div` says it, data on stdout (`--json`,
//! columns), output that could not be written, the lines a detached run is followed with.

use div_core::RunError;

use crate::exit_codes;
use crate::printer::{Failure, Printer};

/// A div-core failure, with its hint and exit code.
pub(crate) fn failure(e: RunError) -> Failure {
    let code = exit_codes::for_failure(e.kind());
    let hint = e.hint();
    Failure::new(code, e).hint(hint)
}

pub(crate) fn print_json(
    printer: &mut Printer,
    value: &impl serde::Serialize,
) -> Result<(), Failure> {
    let text =
        serde_json::to_string_pretty(value).map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
    printer.data(&text).map_err(output_failure)
}

/// Output that could not be written; a reader that went away (a broken pipe, like `| head`)
/// ends `div` as SIGPIPE would (`printer::reader_gone`).
pub(crate) fn output_failure(e: std::io::Error) -> Failure {
    crate::printer::gone_if_broken(&e);
    Failure::new(
        exit_codes::LOCAL,
        anyhow::Error::new(e).context("could not write the output"),
    )
}

/// Rows as columns separated by two spaces, the last left ragged.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Ctrl-C detaches: the run goes on, and these say how to follow and stop it (`div logs
/// --follow` says the same on Ctrl-C).
pub(crate) fn detached(printer: &mut Printer, name: &str) {
    for line in crate::printer::detached_lines(name) {
        printer.status(&line);
    }
}
