//! The worked example (`oncelake simulate`, SPEC R18) and its pipeline mode.

#[path = "../../../tests/bin/mod.rs"]
mod bin;
#[path = "../../../tests/common/mod.rs"]
mod common;

mod pipeline;
mod simulate;
