//! The R3 commit rules (lease rows included) against a model of units and leases: every decision
//! as the table says, I5 and I6 hold.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| oncelake::fuzzing::commit_rules(data));
