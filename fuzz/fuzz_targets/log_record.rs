//! Commit-log records: decoding never panics; whatever decodes re-encodes byte for byte.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)] // each target uses one check of the file
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::log_record(data));
