use div_spec::{Sku, UnknownSku};
use insta::assert_snapshot;

use crate::refused;

#[test]
fn names_and_labels() {
    let table: Vec<String> = Sku::ALL
        .iter()
        .map(|s| format!("{} {} {}", s.name(), s.label(), s.is_gpu()))
        .collect();
    assert_eq!(
        table,
        [
            "b300 B300 true",
            "h200 H200 true",
            "h100 H100 true",
            "cpu CPU false"
        ]
    );
}

#[test]
fn parses_any_case_and_round_trips() {
    assert_eq!("H100".parse(), Ok(Sku::H100));
    assert_eq!("Cpu".parse(), Ok(Sku::Cpu));
    for sku in Sku::ALL {
        assert_eq!(sku.to_string().parse(), Ok(sku));
        let json = serde_json::to_string(&sku).unwrap();
        assert_eq!(json, format!("\"{}\"", sku.name()));
        assert_eq!(serde_json::from_str::<Sku>(&json).unwrap(), sku);
    }
}

#[test]
fn refusals() {
    assert_snapshot!(refused::<Sku>("a100"), @"unknown SKU `a100`; expected one of b300, h200, h100, cpu");
    assert_snapshot!(refused::<Sku>(""), @"unknown SKU ``; expected one of b300, h200, h100, cpu");
    assert_snapshot!(
        UnknownSku::with_accepted("b300", &["h100", "cpu"]).to_string(),
        @"unknown SKU `b300`; expected one of h100, cpu"
    );
}
