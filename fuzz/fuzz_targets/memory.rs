//! Parses arbitrary UTF-8 as a `MemoryGib`; whatever parses must display as text that parses back
//! to the same value.
#![no_main]

use div_spec::MemoryGib;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(value) = text.parse::<MemoryGib>() {
        let shown = value.to_string();
        assert_eq!(shown.parse::<MemoryGib>().ok(), Some(value), "{text:?} shown as {shown:?}");
    }
});
