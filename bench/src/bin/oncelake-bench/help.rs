//! The examples and exit codes printed after each subcommand's `--help`.

/// The exit codes of every benchmark (after its examples).
pub(crate) const BENCH_CODES: &str = "Exit codes: 0 measured; 1 I/O failure (or, for serve-load, \
                                      seed001 and lake, a result that did not hold); 2 bad arguments.";

pub(crate) const COMMIT: &str = "Example:
  oncelake-bench commit --threads 1,4 --commits 200 --preload 10000 --systems oncelake,redb --json";

pub(crate) const STAGE: &str = "Example:
  oncelake-bench stage --threads 2 --sizes 64KiB --rounds 1 --bytes 1MiB --json";

pub(crate) const DEDUP: &str = "Example:
  oncelake-bench dedup --units 1000 --rounds 1 --queries 1000 --open-rounds 1 --json";

pub(crate) const RECONCILE: &str = "Example:
  oncelake-bench reconcile --units 1000 --rounds 1 --json";

pub(crate) const TABLE: &str = "Example:
  oncelake-bench table ./p8 --changes 1000 --per-commit 100 --versions 200 --json";

pub(crate) const LAKE: &str = "Example:
  oncelake-bench lake --lake file --nodes 2 --threads 2 --duration 1s --units 200 --json";

/// Examples, a blank line, then the exit codes.
pub(crate) fn join(examples: &str, codes: &str) -> String {
    format!("{examples}\n\n{codes}")
}
