//! Parses arbitrary UTF-8 as a `ModelRef` (`NAME`, `NAME:vN`, `NAME@sha256:…`); whatever parses
//! must display as text that parses back to the same reference.
#![no_main]

use div_spec::ModelRef;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(value) = text.parse::<ModelRef>() {
        let shown = value.to_string();
        assert_eq!(shown.parse::<ModelRef>().ok(), Some(value), "{text:?} shown as {shown:?}");
    }
});
