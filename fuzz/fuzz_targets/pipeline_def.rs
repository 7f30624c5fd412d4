//! Pipeline definitions: parsing never panics; what parses is a DAG and round-trips via to_text.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)] // each target uses one check of the file
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::pipeline_def(data));
