//! Repeated bad tokens from one address are slowed down: the first [`FREE_TRIES`] failures
//! are answered 401 as any is; from then on the address waits, 1 s after the fifth, twice as
//! long after each failure past it, up to [`MAX_WAIT`], and every request it makes while it
//! waits is answered 429 with `Retry-After`, its token not even looked at. A token that is
//! accepted clears its address's count. Time is handed in, so tests own the clock.
//!
//! Behind a proxy every request comes from the proxy's address: then all of them wait
//! together (docs/team.md says to keep the listener reachable directly).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures an address is allowed before it waits.
pub(crate) const FREE_TRIES: u32 = 5;
/// The first wait.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(300);
/// Addresses remembered at most; past it, those whose wait is over are forgotten first.
const MAX_ADDRESSES: usize = 10_000;

/// Each address's failures and wait.
#[derive(Debug, Default)]
pub(crate) struct Slowdown {
    addresses: Mutex<HashMap<IpAddr, Strikes>>,
}

#[derive(Debug, Clone, Copy)]
struct Strikes {
    failures: u32,
    until: Option<Instant>,
}

impl Slowdown {
    /// How long `ip` still waits at `now`; `None` when it may try.
    pub(crate) fn waiting(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let addresses = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        let until = addresses.get(&ip)?.until?;
        (until > now).then(|| until - now)
    }

    /// A bad token from `ip` at `now`: counted, and from the [`FREE_TRIES`]th on, a wait.
    pub(crate) fn failed(&self, ip: IpAddr, now: Instant) {
        let mut addresses = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        if addresses.len() >= MAX_ADDRESSES {
            addresses.retain(|_, s| s.until.is_some_and(|u| u > now));
        }
        let strikes = addresses.entry(ip).or_insert(Strikes {
            failures: 0,
            until: None,
        });
        strikes.failures = strikes.failures.saturating_add(1);
        if strikes.failures >= FREE_TRIES {
            let doublings = (strikes.failures - FREE_TRIES).min(16);
            let wait = FIRST_WAIT.saturating_mul(1 << doublings).min(MAX_WAIT);
            strikes.until = Some(now + wait);
        }
    }

    /// A token accepted from `ip`: its count starts again.
    pub(crate) fn succeeded(&self, ip: IpAddr) {
        let mut addresses = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        addresses.remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::{Duration, Instant};

    use super::{FREE_TRIES, MAX_WAIT, Slowdown};

    /// What a caller trying a bad token every 100 ms gets, on the test's own clock: the
    /// first five are looked at, then the address waits 1 s, 2 s, 4 s… between looks.
    #[test]
    fn bad_tokens_are_looked_at_ever_more_rarely() {
        let slow = Slowdown::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let start = Instant::now();
        let mut looked_at = Vec::new();
        for i in 0..1000u64 {
            let now = start + Duration::from_millis(100 * i);
            if slow.waiting(ip, now).is_none() {
                looked_at.push(i);
                slow.failed(ip, now);
            }
        }
        // 100 s of tries: five at once, then one after each wait of 1, 2, 4, 8, 16, 32 s.
        assert_eq!(looked_at, [0, 1, 2, 3, 4, 14, 34, 74, 154, 314, 634]);
        assert_eq!(
            slow.waiting(other, start),
            None,
            "another address is not slowed"
        );
        slow.succeeded(ip);
        assert_eq!(slow.waiting(ip, start + Duration::from_secs(100)), None);
    }

    #[test]
    fn the_wait_is_capped() {
        let slow = Slowdown::default();
        let ip: IpAddr = "::1".parse().unwrap();
        let now = Instant::now();
        for _ in 0..(FREE_TRIES + 40) {
            slow.failed(ip, now);
        }
        assert_eq!(slow.waiting(ip, now), Some(MAX_WAIT));
    }
}
