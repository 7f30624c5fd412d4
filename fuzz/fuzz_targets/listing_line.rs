//! Reconcile listings: a line parses to a valid key that re-serialises to the same pair; the
//! streaming reader agrees with the line parser and names only lines that exist.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)] // each target uses one check of the file
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::listing_line(data));
