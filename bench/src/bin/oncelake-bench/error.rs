//! The benchmark binary's error type and exit codes (the CLI's codes for the same failures).

/// Measured (or, for a bench that checks results, every check held).
pub(crate) const OK: u8 = 0;
/// An I/O failure, or a result a bench checks did not hold.
pub(crate) const FAILURE: u8 = 1;
/// Bad arguments.
pub(crate) const USAGE: u8 = 2;

/// Everything a benchmark can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// Bad arguments, or a scratch directory that cannot be used: exit 2. The message says
    /// which argument to change.
    #[error("{0}")]
    Usage(String),
    /// The benchmark's own I/O (its scratch files, its output): exit 1.
    #[error("{context}: {source}")]
    Io {
        /// What the benchmark was doing.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The engine failed under a workload: exit 1.
    #[error("{0}")]
    Engine(#[from] oncelake::Error),
    /// Creating or publishing the lake table of `table` (P8) failed: exit 1.
    #[error("{0}")]
    Table(#[from] oncelake::table::TableError),
}

impl BenchError {
    /// An I/O error while doing `context`.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }

    /// The process's exit code for this error.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            BenchError::Usage(_) => USAGE,
            BenchError::Io { .. } | BenchError::Engine(_) | BenchError::Table(_) => FAILURE,
        }
    }
}
