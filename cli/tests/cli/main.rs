//! The command line as scripts use it (SPEC R17), run as the built `oncelake` binary: the
//! contract of arguments, JSON fields and exit codes, the help's and README's examples, and
//! gc/verify.

#[path = "../../../tests/bin/mod.rs"]
mod bin;
#[path = "../../../tests/common/mod.rs"]
mod common;

/// The repository root (the README, docs/ and examples/ these tests read).
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

mod commands;
mod contract;
mod examples;
mod json_fields;
mod kit;
mod lake;
mod maint;
