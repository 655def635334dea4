use div_pricing::Rate;
use div_spec::{Money, format_duration};

fn rate(cents: i64) -> Rate {
    Rate::from_cents_per_hour(cents)
}

#[test]
fn spend_after_elapsed_time() {
    // `run-k4t9 finished in 12m 40s and spent $1.05` and the other spec lines, at $4.95/h.
    let check = |seconds: u64, after: &str, spent: &str| {
        let shown = (
            format_duration(seconds),
            rate(495).spend_after(seconds).to_string(),
        );
        assert_eq!(shown, (after.to_owned(), spent.to_owned()), "{seconds}s");
    };
    check(760, "12m 40s", "$1.05");
    check(240, "4m 0s", "$0.33");
    check(3636, "1h 0m", "$5.00");
    check(0, "0s", "$0.00");
    check(1, "1s", "$0.00");
    check(8, "8s", "$0.01");
    check(3600, "1h 0m", "$4.95");
    check(86_400, "24h 0m", "$118.80");
    assert_eq!(rate(0).spend_after(u64::MAX), Money::ZERO);
    assert_eq!(
        rate(i64::MAX).spend_after(u64::MAX),
        Money::from_cents(i64::MAX)
    );
}

#[test]
fn what_a_ceiling_buys() {
    let check = |cents_per_hour, ceiling, seconds: u64, shown: &str| {
        let buys = rate(cents_per_hour).ceiling_buys(Money::from_cents(ceiling));
        assert_eq!((buys, format_duration(buys).as_str()), (seconds, shown));
    };
    check(495, 500, 3636, "1h 0m");
    check(782, 500, 2301, "38m 21s");
    check(3960, 150_000, 136_363, "37h 52m");
    check(495, 1, 7, "7s");
    assert_eq!(rate(0).ceiling_buys(Money::from_cents(500)), u64::MAX);
}

#[test]
fn when_a_ceiling_is_reached() {
    let r = rate(495);
    let five = Money::from_cents(500);
    assert!(!r.ceiling_reached(five, 3636));
    assert!(r.ceiling_reached(five, 3637));
    assert_eq!(r.ceiling_reached_at(five), Some(3637));
    // $5.94 is 1.2 hours at $4.95/h exactly: reached on the second itself.
    assert!(r.ceiling_reached(Money::from_cents(594), 4320));
    assert!(!r.ceiling_reached(Money::from_cents(594), 4319));
    assert_eq!(r.ceiling_reached_at(Money::from_cents(594)), Some(4320));
    assert_eq!(rate(0).ceiling_reached_at(five), None);
    // A fast rate passes the ceiling within the second it is reached; the charge stops there.
    let fast = rate(7160);
    let at = fast.ceiling_reached_at(five).unwrap();
    assert_eq!(at, 252);
    assert_eq!(fast.spend_after(at), Money::from_cents(501));
    assert_eq!(fast.charge(at, Some(five)), five);
    assert_eq!(fast.charge(at, None), Money::from_cents(501));
}

#[test]
fn displays_and_parses() {
    for (cents, shown) in [
        (495, "$4.95/h"),
        (782, "$7.82/h"),
        (3960, "$39.60/h"),
        (0, "$0.00/h"),
    ] {
        assert_eq!(rate(cents).to_string(), shown);
        assert_eq!(shown.parse::<Rate>(), Ok(rate(cents)));
    }
    assert_eq!(
        "4.95/hour".parse::<Rate>().unwrap_err().to_string(),
        "`4.95/hour` is not an hourly rate; write it like `$4.95/h`"
    );
    assert_eq!(serde_json::to_string(&rate(495)).unwrap(), "495");
}
