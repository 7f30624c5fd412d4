//! The benchmark workloads of oncelake and their baselines, shared by `oncelake bench` (the
//! command line) and the criterion benches in the repository's `benches/`, so that both measure
//! exactly the same code. They use the engine, redb and SQLite only: no CLI crates.

pub mod bench_commit;
pub mod bench_fixtures;
pub mod bench_stage;
