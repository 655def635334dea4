//! The wall clock, in the two shapes the server records: milliseconds since the epoch (what
//! the supervisor and the store keep) and RFC 3339 to the millisecond (what the API shows).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now (0 for a clock set before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `ms` since the epoch as RFC 3339, to the millisecond, in UTC: `2026-11-30T19:09:20.123Z`.
pub fn rfc3339(ms: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Now, as RFC 3339.
pub fn now_rfc3339() -> String {
    rfc3339(now_ms())
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_is_utc_to_the_millisecond() {
        assert_eq!(
            super::rfc3339(1_700_000_000_999),
            "2023-11-14T22:13:20.999Z"
        );
        assert_eq!(
            super::rfc3339(1_700_000_000_000),
            "2023-11-14T22:13:20.000Z"
        );
    }
}
