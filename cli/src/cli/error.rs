//! The CLI's error type, its stable error kinds, and the one table of exit codes scripts rely on
//! (SPEC R17, docs/cli.md), and the same failure of a served store (`client_error`).

use oncelake_server::ClientError;

/// The exit codes, one per kind of result: the same failure exits with the same code in every
/// command. `docs/cli.md` has the same table; `tests/cli_contract.rs` checks them.
pub(crate) mod exit {
    /// Done: committed, a duplicate, granted, nothing to do.
    pub(crate) const OK: u8 = 0;
    /// An I/O or internal failure (the store or the machine, not the caller's input).
    pub(crate) const FAILURE: u8 = 1;
    /// Usage or bad input: arguments, a missing or unreadable input file, a bad key or listing.
    pub(crate) const USAGE: u8 = 2;
    /// Conflict: the same version was committed with other content (or the batch aborted).
    pub(crate) const CONFLICT: u8 = 3;
    /// Stale: a newer version is committed.
    pub(crate) const STALE: u8 = 4;
    /// Fenced: the token is not the unit's live lease (or not the caller's to release).
    pub(crate) const FENCED: u8 = 5;
    /// The store is locked by another process, or the unit is claimed by another worker.
    pub(crate) const BUSY: u8 = 6;
    /// `verify` found problems.
    pub(crate) const VERIFY_PROBLEMS: u8 = 7;

    /// Every code with its meaning, in the order documented.
    pub(crate) const TABLE: &[(u8, &str)] = &[
        (OK, "ok (committed, duplicate, granted, nothing to do)"),
        (FAILURE, "I/O or internal failure"),
        (USAGE, "usage or bad input"),
        (CONFLICT, "conflict"),
        (STALE, "stale"),
        (FENCED, "fenced"),
        (BUSY, "store locked or unit busy"),
        (VERIFY_PROBLEMS, "verify found problems"),
    ];
}

/// Everything a command can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Bad arguments or input: exit 2.
    #[error("{0}")]
    Usage(String),
    /// A named input of the command (a put's file, a pipeline file, a listing) that is missing or
    /// cannot be read: exit 2, like any other bad input.
    #[error("{0}")]
    Input(String),
    /// The path given as a store is no store: exit 2.
    #[error("{0}")]
    NotAStore(String),
    /// The unit asked for has no entry (`get`), now or at --at: exit 2, as other bad input,
    /// with a kind of its own so that a script tells it from a mistyped command.
    #[error("{0}")]
    NotFound(String),
    /// The store's lock is held by another process for longer than --wait: exit 6. The
    /// message names the holder and what to do in the CLI's words (see `open_store`).
    #[error("{0}")]
    Locked(String),
    /// An engine error, mapped by kind; its message gets the CLI's hint (see [`cli_hint`]).
    #[error("{0}{hint}", hint = cli_hint(.0))]
    Engine(#[from] oncelake::Error),
    /// A lake-table error (SPEC R21) other than the store failing underneath.
    #[error(transparent)]
    Table(oncelake::table::TableError),
    /// A failure the server of the store reported (SPEC R20), with the kind and exit code the
    /// same failure has in-process (see `client_error`) and the in-process hint.
    #[error("{message}{hint}")]
    Served {
        kind: &'static str,
        exit: u8,
        message: String,
        hint: &'static str,
    },
    /// Local I/O of the CLI itself (reading input, writing output): exit 1.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// The hint on a damaged or missing object.
pub(crate) const VERIFY_HINT: &str = " — with the CLI: `oncelake verify <store>`";

/// The hint on an `--at SEQ` outside the kept history (in-process and through a server).
pub(crate) const SEQ_HINT: &str = "; pass an --at in that range (`oncelake log <store>` lists \
     the seqs, `oncelake gc --retain` sets how much history is kept)";

/// The engine's messages speak library terms; the CLI adds how to do it from the command line.
fn cli_hint(e: &oncelake::Error) -> &'static str {
    match e {
        oncelake::Error::Corrupt { .. } | oncelake::Error::MissingObject { .. } => VERIFY_HINT,
        // A put or claim of an internal unit: say how the CLI writes them. (A pipeline's own unit
        // under `.pipeline/` is refused with a reason that says what to do instead.)
        oncelake::Error::InvalidKey { key, reason }
            if oncelake::is_internal_key(key)
                && *reason != oncelake::pipeline::cell::RESERVED_UNIT_REASON =>
        {
            " — with the CLI: `oncelake pipeline set-version` and `oncelake pipeline complete`"
        }
        oncelake::Error::Locked { .. } => {
            " — the CLI waits up to --wait (e.g. --wait 1m), then gives up"
        }
        oncelake::Error::SeqOutOfRange { .. } => SEQ_HINT,
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

    /// The exit code (see [`exit`]).
    pub(crate) fn exit_code(&self) -> u8 {
        use oncelake::Error as E;
        match self {
            CliError::Usage(_)
            | CliError::Input(_)
            | CliError::NotAStore(_)
            | CliError::NotFound(_) => exit::USAGE,
            CliError::Locked(_) => exit::BUSY,
            CliError::Io { .. } => exit::FAILURE,
            CliError::Served { exit, .. } => *exit,
            CliError::Engine(e) => match e {
                E::InvalidKey { .. }
                | E::InvalidRequest(_)
                | E::NotAStore { .. }
                | E::NestedStore { .. }
                | E::NewerFormat { .. }
                | E::OlderFormat { .. }
                | E::SeqOutOfRange { .. } => exit::USAGE,
                E::Locked { .. } => exit::BUSY,
                _ => exit::FAILURE,
            },
            CliError::Table(e) => match e {
                oncelake::table::TableError::Damaged { .. } => exit::FAILURE,
                _ => exit::USAGE,
            },
        }
    }

    /// The stable `error` kind of the JSON error object (documented in docs/cli.md).
    pub(crate) fn kind(&self) -> &'static str {
        use oncelake::Error as E;
        match self {
            CliError::Usage(_) => "usage",
            CliError::Input(_) => "bad_input",
            CliError::NotAStore(_) => "not_a_store",
            CliError::NotFound(_) => "not_found",
            CliError::Locked(_) => "locked",
            CliError::Io { .. } => "io",
            CliError::Served { kind, .. } => kind,
            CliError::Table(oncelake::table::TableError::Damaged { .. }) => "table_damaged",
            CliError::Table(_) => "table",
            CliError::Engine(e) => match e {
                E::InvalidKey { .. } => "invalid_key",
                E::InvalidRequest(_) => "invalid_request",
                E::NotAStore { .. } => "not_a_store",
                E::NestedStore { .. } => "nested_store",
                E::NewerFormat { .. } => "newer_format",
                E::OlderFormat { .. } => "older_format",
                E::SeqOutOfRange { .. } => "seq_out_of_range",
                E::Locked { .. } => "locked",
                E::ReadOnly { .. } => "read_only",
                E::Corrupt { .. } | E::BadRecord(_) => "corrupt",
                E::MissingObject { .. } => "missing_object",
                E::Io { .. } | E::Database { .. } | E::Failed { .. } => "io",
                E::Lake { .. } => "lake",
                _ => "internal",
            },
        }
    }

    /// The error as the JSON object written to standard error under `--json`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": self.kind(),
            "message": self.to_string(),
            "exit_code": self.exit_code(),
        })
    }
}

/// Every stable error kind, for docs/cli.md and its test.
#[cfg(test)]
pub(crate) const ERROR_KINDS: &[&str] = &[
    "usage",
    "bad_input",
    "io",
    "table",
    "table_damaged",
    "invalid_key",
    "invalid_request",
    "not_a_store",
    "not_found",
    "nested_store",
    "newer_format",
    "older_format",
    "seq_out_of_range",
    "locked",
    "read_only",
    "corrupt",
    "missing_object",
    "internal",
    "impostor",
];

/// A served store's failure as the CLI error of the same failure in-process.
impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        client_error(e)
    }
}

/// The CLI error of a client error: the error kind, exit code and hint of the same failure
/// in-process (see `CliError::kind`), from the stable kind the server answered with — the
/// server's message is the engine's, so the text is the in-process one too.
pub(crate) fn client_error(e: ClientError) -> CliError {
    let served = |kind, exit, message, hint| CliError::Served {
        kind,
        exit,
        message,
        hint,
    };
    match e {
        ClientError::BadRequest { kind, message } => match kind.as_str() {
            "invalid_key" => served("invalid_key", exit::USAGE, message, ""),
            "invalid_request" => served("invalid_request", exit::USAGE, message, ""),
            "seq_out_of_range" => served("seq_out_of_range", exit::USAGE, message, SEQ_HINT),
            // A refused table call (`TableError` other than damage): `CliError::Table`.
            "table" => served("table", exit::USAGE, message, ""),
            // A request the server found malformed (`bad_request`): the caller's arguments.
            _ => CliError::Usage(message),
        },
        ClientError::Store { kind, message, .. } => match kind.as_str() {
            "corrupt" => served("corrupt", exit::FAILURE, message, VERIFY_HINT),
            "missing_object" => served("missing_object", exit::FAILURE, message, VERIFY_HINT),
            "read_only" => served("read_only", exit::FAILURE, message, ""),
            "table_damaged" => served("table_damaged", exit::FAILURE, message, ""),
            // The engine's `Io`, `Database` and `Failed` are all kind `io` in-process.
            "io" | "failed" => served("io", exit::FAILURE, message, ""),
            _ => CliError::io("oncelake server", std::io::Error::other(message)),
        },
        ClientError::Input(source) => CliError::io("read the input", source),
        // The client's own size and CRC32 check: the very error an in-process read gives.
        ClientError::Damaged(e) => e.into(),
        // The store is held by a server that does not answer: busy, as a held lock is, but
        // naming the server rather than "another process".
        e @ ClientError::NoAnswer { .. } => served("locked", exit::BUSY, e.to_string(), ""),
        e @ ClientError::NotItsServer { .. } => {
            served("impostor", exit::FAILURE, e.to_string(), "")
        }
        other => CliError::io("oncelake server", std::io::Error::other(other.to_string())),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/cli.md documents every exit code and every error kind, from the tables above.
    #[test]
    fn docs_list_every_exit_code_and_error_kind() {
        let doc = include_str!("../../../docs/cli.md");
        for (code, what) in exit::TABLE {
            let row = format!("| {code} | {what} |");
            assert!(doc.contains(&row), "docs/cli.md lacks the row {row:?}");
        }
        for kind in ERROR_KINDS {
            assert!(
                doc.contains(&format!("`{kind}`")),
                "docs/cli.md lacks the error kind {kind}"
            );
        }
    }

    /// Every stable kind the server answers with becomes the CLI error of the same failure
    /// in-process: its kind (one docs/cli.md lists), its exit code, its hint.
    #[test]
    fn server_error_kinds_map_to_the_in_process_kind_and_exit_code() {
        use oncelake_server::ClientError;
        let bad = |kind: &str| ClientError::BadRequest {
            kind: kind.into(),
            message: "m".into(),
        };
        let store = |kind: &str| ClientError::Store {
            kind: kind.into(),
            status: 500,
            message: "m".into(),
        };
        // The kinds the CLI has too keep their name; the server's other kinds are the CLI's
        // nearest (a refused request is a usage error, a failure of the server an I/O one).
        let usage = [
            "invalid_key",
            "invalid_request",
            "seq_out_of_range",
            "table",
        ];
        let failure = [
            "corrupt",
            "missing_object",
            "read_only",
            "table_damaged",
            "io",
        ];
        let cases = (usage.iter().map(|k| (bad(k), *k, exit::USAGE)))
            .chain([(bad("bad_request"), "usage", exit::USAGE)])
            .chain(failure.iter().map(|k| (store(k), *k, exit::FAILURE)))
            .chain(["failed", "snapshot_gone"].map(|k| (store(k), "io", exit::FAILURE)));
        for (e, kind, code) in cases {
            let what = format!("{e:?}");
            let c = client_error(e);
            assert_eq!((c.kind(), c.exit_code()), (kind, code), "{what}");
            assert!(ERROR_KINDS.contains(&c.kind()), "{what}");
        }
        // A damaged object says what to run, as in-process.
        assert!(client_error(store("corrupt"))
            .to_string()
            .ends_with(VERIFY_HINT));
        assert_eq!(
            client_error(store("corrupt")).to_string(),
            format!("m{VERIFY_HINT}")
        );
    }
}
