//! The R3 commit rules (lease rows included) against a model of units and leases: every decision
//! as the table says, I5 and I6 hold.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)] // each target uses one check of the file
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::commit_rules(data));
