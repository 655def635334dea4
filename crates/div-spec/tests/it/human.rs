use div_spec::{MAX_RUN_SECONDS, format_bytes, format_bytes_short, format_duration};

#[test]
fn durations() {
    let check = |seconds, expect: &str| assert_eq!(format_duration(seconds), expect, "{seconds}");
    check(760, "12m 40s");
    check(3636, "1h 0m");
    check(3600, "1h 0m");
    check(192, "3m 12s");
    check(720, "12m 0s");
    check(240, "4m 0s");
    check(40, "40s");
    check(0, "0s");
    check(59, "59s");
    check(60, "1m 0s");
    check(3599, "59m 59s");
    check(2424, "40m 24s");
    check(MAX_RUN_SECONDS, "24h 0m");
    check(25 * 3600 + 3 * 60 + 59, "25h 3m");
    check(u64::MAX, "5124095576030431h 0m");
}

#[test]
fn bytes() {
    let check = |bytes, expect: &str| assert_eq!(format_bytes(bytes), expect, "{bytes}");
    check(0, "0 B");
    check(512, "512 B");
    check(999, "999 B");
    check(1000, "1.0 KB");
    check(38_200, "38.2 KB");
    check(38_249, "38.2 KB");
    check(38_250, "38.3 KB");
    check(999_949, "999.9 KB");
    check(999_950, "1.0 MB");
    check(6_000_000_000, "6.0 GB");
    check(1_100_000_000, "1.1 GB");
    check(2_500_000_000_000, "2.5 TB");
    check(u64::MAX, "18.4 EB");
}

#[test]
fn bytes_short() {
    let check = |bytes, expect: &str| assert_eq!(format_bytes_short(bytes), expect, "{bytes}");
    check(300, "300B");
    check(0, "0B");
    check(512_000, "512K");
    check(1_100_000_000, "1.1G");
    check(1_000, "1.0K");
    check(9_949, "9.9K");
    check(9_950, "10K");
    check(999_499, "999K");
    check(999_500, "1.0M");
    check(6_000_000_000, "6.0G");
    check(u64::MAX, "18E");
}
