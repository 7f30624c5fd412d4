//! The `oncelake` command line. It is its own package (`oncelake-cli`), so that the CLI-only
//! dependencies (clap, serde_json, indicatif, rusqlite, arrow-rs) are never in the engine's
//! dependency tree.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
