//! Commit-log records: decoding never panics; whatever decodes re-encodes byte for byte.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| oncelake::fuzzing::log_record(data));
