//! A shared lake (SPEC R23) in this process: nodes on one `memory://` lake checked against a
//! model, and the seeded simulation. Needs the `lake` feature: `cargo test --features lake
//! --test lake`.

#[path = "../common/mod.rs"]
mod common;

mod counters;
mod gc;
mod nodes;
mod objects;
mod sim;
