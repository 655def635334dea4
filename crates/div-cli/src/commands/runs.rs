//! `div runs`.

use div_api::{CheckOutcome, Run};
use div_core::RunsOptions;

use super::shared::connect::connect;
use super::shared::output::{columns, failure, output_failure, print_json};
use crate::args::RunsArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn runs(
    args: RunsArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let mut options = RunsOptions {
        dir: settings.cwd.clone(),
        project: args.project,
        project_env: settings.project.clone(),
        all: args.all,
        status: args.status,
        limit: args.limit,
        placed_by: None,
    };
    // The project is resolved before the control plane is asked anything.
    if !options.all {
        div_core::resolve_project(
            options.project.as_deref(),
            options.project_env.as_deref(),
            &options.dir,
        )
        .map_err(|e| failure(e.into()))?;
    }
    let cp = connect(settings).await?;
    if args.mine {
        options.placed_by = Some(div_core::whoami(&*cp).await.map_err(failure)?.name);
    }
    let listing = div_core::runs(&*cp, &options).await.map_err(failure)?;
    if args.json {
        print_json(printer, &listing.runs)?;
        return Ok(exit_codes::SUCCESS);
    }
    if listing.runs.is_empty() {
        let what = match (&listing.project, args.status) {
            (Some(p), Some(s)) => format!("no {s} runs in project `{}`", p.slug),
            (Some(p), None) => format!("no runs in project `{}`", p.slug),
            (None, Some(s)) => format!("no {s} runs"),
            (None, None) => "no runs".to_string(),
        };
        let what = match &options.placed_by {
            Some(me) => format!("{what} placed by `{me}`"),
            None => what,
        };
        printer.status(&what);
        return Ok(exit_codes::SUCCESS);
    }
    let now = now_unix();
    printer
        .data(&table(&listing.runs, args.all, now, table_width(settings)))
        .map_err(output_failure)?;
    if listing.more {
        printer.status(&format!(
            "the newest {}; `--limit` shows more",
            listing.runs.len()
        ));
    }
    Ok(exit_codes::SUCCESS)
}

/// How wide the table may be: `COLUMNS` when set, else the terminal's width when stdout is
/// one; `None` (piped, no `COLUMNS`) cuts nothing, so a script reads each command whole.
fn table_width(settings: &Settings) -> Option<usize> {
    settings.columns.or_else(|| {
        terminal_size::terminal_size_of(std::io::stdout())
            .map(|(terminal_size::Width(columns), _)| usize::from(columns))
    })
}

/// What was typed (`train.py::run`, `torchrun --nproc-per-node 8 train.py`), on one line:
/// every run of white space (a newline in a command) one space.
fn typed(run: &Run) -> String {
    run.entrypoint
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` cut to `width` characters, ending with `…` when cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The runs as aligned columns, a header first, ending with `COMMAND` (what was typed), cut
/// so each line fits in `width` characters when there is one. `BY` (who placed each) is there
/// once any was placed by a member rather than the server's owner (on a team's control
/// plane, docs/team.md).
pub(crate) fn table(
    runs: &[Run],
    with_project: bool,
    now: Option<i64>,
    width: Option<usize>,
) -> String {
    let mut rows: Vec<Vec<String>> = vec![
        [
            "NAME", "STATUS", "HARDWARE", "AGE", "DURATION", "SPEND", "CHECKS", "COMMAND",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    ];
    let by = runs
        .iter()
        .any(|r| r.placed_by.as_deref().is_some_and(|b| b != "owner"));
    if by {
        rows[0].insert(2, "BY".into());
    }
    if with_project {
        rows[0].insert(1, "PROJECT".into());
    }
    for run in runs {
        let mut row = vec![
            run.name.clone(),
            run.status.to_string(),
            hardware(run),
            age(&run.created_at, now),
            div_spec::format_duration(run.duration_seconds),
            div_spec::Money::from_cents(run.spent_cents).to_string(),
            checks(run),
            typed(run),
        ];
        if by {
            let who = run.placed_by.as_deref().unwrap_or("-");
            row.insert(2, div_spec::terminal_safe(who).into_owned());
        }
        if with_project {
            row.insert(1, run.project.clone());
        }
        rows.push(row);
    }
    if let Some(width) = width {
        // The columns before the last, each as wide as its widest cell and two spaces.
        let before: usize = (0..rows[0].len() - 1)
            .map(|i| {
                rows.iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
                    + 2
            })
            .sum();
        // At least the header's word: a terminal too narrow wraps rather than loses it.
        let room = width.saturating_sub(before).max("COMMAND".len());
        for row in &mut rows {
            if let Some(last) = row.last_mut() {
                *last = cut(last, room);
            }
        }
    }
    columns(&rows)
}

/// `H100 · 1 core · 8 GiB`, `8× H100 · 8 cores · 64 GiB`, `CPU · 1 core · 2 GiB`.
fn hardware(run: &Run) -> String {
    let sku = run.sku.to_uppercase();
    let units = if run.sku == "cpu" || run.gpus <= 1 {
        sku
    } else {
        format!("{}× {sku}", run.gpus)
    };
    let cores = if run.cores == 1 { "core" } else { "cores" };
    format!("{units} · {} {cores} · {} GiB", run.cores, run.memory_gib)
}

/// `passed 2/2`, `missed 1/2`, `pending` before they are judged, `-` without checks.
fn checks(run: &Run) -> String {
    let total = run.checks.len().max(run.verdicts.len());
    if total == 0 {
        return "-".into();
    }
    if !run.status.is_terminal() || run.verdicts.is_empty() {
        return "pending".into();
    }
    let passed = run
        .verdicts
        .iter()
        .filter(|v| v.outcome == CheckOutcome::Passed)
        .count();
    if passed == total {
        format!("passed {passed}/{total}")
    } else {
        format!("missed {}/{total}", total - passed)
    }
}

/// `12s ago`, `4m ago`, `3h ago`, `5d ago`; `?` for a time that cannot be read.
pub(crate) fn age(created_at: &str, now: Option<i64>) -> String {
    let (Some(then), Some(now)) = (unix_seconds(created_at), now) else {
        return "?".into();
    };
    let s = (now - then).max(0);
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86_400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

pub(crate) fn now_unix() -> Option<i64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok())
}

/// Seconds since the epoch of an RFC 3339 time, `2025-01-01T00:00:00Z`, fractions and any
/// offset (`+02:00`) taken as written; `None` for anything else.
pub(crate) fn unix_seconds(t: &str) -> Option<i64> {
    t.parse::<jiff::Timestamp>().ok().map(|ts| ts.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(t: &str, expect: Option<i64>) {
        assert_eq!(unix_seconds(t), expect, "{t}");
    }

    #[test]
    fn times_are_read() {
        check("1970-01-01T00:00:00Z", Some(0));
        check("2025-01-01T00:00:00Z", Some(1_735_689_600));
        check("2024-02-29T12:30:15.123Z", Some(1_709_209_815));
        check("2025-13-01T00:00:00Z", None);
        check("yesterday", None);
    }

    #[test]
    fn an_offset_is_read_as_written_not_as_utc() {
        // Midnight UTC, written from two hours east and five and a half hours west.
        check("2025-01-01T02:00:00+02:00", Some(1_735_689_600));
        check("2024-12-31T18:30:00-05:30", Some(1_735_689_600));
        check("2025-01-01T00:00:00+00:00", Some(1_735_689_600));
        // No offset at all: a civil time is not an instant.
        check("2025-01-01T00:00:00", None);
    }

    #[test]
    fn a_cut_ends_with_an_ellipsis_and_fits() {
        assert_eq!(cut("train.py::run", 20), "train.py::run");
        assert_eq!(cut("train.py::run", 13), "train.py::run");
        assert_eq!(cut("train.py::run", 8), "train.p…");
        assert_eq!(cut("déjà vu", 4), "déj…");
        assert_eq!(cut("abc", 0), "…");
    }

    #[test]
    fn ages_read_like_people_say_them() {
        let now = Some(1_735_689_600);
        assert_eq!(age("2025-01-01T00:00:00Z", now), "0s ago");
        assert_eq!(age("2024-12-31T23:59:00Z", now), "1m ago");
        assert_eq!(age("2024-12-31T21:00:00Z", now), "3h ago");
        assert_eq!(age("2024-12-25T00:00:00Z", now), "7d ago");
        assert_eq!(age("later", now), "?");
    }
}
