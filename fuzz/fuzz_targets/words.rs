//! The other words a user types, by the first byte: `KEY=value` (`--env`), a SKU (`--gpu`), a
//! project slug, a volume name, and the volumes a command names. Nothing panics; whatever
//! parses displays as text that parses back to the same value.
#![no_main]

use std::fmt::Display;
use std::str::FromStr;

use div_spec::{EnvPair, Sku, Slug, VolumeName, volumes_named};
use libfuzzer_sys::fuzz_target;

fn round_trip<T: FromStr + Display + PartialEq + std::fmt::Debug>(text: &str) {
    if let Ok(value) = text.parse::<T>() {
        let shown = value.to_string();
        assert_eq!(shown.parse::<T>().ok(), Some(value), "{text:?} shown as {shown:?}");
    }
}

fuzz_target!(|input: (u8, &str)| {
    let (which, text) = input;
    match which % 5 {
        0 => round_trip::<EnvPair>(text),
        1 => round_trip::<Sku>(text),
        2 => round_trip::<Slug>(text),
        3 => round_trip::<VolumeName>(text),
        _ => {
            for name in volumes_named(text) {
                assert!(text.contains(&format!("/mnt/{name}")), "{name} not in {text:?}");
                round_trip::<VolumeName>(name.as_str());
            }
        }
    }
});
