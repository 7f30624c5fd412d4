//! Reconcile listings: a line parses to a valid key that re-serialises to the same pair; the
//! streaming reader agrees with the line parser and names only lines that exist.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| oncelake::fuzzing::listing_line(data));
