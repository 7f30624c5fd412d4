//! Commands through a server (SPEC R20): when a live `oncelake serve` holds the store, a command
//! goes through it with the same output and exit codes as in-process — the same printers are
//! called with the engine's own types, which the client rebuilds from the answers. A socket or
//! address file left by a killed server answers nothing: the command then runs in-process.

use super::sim_cmds::{print_claim, print_release, print_stats};
use super::store_cmds::{
    check_output_path, no_entry, print_ls_end, print_ls_entry, print_put, print_record,
};
use super::{open_input, write_out_bytes, CliError, Command};
use oncelake_server::{Client, ClientError};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Runs the command through the server of its store, if a server answers; `None` to run it
/// in-process.
pub(crate) fn route(cmd: &Command) -> Option<Result<u8, CliError>> {
    let store = store_of(cmd)?;
    let client = match Client::for_store(store) {
        Ok(c) => c,
        Err(ClientError::NotServed { .. }) => return None,
        Err(e) => return Some(Err(client_error(e))),
    };
    Some(match cmd {
        Command::Init(a) => Ok(init(a)),
        Command::Put(a) => put(&client, a),
        Command::Get(a) => get(&client, a),
        Command::Ls(a) => ls(&client, a),
        Command::Log(a) => log(&client, a),
        Command::Stats(a) => stats(&client, a),
        Command::Claim(a) => claim(&client, a),
        Command::Release(a) => release(&client, a),
        Command::Gc(a) => client
            .gc(a.dry_run, Some(a.grace), Some(a.retain))
            .map(|r| {
                super::maint_cmds::print_gc(a, &r);
                0
            })
            .map_err(client_error),
        _ => not_routed(store, &client),
    })
}

/// `init` of a served store: it is one already, nothing changes (the in-process wording).
fn init(a: &super::store_cmds::InitArgs) -> u8 {
    if a.json {
        super::print_json(
            &serde_json::json!({"store": a.store.display().to_string(), "created": false}),
        );
    } else {
        outln!(
            "{} is already an oncelake store; nothing was changed",
            a.store.display()
        );
    }
    0
}

fn stats(client: &Client, a: &super::sim_cmds::StatsArgs) -> Result<u8, CliError> {
    let s = client.stats().map_err(client_error)?;
    let server = (s.server_prometheus.as_str(), &s.server);
    print_stats(a, s.units, s.seq, &s.metrics(), Some(server));
    Ok(0)
}

fn claim(client: &Client, a: &super::sim_cmds::ClaimArgs) -> Result<u8, CliError> {
    oncelake::validate_key(&a.unit)?;
    client
        .claim(&a.unit, a.version, &a.worker, a.ttl)
        .map(|o| print_claim(a, o))
        .map_err(client_error)
}

fn release(client: &Client, a: &super::sim_cmds::ReleaseArgs) -> Result<u8, CliError> {
    oncelake::validate_key(&a.unit)?;
    // The worker and the token identify the lease, as in-process.
    let lease = oncelake::Lease {
        unit: a.unit.clone(),
        worker: a.worker.clone(),
        token: a.token,
        source_version: 0,
        expires_at_ms: 0,
    };
    client
        .release(&lease)
        .map(|o| print_release(a, &o))
        .map_err(client_error)
}

/// The store a command works on, for the commands that open one.
fn store_of(cmd: &Command) -> Option<&Path> {
    Some(match cmd {
        Command::Init(a) => &a.store,
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

/// The CLI error of a client error, with the exit code of the same failure in-process.
pub(crate) fn client_error(e: ClientError) -> CliError {
    match e {
        ClientError::BadRequest { message, .. } => CliError::Usage(message),
        ClientError::Input(source) => CliError::io("read the input", source),
        other => CliError::io("oncelake server", std::io::Error::other(other.to_string())),
    }
}

fn put(client: &Client, a: &super::store_cmds::PutArgs) -> Result<u8, CliError> {
    oncelake::validate_key(&a.unit)?;
    let input = open_input(&a.file)?;
    let sent = match input {
        None => client.put_reader(
            &a.unit,
            a.version,
            a.token,
            a.correct,
            std::io::stdin().lock(),
        ),
        Some(f) => client.put_reader(&a.unit, a.version, a.token, a.correct, f),
    };
    let (u, meta) = sent.map_err(client_error)?;
    Ok(print_put(a, &u, &meta))
}

/// Standard output as a `Write` (a closed pipe is not an error: see `common`).
struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = write_out_bytes(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn get(client: &Client, a: &super::store_cmds::GetArgs) -> Result<u8, CliError> {
    oncelake::validate_key(&a.unit)?;
    let Some(path) = &a.output else {
        return match client.read_object(&a.unit, a.at, &mut Stdout) {
            Ok(Some(_)) => Ok(0),
            Ok(None) => Err(no_entry(a)),
            Err(e) => Err(client_error(e)),
        };
    };
    check_output_path(path)?;
    let tmp = path.with_extension("oncelake-tmp");
    let mut f = std::fs::File::create(&tmp)
        .map_err(|e| CliError::io(format!("write {}", tmp.display()), e))?;
    let found = client.read_object(&a.unit, a.at, &mut f);
    drop(f);
    match found {
        Ok(Some(_)) => std::fs::rename(&tmp, path)
            .map(|()| 0)
            .map_err(|e| CliError::io(format!("write {}", path.display()), e)),
        other => {
            let _ = std::fs::remove_file(&tmp);
            match other {
                Ok(_) => Err(no_entry(a)),
                Err(e) => Err(client_error(e)),
            }
        }
    }
}

fn ls(client: &Client, a: &super::store_cmds::LsArgs) -> Result<u8, CliError> {
    let mut n = 0u64;
    let mut open = true;
    client
        .ls(&a.prefix, a.at, |e| {
            n += 1;
            open = print_ls_entry(a, &e);
            open
        })
        .map_err(client_error)?;
    if open {
        print_ls_end(a, n);
    }
    Ok(0)
}

fn log(client: &Client, a: &super::store_cmds::LogArgs) -> Result<u8, CliError> {
    let mut since = a.since;
    loop {
        let (records, _) = client
            .changes_since(since, Duration::ZERO, 10_000)
            .map_err(client_error)?;
        let Some(last) = records.last().map(|r| r.seq) else {
            return Ok(0);
        };
        for r in &records {
            if !print_record(a, r) {
                return Ok(0);
            }
        }
        since = last;
    }
}
