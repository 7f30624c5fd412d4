//! Pipeline definitions: parsing never panics; what parses is a DAG and round-trips via to_text.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| oncelake::fuzzing::pipeline_def(data));
