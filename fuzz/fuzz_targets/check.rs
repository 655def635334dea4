//! Parses arbitrary UTF-8 as a `Check`; whatever parses must display as text that parses back
//! to the same value.
#![no_main]

use div_spec::Check;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(value) = text.parse::<Check>() {
        let shown = value.to_string();
        assert_eq!(shown.parse::<Check>().ok(), Some(value), "{text:?} shown as {shown:?}");
    }
});
