//! The benchmark workloads of oncelake and their baselines, shared by the `oncelake-bench` binary
//! and the criterion benches in the repository's `benches/`, so that both measure exactly the same
//! code. The in-process workloads use the engine, redb and SQLite only; the workloads through a
//! server (`via_server`, `serve_load`, `seed001`) drive a real `oncelake serve` process with the
//! server crate's blocking client, and come with the `cli` feature (on by default).

pub mod bench_commit;
pub mod bench_fixtures;
pub mod bench_stage;
#[cfg(feature = "cli")]
pub mod seed001;
#[cfg(feature = "cli")]
pub mod serve_load;
pub mod tuning;
#[cfg(feature = "cli")]
pub mod via_server;
mod writers;
