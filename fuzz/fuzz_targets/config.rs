//! The config parser and validator never panic, and every error carries a line and column >= 1.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = internal::config::load_str(text, "fuzz.toml") {
            for issue in &e.issues {
                assert!(issue.line >= 1 && issue.column >= 1, "{issue:?}");
            }
        }
    }
});
