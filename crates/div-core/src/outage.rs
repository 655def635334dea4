//! A follower's patience with a control plane that stops answering.
//!
//! The log stream resumes by itself for `Options::deadline` (30 s) after its last news; past
//! that it fails, and so would `div run` or `div logs --follow`, although the run goes on under
//! its supervisor and the control plane may be back in a minute (a restart, a deploy). A
//! follower instead waits for it for as long as the run can still be going: until the run's
//! latest possible end ([`may_go_on_for`]), then gives up. It says once that it waits
//! ([`Event::ControlPlaneAway`]) and once that the control plane is back
//! ([`Event::ControlPlaneBack`]).

use std::time::{Duration, SystemTime};

use div_api::{ApiError, Run};
use tokio::time::Instant;

use crate::error::RunError;
use crate::event::{Event, EventSink};

/// What is added to a run's latest end for what comes after it: the end record written and
/// read (the supervisor's `end.json`, the control plane's next look, a Slurm job's nodes
/// gathered), and a clock here that differs a little from the control plane's.
pub(crate) const END_MARGIN: Duration = Duration::from_secs(5 * 60);

/// The pause between two asks while the control plane does not answer. Each ask has its own
/// retries and deadline (the client's), so this only keeps a control plane that refuses
/// connections at once from being asked in a tight loop.
const PAUSE: Duration = Duration::from_secs(1);

/// How long from `now` `run` (as last heard of) may still be going, and then its end be
/// recorded, at most: a run lasts at most [`div_spec::MAX_RUN_SECONDS`] from its start,
/// less when its ceiling (`max_spend_cents` at `cents_per_hour`) runs out first; then it is
/// given its stop grace (its own `DIVERGENT_STOP_GRACE`, or the most a control plane's
/// settings may give, [`div_spec::MAX_STOP_GRACE_SECONDS`]) and [`END_MARGIN`]. A run not
/// known to have started (queued when last heard of, or a start this cannot read) is taken
/// to start `now`: whenever it started, it did not start later. An ended run has only the
/// margin, for the rest of its log. Zero once all of that is past.
pub(crate) fn may_go_on_for(run: &Run, now: SystemTime) -> Duration {
    if run.status.is_terminal() {
        return END_MARGIN;
    }
    let mut lasts = div_spec::MAX_RUN_SECONDS;
    if let Some(cents) = run.max_spend_cents
        && let Some(buys) = div_pricing::Rate::from_cents_per_hour(run.cents_per_hour)
            .ceiling_reached_at(div_spec::Money::from_cents(cents.max(0)))
    {
        lasts = lasts.min(buys);
    }
    let grace = run
        .env
        .iter()
        .rev()
        .find(|e| e.key == div_spec::STOP_GRACE_ENV)
        .and_then(|e| div_spec::parse_stop_grace(&e.value).ok())
        .unwrap_or(div_spec::MAX_STOP_GRACE_SECONDS);
    let now_s = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let started = run
        .started_at
        .as_deref()
        .and_then(unix_seconds)
        .filter(|_| run.status != div_api::RunStatus::Queued)
        .map_or(now_s, |s| s.min(now_s));
    let end = started
        .saturating_add(lasts)
        .saturating_add(grace)
        .saturating_add(END_MARGIN.as_secs());
    Duration::from_secs(end.saturating_sub(now_s))
}

/// Seconds since the epoch of an RFC 3339 timestamp (`2026-11-14T22:13:20Z`, with a fraction
/// or an offset), as the API writes them; `None` for anything else.
pub(crate) fn unix_seconds(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = b.get(from..from + n)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0, |a, d| a * 10 + i64::from(d - b'0')))
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(at(4, b'-') && at(7, b'-') && (at(10, b'T') || at(10, b't')) && at(13, b':'))
        || !at(16, b':')
    {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let mut i = 19;
    if at(i, b'.') {
        i += 1;
        let from = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == from {
            return None;
        }
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && at(i + 3, b':') => {
            let minutes = digits(i + 1, 2)? * 60 + digits(i + 4, 2)?;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };
    // Days from 1970-01-01 of a date in the proleptic Gregorian calendar (Howard Hinnant's
    // `days_from_civil`).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset * 60;
    u64::try_from(seconds).ok()
}

/// Since when the control plane has not answered, and until when it is waited for.
#[derive(Debug, Clone, Copy)]
struct Away {
    since: Instant,
    until: Instant,
}

/// A follower's patience: the run as last heard of, and whether (and until when) the
/// follower is waiting for its control plane.
#[derive(Debug)]
pub(crate) struct Patience {
    run: Run,
    away: Option<Away>,
}

impl Patience {
    pub(crate) fn new(run: &Run) -> Patience {
        Patience {
            run: run.clone(),
            away: None,
        }
    }

    /// The control plane said how the run stands.
    pub(crate) fn heard(&mut self, run: &Run) {
        self.run = run.clone();
    }

    /// The control plane answered: when it had not, say it is back.
    pub(crate) fn answered(&mut self, sink: &mut dyn EventSink) {
        if let Some(away) = self.away.take() {
            sink.event(Event::ControlPlaneBack {
                run: self.run.name.clone(),
                after: away.since.elapsed(),
            });
        }
    }

    /// The control plane did not answer (`error`, which is `Unavailable`): the first time,
    /// work out how long the run may still be going and say the follower waits; then wait a
    /// little before the caller asks again. Past the run's latest end (at once, when that is
    /// past already), the follower gives up: [`RunError::ControlPlaneGone`].
    pub(crate) async fn wait(
        &mut self,
        error: ApiError,
        sink: &mut dyn EventSink,
    ) -> Result<(), RunError> {
        let now = Instant::now();
        let away = match self.away {
            Some(away) => away,
            None => {
                let left = may_go_on_for(&self.run, SystemTime::now());
                let away = Away {
                    since: now,
                    until: now + left,
                };
                if !left.is_zero() {
                    sink.event(Event::ControlPlaneAway {
                        run: self.run.name.clone(),
                        cause: div_api::error_chain(&error),
                        at_most: left,
                    });
                }
                self.away = Some(away);
                away
            }
        };
        if now >= away.until {
            return Err(RunError::ControlPlaneGone {
                run: self.run.name.clone(),
                waited: now.duration_since(away.since),
                source: error,
            });
        }
        tokio::time::sleep(PAUSE.min(away.until - now)).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use div_api::{EnvVar, RunStatus};

    use super::{END_MARGIN, may_go_on_for, unix_seconds};

    #[test]
    fn timestamps_read_as_the_api_writes_them() {
        fn check(text: &str, expect: Option<u64>) {
            assert_eq!(unix_seconds(text), expect, "{text}");
        }
        check("1970-01-01T00:00:00Z", Some(0));
        check("2023-11-14T22:13:20Z", Some(1_700_000_000));
        check("2023-11-14T22:13:20.999Z", Some(1_700_000_000));
        check("2023-11-14T23:13:20+01:00", Some(1_700_000_000));
        check("2023-11-14T21:13:20-01:00", Some(1_700_000_000));
        check("2024-02-29T00:00:00Z", Some(1_709_164_800));
        check("2025-01-01T00:00:01Z", Some(1_735_689_601));
        check("2023-11-14 22:13:20", None);
        check("2023-11-14T22:13:20", None);
        check("2023-13-14T22:13:20Z", None);
        check("2023-11-14T22:13:20.Z", None);
        check("yesterday", None);
        check("", None);
    }

    /// `now` is 2023-11-14T22:13:20Z; `expect` is in seconds, the margin included.
    fn check(
        status: RunStatus,
        started: Option<&str>,
        ceiling: Option<(i64, i64)>,
        grace: Option<&str>,
        expect: u64,
    ) {
        let mut run = div_test_support::mock::sample_run("run-k4t9", status);
        run.started_at = started.map(str::to_owned);
        run.max_spend_cents = ceiling.map(|c| c.0);
        run.cents_per_hour = ceiling.map_or(495, |c| c.1);
        if let Some(grace) = grace {
            run.env.push(EnvVar {
                key: div_spec::STOP_GRACE_ENV.to_owned(),
                value: grace.to_owned(),
            });
        }
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            may_go_on_for(&run, now),
            Duration::from_secs(expect),
            "{status} started {started:?}, ceiling {ceiling:?}, grace {grace:?}"
        );
    }

    #[test]
    fn a_run_may_go_on_until_its_latest_end_its_grace_and_the_margin() {
        use RunStatus::*;
        let (day, margin) = (86_400, END_MARGIN.as_secs());
        // Just started, no ceiling: a day, the most grace a control plane gives, the margin.
        check(
            Running,
            Some("2023-11-14T22:13:20Z"),
            None,
            None,
            day + 600 + margin,
        );
        // An hour in: an hour less.
        check(
            Running,
            Some("2023-11-14T21:13:20Z"),
            None,
            None,
            day - 3600 + 600 + margin,
        );
        // Its own grace.
        check(
            Running,
            Some("2023-11-14T22:13:20Z"),
            None,
            Some("30"),
            day + 30 + margin,
        );
        // A ceiling of $4.95 at $4.95/h: an hour from its start.
        check(
            Running,
            Some("2023-11-14T22:13:20Z"),
            Some((495, 495)),
            Some("10"),
            3600 + 10 + margin,
        );
        check(
            Running,
            Some("2023-11-14T21:43:20Z"),
            Some((495, 495)),
            Some("10"),
            1800 + 10 + margin,
        );
        // A ceiling that buys more than a day: the day.
        check(
            Running,
            Some("2023-11-14T22:13:20Z"),
            Some((100_000, 495)),
            Some("0"),
            day + margin,
        );
        // Its day over a minute ago: the rest of its grace and the margin.
        check(
            Running,
            Some("2023-11-13T22:12:20Z"),
            None,
            Some("300"),
            240 + margin,
        );
        // Long past all of it: nothing.
        check(Running, Some("2023-11-12T22:13:20Z"), None, None, 0);
        // A start in the future (clocks differ): from now.
        check(
            Running,
            Some("2023-11-15T22:13:20Z"),
            None,
            Some("0"),
            day + margin,
        );
        // Queued, or a start this cannot read: from now; a ceiling still bounds it.
        check(Queued, None, None, Some("0"), day + margin);
        check(
            Queued,
            Some("2023-11-12T22:13:20Z"),
            None,
            Some("0"),
            day + margin,
        );
        check(Running, Some("a while ago"), None, Some("0"), day + margin);
        check(Queued, None, Some((495, 495)), Some("0"), 3600 + margin);
        // Ended: the margin, for the rest of its log.
        check(Succeeded, Some("2023-11-14T22:13:20Z"), None, None, margin);
    }
}
