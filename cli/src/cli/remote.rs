//! Commands through a server (SPEC R20): when a live `oncelake serve` holds the store, a command
//! goes through it with the same output and exit codes as in-process. Every command that works
//! on one store is written once over the engine's `UnitStore` and the CLI's `StoreOps`
//! (`cli::on_store`), so this only picks the implementation: the server's client instead of the
//! store in this process. A socket or address file left by a killed server answers nothing: the
//! command then runs in-process.

use super::error::client_error;
use super::pipeline_cmds::PipelineCommand;
use super::store_cmds::print_init;
use super::table_cmds::TableCommand;
use super::{exit, CliError, Command, Output};
use oncelake_server::{Client, ClientError};
use std::path::Path;
use std::time::Duration;

/// Runs the command through the server of its store, if a server answers and proves it is the
/// server of this store directory (see `Client::for_store_within`), waiting for its first answer
/// no longer than `wait` allows; `None` to run it in-process.
pub(crate) fn route(cmd: &Command, wait: Duration) -> Option<Result<u8, CliError>> {
    let store = store_of(cmd)?;
    let client = match Client::for_store_within(store, super::probe_timeout(wait)) {
        Ok(c) => c,
        Err(ClientError::NotServed { .. }) => return None,
        Err(e) => return Some(Err(client_error(e))),
    };
    // `init` of a served store: it is one already, nothing changes (the in-process wording).
    if let Command::Init(a) = cmd {
        print_init(&Output::new(a.json), &a.store, false);
        return Some(Ok(exit::OK));
    }
    // A lake node's commands see the lake as of now (SPEC R23), in-process by the sync of the
    // open; the server holds the node open, so it is asked to sync first.
    if store.join(oncelake::LAKE_FILE).exists() {
        if let Err(e) = client.sync() {
            return Some(Err(client_error(e)));
        }
    }
    let served = |_: &Path| Ok(client.clone());
    Some(super::on_store(cmd, &served, &served).unwrap_or_else(|| not_routed(store, &client)))
}

/// The store a command works on, for the commands that open one.
fn store_of(cmd: &Command) -> Option<&Path> {
    Some(match cmd {
        Command::Init(a) => &a.store,
        Command::Sync(a) => &a.store,
        Command::Checkpoint(a) => &a.store,
        Command::Put(a) => &a.store,
        Command::Get(a) => &a.store,
        Command::Ls(a) => &a.store,
        Command::Log(a) => &a.store,
        Command::Stats(a) => &a.store,
        Command::Claim(a) => &a.store,
        Command::Release(a) => &a.store,
        Command::Gc(a) => &a.store,
        Command::Verify(a) => &a.store,
        Command::Reconcile(a) => &a.store,
        Command::Table(t) => match &t.command {
            TableCommand::Create(a) => &a.store,
            TableCommand::Ls(a) => &a.store,
            TableCommand::Publish(a) => &a.store,
            // The benchmark makes stores of its own.
            TableCommand::Bench(_) => return None,
        },
        Command::Pipeline(p) => match &p.command {
            PipelineCommand::SetVersion(a) => &a.store,
            PipelineCommand::Status(a) => &a.store,
            PipelineCommand::Ready(a) => &a.store,
            PipelineCommand::Complete(a) => &a.store,
            PipelineCommand::Fail(a) => &a.store,
            PipelineCommand::Explain(a) => &a.store,
        },
        _ => return None,
    })
}

/// A command the server does not offer yet: say so at once instead of waiting for the lock.
fn not_routed(store: &Path, client: &Client) -> Result<u8, CliError> {
    errln!(
        "this command does not go through `oncelake serve` yet, and the server at {} holds the store; \
         stop the server (SIGTERM) and run the command again, or use the HTTP API (docs/server.md)",
        client.address()
    );
    Err(CliError::Engine(oncelake::Error::Locked {
        path: store.to_path_buf(),
    }))
}
