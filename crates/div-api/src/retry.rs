//! The retry policy: which failures are worth another try (one table, [`classify`]), how
//! long to wait before it ([`Backoff`]), and the loop that tries until success, a final
//! failure or the deadline ([`retry`]).
//!
//! Every route of the contract is idempotent (run creation by its `Idempotency-Key`), so a
//! request is retried whenever the failure can pass by itself. A blob upload is the
//! exception: a connection cut while it was sent may have left part of it on the server, so
//! it is not sent again whole; the upload's own loop (`upload.rs`) asks how much arrived.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::ErrorKind;
use crate::options::Options;

/// What went wrong with one try, as [`classify`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server answered with this status, not a success.
    Status(u16),
    /// No connection was made: nothing reached the server.
    Connect,
    /// The connection broke after the request began.
    Cut,
    /// The TLS handshake failed.
    Tls,
    /// The answer was larger than this client reads.
    TooLarge,
}

/// What the client does about a [`Failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Whether the same request is sent again (after a pause, within the deadline).
    pub(crate) retry: bool,
    /// The kind of the error when it is not retried, or when retries run out.
    pub(crate) kind: ErrorKind,
    /// Why, for the next reader of this table.
    pub(crate) why: &'static str,
}

/// Statuses `from..=to`; the first row that holds a status decides.
struct StatusRow {
    from: u16,
    to: u16,
    verdict: Verdict,
}

const fn row(from: u16, to: u16, retry: bool, kind: ErrorKind, why: &'static str) -> StatusRow {
    StatusRow {
        from,
        to,
        verdict: Verdict { retry, kind, why },
    }
}

/// The table for answers that are not a success.
const STATUSES: &[StatusRow] = &[
    row(
        401,
        401,
        false,
        ErrorKind::Unauthorized,
        "the credentials are missing or wrong; the same ones fail again",
    ),
    row(
        403,
        403,
        false,
        ErrorKind::Unauthorized,
        "the credentials may not do this; the same ones fail again",
    ),
    row(
        404,
        404,
        false,
        ErrorKind::NotFound,
        "the thing asked for does not exist",
    ),
    row(
        405,
        405,
        false,
        ErrorKind::NotFound,
        "the route does not take this method: a control plane without it, as for a 404",
    ),
    row(
        409,
        409,
        false,
        ErrorKind::Conflict,
        "the request conflicts with what exists; the caller decides (an upload reads `received`)",
    ),
    row(
        410,
        410,
        false,
        ErrorKind::NotFound,
        "the thing asked for is gone for good",
    ),
    row(
        429,
        429,
        true,
        ErrorKind::Unavailable,
        "the server asks to slow down: wait and try again",
    ),
    row(
        400,
        499,
        false,
        ErrorKind::Refused,
        "the request itself is wrong; sending it again changes nothing",
    ),
    row(
        507,
        507,
        false,
        ErrorKind::Refused,
        "the control plane's disk is full; that does not pass in the seconds a retry waits",
    ),
    row(
        500,
        599,
        true,
        ErrorKind::Unavailable,
        "the server failed or is passing through a restart; every route is idempotent",
    ),
    row(
        100,
        399,
        false,
        ErrorKind::Protocol,
        "an answer this client does not follow (it follows no redirect)",
    ),
];

/// The table: what one failed try means.
///
/// `blob` says whether the request carried a blob's bytes.
pub(crate) fn classify(failure: Failure, blob: bool) -> Verdict {
    const fn verdict(retry: bool, kind: ErrorKind, why: &'static str) -> Verdict {
        Verdict { retry, kind, why }
    }
    match failure {
        Failure::Status(status) => STATUSES
            .iter()
            .find(|r| (r.from..=r.to).contains(&status))
            .map_or(
                verdict(false, ErrorKind::Protocol, "not an HTTP status"),
                |r| r.verdict,
            ),
        Failure::Connect => verdict(
            true,
            ErrorKind::Unavailable,
            "nothing reached the server; it may be starting or restarting",
        ),
        Failure::Cut if blob => verdict(
            false,
            ErrorKind::Unavailable,
            "part of the blob may have arrived: the upload asks how much before it sends the rest",
        ),
        Failure::Cut => verdict(
            true,
            ErrorKind::Unavailable,
            "the connection broke; every route is idempotent, so asking again is safe",
        ),
        Failure::Tls => verdict(
            false,
            ErrorKind::Unavailable,
            "a new handshake meets the same certificate",
        ),
        Failure::TooLarge => verdict(
            false,
            ErrorKind::Protocol,
            "the same answer would be as large again",
        ),
    }
}

/// The pauses between tries: exponential from `initial`, capped at `max`, with jitter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(options: &Options) -> Backoff {
        Backoff {
            initial: options.initial_backoff,
            max: options.max_backoff,
        }
    }

    /// The pause after try number `tries` (from 1): `initial` doubled `tries - 1` times,
    /// capped at `max`, then a random amount between half of it and all of it.
    pub(crate) fn pause(&self, tries: u32) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << tries.saturating_sub(1).min(16));
        let cap = exp.min(self.max);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        let half = nanos / 2;
        Duration::from_nanos(half + random() % (nanos - half + 1))
    }
}

/// A cheap pseudo-random number for jitter (splitmix64 over a counter seeded by the clock).
fn random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = STATE
        .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
        .wrapping_add(seed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How one try ended when it did not succeed.
#[derive(Debug)]
pub(crate) enum Attempt<E> {
    /// Worth another try.
    Retry(E),
    /// The answer is final.
    Final(E),
}

/// How [`retry`] ended without success.
#[derive(Debug)]
pub(crate) enum GaveUp<E> {
    /// A try failed for good.
    Final(E),
    /// The deadline passed during try number `tries`; `last` is the failure before it.
    TimedOut { tries: u32, last: Option<E> },
    /// `tries` tries failed, and the pause before another would end past the deadline.
    Exhausted { tries: u32, last: E },
}

/// Run `attempt` until it succeeds, fails for good, or `until` passes; between tries, wait
/// as `backoff` says. A try under way when `until` passes is abandoned; no try begins after
/// a pause that would end, or did end, at `until` or later.
pub(crate) async fn retry<T, E, F, Fut>(
    backoff: Backoff,
    until: Instant,
    mut attempt: F,
) -> Result<T, GaveUp<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Attempt<E>>>,
{
    let mut tries: u32 = 0;
    let mut last = None;
    loop {
        tries += 1;
        let failure = match tokio::time::timeout_at(until, attempt()).await {
            Err(_elapsed) => return Err(GaveUp::TimedOut { tries, last }),
            Ok(Ok(got)) => return Ok(got),
            Ok(Err(Attempt::Final(e))) => return Err(GaveUp::Final(e)),
            Ok(Err(Attempt::Retry(e))) => e,
        };
        let pause = backoff.pause(tries);
        if Instant::now() + pause >= until {
            return Err(GaveUp::Exhausted {
                tries,
                last: failure,
            });
        }
        tracing::debug!(tries, ?pause, "retrying");
        tokio::time::sleep(pause).await;
        if Instant::now() >= until {
            // The pause ended late (timers wake on whole milliseconds, a busy machine wakes
            // later still): no time is left for a try, so none begins.
            return Err(GaveUp::Exhausted {
                tries,
                last: failure,
            });
        }
        last = Some(failure);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    /// `status` (or a failure) and what the table says: `retry` or `final`, and the kind.
    fn check(failure: Failure, blob: bool, expect: &str) {
        let v = classify(failure, blob);
        let got = format!("{} {:?}", if v.retry { "retry" } else { "final" }, v.kind);
        assert_eq!(got, expect, "{failure:?} (blob: {blob}): {}", v.why);
        assert!(!v.why.is_empty());
    }

    #[test]
    fn the_table_case_by_case() {
        use Failure::*;
        check(Status(400), false, "final Refused");
        check(Status(401), false, "final Unauthorized");
        check(Status(403), false, "final Unauthorized");
        check(Status(404), false, "final NotFound");
        check(Status(405), false, "final NotFound");
        check(Status(409), false, "final Conflict");
        check(Status(409), true, "final Conflict");
        check(Status(410), false, "final NotFound");
        check(Status(413), false, "final Refused");
        check(Status(416), false, "final Refused");
        check(Status(422), false, "final Refused");
        check(Status(429), false, "retry Unavailable");
        check(Status(429), true, "retry Unavailable");
        check(Status(499), false, "final Refused");
        check(Status(500), false, "retry Unavailable");
        check(Status(502), false, "retry Unavailable");
        check(Status(503), false, "retry Unavailable");
        check(Status(503), true, "retry Unavailable");
        check(Status(504), false, "retry Unavailable");
        check(Status(507), false, "final Refused");
        check(Status(599), false, "retry Unavailable");
        check(Status(301), false, "final Protocol");
        check(Status(304), false, "final Protocol");
        check(Status(101), false, "final Protocol");
        check(Status(600), false, "final Protocol");
        check(Status(0), false, "final Protocol");
        check(Connect, false, "retry Unavailable");
        check(Connect, true, "retry Unavailable");
        check(Cut, false, "retry Unavailable");
        check(Cut, true, "final Unavailable");
        check(Tls, false, "final Unavailable");
        check(TooLarge, false, "final Protocol");
    }

    #[test]
    fn backoff_stays_within_half_and_whole_of_the_cap() {
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1000),
        };
        for tries in 1..40 {
            let pause = backoff.pause(tries);
            let cap = Duration::from_millis(100 * (1 << (tries - 1).min(16))).min(backoff.max);
            assert!(
                pause >= cap / 2 && pause <= cap,
                "{tries}: {pause:?} vs {cap:?}"
            );
        }
    }

    const BACKOFF: Backoff = Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(1),
    };

    #[tokio::test(start_paused = true)]
    async fn retries_until_a_try_succeeds() {
        let tries = AtomicU32::new(0);
        let got: Result<u32, GaveUp<&str>> = retry(
            BACKOFF,
            Instant::now() + Duration::from_secs(30),
            || async {
                match tries.fetch_add(1, Ordering::Relaxed) + 1 {
                    n @ 4 => Ok(n),
                    _ => Err(Attempt::Retry("503")),
                }
            },
        )
        .await;
        assert!(matches!(got, Ok(4)), "{got:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_failure_ends_at_once() {
        let started = Instant::now();
        let got: Result<(), _> = retry(BACKOFF, started + Duration::from_secs(30), || async {
            Err(Attempt::Final("404"))
        })
        .await;
        assert!(matches!(got, Err(GaveUp::Final("404"))), "{got:?}");
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "no pause before a final answer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_failures_stop_before_a_pause_would_pass_the_deadline() {
        let started = Instant::now();
        let until = started + Duration::from_secs(3);
        let got: Result<(), _> =
            retry(BACKOFF, until, || async { Err(Attempt::Retry("503")) }).await;
        let Err(GaveUp::Exhausted { tries, last }) = got else {
            panic!("{got:?}");
        };
        assert_eq!(last, "503");
        // Pauses of at least 50, 100, 200, 400, 500, 500… ms and at most twice that: more
        // than 4 tries fit in 3 s, fewer than 60 do.
        assert!((4..60).contains(&tries), "{tries}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_try_still_under_way_at_the_deadline_is_abandoned() {
        let started = Instant::now();
        let until = started + Duration::from_millis(500);
        let tries = AtomicU32::new(0);
        let got: Result<(), _> = retry(BACKOFF, until, || async {
            if tries.fetch_add(1, Ordering::Relaxed) == 0 {
                Err(Attempt::Retry("cut"))
            } else {
                std::future::pending().await
            }
        })
        .await;
        assert!(
            matches!(
                got,
                Err(GaveUp::TimedOut {
                    tries: 2,
                    last: Some("cut")
                })
            ),
            "{got:?}"
        );
    }
}
