use div_spec::Money;
use insta::assert_snapshot;

use crate::refused;

fn check(typed: &str, cents: i64) {
    let money: Money = typed.parse().unwrap_or_else(|e| panic!("`{typed}`: {e}"));
    assert_eq!(money.cents(), cents, "`{typed}`");
}

#[test]
fn parses_dollars_from_digits() {
    check("5", 500);
    check("5.00", 500);
    check("$5", 500);
    check("5.0", 500);
    check("5.005", 501);
    check("5.004", 500);
    check("5.009", 501);
    check("1500", 150_000);
    check("$1500.00", 150_000);
    check("0.01", 1);
    check("0.005", 1);
    check(".5", 50);
    check("5.", 500);
    check(" 10 ", 1000);
    check("007", 700);
    check("92233720368547758.07", i64::MAX);
}

#[test]
fn displays_cents_without_separators() {
    let show = |cents| Money::from_cents(cents).to_string();
    assert_eq!(show(500), "$5.00");
    assert_eq!(show(105), "$1.05");
    assert_eq!(show(33), "$0.33");
    assert_eq!(show(150_000), "$1500.00");
    assert_eq!(show(50_000), "$500.00");
    assert_eq!(show(0), "$0.00");
    assert_eq!(Money::from_cents(-5), Money::ZERO);
    assert_eq!(Money::try_from_cents(-5), None);
}

#[test]
fn zero_is_an_amount_but_not_a_ceiling() {
    assert_eq!(Money::parse_amount("$0.00"), Ok(Money::ZERO));
    assert_eq!(Money::parse_amount("0"), Ok(Money::ZERO));
}

#[test]
fn serializes_as_integer_cents() {
    let money = Money::from_cents(501);
    assert_eq!(serde_json::to_string(&money).unwrap(), "501");
    assert_eq!(serde_json::from_str::<Money>("501").unwrap(), money);
    let negative = serde_json::from_str::<Money>("-1").unwrap_err().to_string();
    assert_snapshot!(negative, @"`-1` cents is negative; money is never negative");
}

#[test]
fn refusals() {
    assert_snapshot!(refused::<Money>(""), @"the amount is empty; write dollars like `5` or `5.00`");
    assert_snapshot!(refused::<Money>("0"), @"`0` is no money at all, and a ceiling of nothing would stop the run at once; write at least `0.01`");
    assert_snapshot!(refused::<Money>("0.004"), @"`0.004` is no money at all, and a ceiling of nothing would stop the run at once; write at least `0.01`");
    assert_snapshot!(refused::<Money>("-5"), @"`-5` is negative; write a positive amount like `5.00`");
    assert_snapshot!(refused::<Money>("$-5"), @"`$-5` is negative; write a positive amount like `5.00`");
    assert_snapshot!(refused::<Money>("+5"), @"`+5` has a sign; write the dollars alone, like `5`");
    assert_snapshot!(refused::<Money>("1,500"), @"`1,500` has a comma; write the dollars without separators, like `1500`");
    assert_snapshot!(refused::<Money>("5e2"), @"`5e2` is in exponent notation; write the dollars out, like `5.00`");
    assert_snapshot!(refused::<Money>("5.0001"), @"`5.0001` has 4 decimals; money takes at most three (the third rounds half up to the cent)");
    assert_snapshot!(refused::<Money>("five"), @"`five` is not an amount of dollars; write it like `5`, `5.00` or `$5`");
    assert_snapshot!(refused::<Money>("5 00"), @"`5 00` is not an amount of dollars; write it like `5`, `5.00` or `$5`");
    assert_snapshot!(refused::<Money>("5$"), @"`5$` is not an amount of dollars; write it like `5`, `5.00` or `$5`");
    assert_snapshot!(refused::<Money>("."), @"`.` is not an amount of dollars; write it like `5`, `5.00` or `$5`");
    assert_snapshot!(refused::<Money>("99999999999999999999"), @"`99999999999999999999` is too large an amount");
}
