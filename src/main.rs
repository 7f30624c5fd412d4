//! The `oncelake` command line. All CLI-only dependencies (clap, serde_json, indicatif) live here
//! and behind the `cli` feature, never in the engine's dependency tree.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
