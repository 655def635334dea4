//! Following a run's log on the terminal: the verdict lines coloured, the end kept for the
//! last line and the missing-module hint, and what a follower says while its control plane is
//! away.

use crate::printer::Printer;

/// The end of a run's log, kept as it streams by, for [`div_core::missing_module_hint`], and
/// how the run was placed, for the hint's `div run` (`None`: as its record says).
#[derive(Default)]
pub(crate) struct LogTail(Vec<u8>, Option<div_core::PlacedWith>);

impl LogTail {
    /// For a run placed here and now, with the flags typed.
    pub(crate) fn placed_with(placed: div_core::PlacedWith) -> LogTail {
        LogTail(Vec::new(), Some(placed))
    }

    pub(crate) fn saw(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        let over = self.0.len().saturating_sub(div_core::LOG_TAIL_BYTES);
        if over > div_core::LOG_TAIL_BYTES {
            self.0.drain(..over);
        }
    }

    /// The run's last lines, then the hint a missing module gets.
    pub(crate) fn end(&self, printer: &mut Printer, run: &div_api::Run) {
        let line = div_spec::terminal_safe(&div_core::last_line(run)).into_owned();
        // Missed checks stand out: ` · missed 1 of 2 checks` in red.
        let line = match line.rsplit_once(" · missed ") {
            Some((head, missed)) if printer.colour() => {
                format!("{head} · \x1b[31;1mmissed {missed}\x1b[0m")
            }
            _ => line,
        };
        printer.status_escaped(&line);
        let placed = self
            .1
            .clone()
            .unwrap_or_else(|| div_core::PlacedWith::from_record(run));
        if let Some(hint) = div_core::missing_module_hint(&self.0, run, &placed) {
            printer.hint(&hint);
        }
    }
}

/// Colours the verdict lines the control plane writes at the end of a run's log (`check
/// failed: …` red, `check unknown: …` yellow, `check passed: …` green) as the log streams to a
/// terminal. A line is coloured only whole, from its start: a piece that may begin one is held
/// until its line ends, or the stream goes idle (then it is written plain).
pub(crate) struct LogColours {
    on: bool,
    at_line_start: bool,
    held: Vec<u8>,
}

const VERDICTS: &[(&[u8], &str)] = &[
    (b"check failed: ", "31;1"),
    (b"check unknown: ", "33;1"),
    (b"check passed: ", "32"),
];

impl LogColours {
    pub(crate) fn new(on: bool) -> LogColours {
        LogColours {
            on,
            at_line_start: true,
            held: Vec::new(),
        }
    }

    /// What to write now of `bytes`, the next piece of the log; empty `bytes` (the stream is
    /// idle) writes what was held.
    pub(crate) fn feed(&mut self, bytes: bytes::Bytes) -> bytes::Bytes {
        if !self.on {
            return bytes;
        }
        if bytes.is_empty() {
            return std::mem::take(&mut self.held).into();
        }
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(&bytes);
        let mut out = Vec::with_capacity(data.len() + 16);
        let mut rest = &data[..];
        while !rest.is_empty() {
            let (line, ended) = match rest.iter().position(|b| *b == b'\n') {
                Some(at) => (&rest[..=at], true),
                None => (rest, false),
            };
            rest = &rest[line.len()..];
            let starts = self.at_line_start;
            self.at_line_start = ended;
            if !starts {
                out.extend_from_slice(line);
                continue;
            }
            if !ended {
                // A line that may be a verdict, not yet whole: hold it.
                if VERDICTS
                    .iter()
                    .any(|(mark, _)| line.starts_with(mark) || mark.starts_with(line))
                {
                    self.held = line.to_vec();
                    self.at_line_start = true;
                } else {
                    out.extend_from_slice(line);
                }
                continue;
            }
            match VERDICTS.iter().find(|(mark, _)| line.starts_with(mark)) {
                Some((_, sgr)) => {
                    out.extend_from_slice(format!("\x1b[{sgr}m").as_bytes());
                    out.extend_from_slice(&line[..line.len() - 1]);
                    out.extend_from_slice(b"\x1b[0m\n");
                }
                None => out.extend_from_slice(line),
            }
        }
        out.into()
    }
}

/// What a follower (`div run`, `div logs --follow`) says when its control plane stops
/// answering and when it answers again (docs/run.md, "When the control plane goes away");
/// `false` for any other event.
pub(crate) fn outage_status(printer: &mut Printer, event: &div_core::Event) -> bool {
    use div_core::Event;
    match event {
        Event::ControlPlaneAway {
            run,
            cause,
            at_most,
        } => {
            printer.status(&format!(
                "div: the control plane does not answer; waiting for it while {run} may still be going (at most {})",
                div_spec::format_duration(at_most.as_secs())
            ));
            printer.status(&format!("  {cause}"));
            true
        }
        Event::ControlPlaneBack { after, .. } => {
            printer.status(&format!(
                "div: the control plane answers again after {}",
                div_spec::format_duration(after.as_secs())
            ));
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::LogColours;

    fn fed(on: bool, pieces: &[&str]) -> String {
        let mut colours = LogColours::new(on);
        let mut out = Vec::new();
        for piece in pieces {
            out.extend_from_slice(&colours.feed(bytes::Bytes::copy_from_slice(piece.as_bytes())));
        }
        out.extend_from_slice(&colours.feed(bytes::Bytes::new()));
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn verdict_lines_are_coloured_whole_however_the_log_is_cut() {
        let log = "step 1\ncheck passed: a >= 1 (found 2)\ncheck failed: b < 1 (found 2)\nsaid check failed: no\n";
        let coloured = "step 1\n\x1b[32mcheck passed: a >= 1 (found 2)\x1b[0m\n\x1b[31;1mcheck failed: b < 1 (found 2)\x1b[0m\nsaid check failed: no\n";
        assert_eq!(fed(true, &[log]), coloured);
        // Cut at every byte: the same.
        let pieces: Vec<String> = log.chars().map(String::from).collect();
        let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
        assert_eq!(fed(true, &pieces), coloured);
        assert_eq!(
            fed(true, &["step 1\nche", "ck unknown: c (nothing found)\n"]),
            "step 1\n\x1b[33;1mcheck unknown: c (nothing found)\x1b[0m\n"
        );
        // Off (a pipe, NO_COLOR): untouched.
        assert_eq!(fed(false, &[log]), log);
        // A held piece that never becomes a line is written plain at the end.
        assert_eq!(fed(true, &["ok\ncheck"]), "ok\ncheck");
    }
}
