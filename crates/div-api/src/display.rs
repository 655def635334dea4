//! How durations, counts of tries and chains of causes read in error messages.

use std::time::Duration;

/// `30s`, `1.5s`, `500ms`: whole or tenths of seconds from one second up, milliseconds
/// below (rounded up, so a deadline that is not zero never reads `0ms`).
pub(crate) fn duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        let millis = d.as_micros().div_ceil(1000);
        return format!("{millis}ms");
    }
    let tenths = d.as_millis().div_ceil(100);
    if tenths.is_multiple_of(10) {
        format!("{}s", tenths / 10)
    } else {
        format!("{}.{}s", tenths / 10, tenths % 10)
    }
}

/// `1 try`, `3 tries`.
pub(crate) fn tries(n: u32) -> String {
    if n == 1 {
        "1 try".to_owned()
    } else {
        format!("{n} tries")
    }
}

pub(crate) use crate::error::error_chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        fn check(d: Duration, expect: &str) {
            assert_eq!(duration(d), expect, "{d:?}");
        }
        check(Duration::from_secs(30), "30s");
        check(Duration::from_millis(1500), "1.5s");
        check(Duration::from_millis(1001), "1.1s");
        check(Duration::from_secs(1), "1s");
        check(Duration::from_millis(999), "999ms");
        check(Duration::from_millis(500), "500ms");
        check(Duration::from_millis(40), "40ms");
        check(Duration::from_micros(1), "1ms");
        check(Duration::ZERO, "0ms");
    }

    #[test]
    fn tries_are_counted_in_words() {
        assert_eq!(tries(1), "1 try");
        assert_eq!(tries(2), "2 tries");
    }

    #[test]
    fn a_chain_names_each_cause_once() {
        let inner = std::io::Error::other("connection refused");
        let outer = std::io::Error::other(ApiLike("connect failed", inner));
        assert_eq!(
            error_chain(&outer),
            "connect failed: connection refused",
            "the outer io::Error repeats its inner message, which is said once"
        );
    }

    #[derive(Debug)]
    struct ApiLike(&'static str, std::io::Error);
    impl std::fmt::Display for ApiLike {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for ApiLike {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }
}
