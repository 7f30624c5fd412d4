//! The command line as scripts use it (SPEC R17), run as the built `oncelake` binary: the contract of arguments, JSON fields and exit codes, the help's and README's examples, and gc/verify.

#[path = "../../../tests/bin/mod.rs"]
mod bin;
#[path = "../../../tests/common/mod.rs"]
mod common;

mod commands;
mod contract;
mod examples;
mod maint;
