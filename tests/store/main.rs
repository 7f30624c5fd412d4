//! The store's API: opening, commits and claims, readers, runs, metrics, bad input, verify, and
//! the model-checked property tests. One test binary (link time), one module per subject.

#[path = "../bin/mod.rs"]
mod bin;
#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod claims;
mod commit_rules;
mod log_limit;
mod model;
mod open;
mod readers;
mod run_handle;
mod run_many;
mod server_metrics;
mod verify;
mod write_each;
