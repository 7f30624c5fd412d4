//! The CLI's error type and its mapping onto the exit codes scripts rely on (SPEC R17).

/// Everything a command can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Bad arguments or input: exit 2.
    #[error("{0}")]
    Usage(String),
    /// An engine error, mapped by kind; its message gets the CLI's hint (see [`cli_hint`]).
    #[error("{0}{hint}", hint = cli_hint(.0))]
    Engine(#[from] oncelake::Error),
    /// A lake-table error (SPEC R21) other than the store failing underneath.
    #[error(transparent)]
    Table(oncelake::table::TableError),
    /// Local I/O of the CLI itself (reading input, writing output): exit 1.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// The engine's messages speak library terms; the CLI adds how to do it from the command line.
fn cli_hint(e: &oncelake::Error) -> &'static str {
    match e {
        oncelake::Error::Corrupt { .. } | oncelake::Error::MissingObject { .. } => {
            " — with the CLI: `oncelake verify <store>`"
        }
        oncelake::Error::Locked { .. } => " — the CLI waits up to --wait",
        _ => "",
    }
}

impl CliError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CliError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn exit_code(&self) -> u8 {
        use oncelake::Error as E;
        match self {
            CliError::Usage(_) => 2,
            CliError::Io { .. } => 1,
            CliError::Engine(e) => match e {
                E::InvalidKey { .. }
                | E::InvalidRequest(_)
                | E::NotAStore { .. }
                | E::NewerFormat { .. }
                | E::SeqOutOfRange { .. } => 2,
                E::Locked { .. } => 6,
                _ => 1,
            },
            CliError::Table(e) => match e {
                oncelake::table::TableError::Damaged { .. } => 1,
                _ => 2,
            },
        }
    }
}

impl From<oncelake::table::TableError> for CliError {
    fn from(e: oncelake::table::TableError) -> Self {
        match e {
            oncelake::table::TableError::Store(e) => CliError::Engine(e),
            e => CliError::Table(e),
        }
    }
}
