//! Waiting in a test for something to happen: a poll with a deadline and a message, never a
//! fixed sleep. The check is asked again and again (every 10 ms at first, then less often, up
//! to every 200 ms) until it says yes or the patience runs out; then the test fails saying what
//! it waited for and what the check saw last.
//!
//! ```
//! use std::time::Duration;
//! use div_test_support::wait_until;
//!
//! let mut tries = 0;
//! let found = wait_until("the third try", Duration::from_secs(5), || {
//!     tries += 1;
//!     if tries == 3 { Ok(tries) } else { Err(format!("try {tries}")) }
//! });
//! assert_eq!(found, 3);
//! ```

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// The first pause between two asks, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(200);

/// Asks `check` until it answers `Ok` and returns what it held, for at most `patience`; past
/// it, panics saying `what` did not happen and what `check` answered last (its `Err`).
/// Blocking: for tests on threads (the `div` binary's), not inside an async runtime.
#[track_caller]
pub fn wait_until<T, E: Display>(
    what: impl Display,
    patience: Duration,
    check: impl FnMut() -> Result<T, E>,
) -> T {
    match poll_until(patience, check) {
        Ok(done) => done,
        Err(last) => gave_up(&what, patience, &last),
    }
}

/// [`wait_until`] for a check that is a future, on tokio's clock (a test's paused clock
/// included).
pub async fn wait_until_async<T, E: Display, F: Future<Output = Result<T, E>>>(
    what: impl Display,
    patience: Duration,
    check: impl FnMut() -> F,
) -> T {
    match poll_until_async(patience, check).await {
        Ok(done) => done,
        Err(last) => gave_up(&what, patience, &last),
    }
}

/// The poll of [`wait_until`], for a caller that says more than its message when the
/// patience runs out: `check`'s last `Err` then.
pub fn poll_until<T, E>(
    patience: Duration,
    mut check: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = std::time::Instant::now() + patience;
    let mut pause = FIRST_PAUSE;
    loop {
        match check() {
            Ok(done) => return Ok(done),
            Err(last) if std::time::Instant::now() >= deadline => return Err(last),
            Err(_) => {}
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// The poll of [`wait_until_async`], as [`poll_until`].
pub async fn poll_until_async<T, E, F: Future<Output = Result<T, E>>>(
    patience: Duration,
    mut check: impl FnMut() -> F,
) -> Result<T, E> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut pause = FIRST_PAUSE;
    loop {
        match check().await {
            Ok(done) => return Ok(done),
            Err(last) if tokio::time::Instant::now() >= deadline => return Err(last),
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

#[track_caller]
fn gave_up(what: &dyn Display, patience: Duration, last: &dyn Display) -> ! {
    let last = last.to_string();
    if last.is_empty() {
        panic!("{what}: not within {patience:?}");
    }
    panic!("{what}: not within {patience:?}; last seen: {last}");
}
