//! A running `oncelake serve` for the tests that compare the CLI through a server with the CLI
//! in-process.
#![allow(dead_code)]

#[path = "../../../tests/bin/mod.rs"]
pub mod bin;

use oncelake_server::Client;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `oncelake serve`, killed when dropped.
pub struct Server {
    /// The server process.
    pub child: Child,
    /// The address of its ready line (`unix:PATH` or `tcp:HOST:PORT`).
    pub address: String,
}

impl Server {
    /// Starts a server on its default socket and waits for its ready line.
    pub fn start(store: &Path) -> Server {
        Server::start_with(store, &[])
    }

    /// Starts a server with `extra` options and waits for its ready line (the synchronisation
    /// is its output).
    pub fn start_with(store: &Path, extra: &[&str]) -> Server {
        let mut serve = Command::new(bin::oncelake());
        serve.arg("serve").arg(store).args(extra);
        Server::spawn(serve)
    }

    /// Spawns `serve` (an `oncelake serve` command) and waits for its ready line.
    pub fn spawn(mut serve: Command) -> Server {
        let (child, address) = bin::spawn_serve(serve.stderr(Stdio::piped()));
        Server { child, address }
    }

    /// The server's pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGTERM, then the exit status (it closed the store and removed its files).
    pub fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet (so the pid
        // cannot have been reused).
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGTERM) }, 0);
        self.child.wait().unwrap()
    }

    /// SIGTERM, and the server exited successfully.
    pub fn stop(self) {
        assert!(self.terminate().success());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the CLI.
pub fn oncelake(args: &[&str]) -> std::process::Output {
    bin::run(args, None)
}

/// Runs the CLI with `stdin` as its input.
pub fn oncelake_with_input(args: &[&str], stdin: &[u8]) -> std::process::Output {
    bin::run(args, Some(stdin))
}

/// A new store in a temporary directory.
pub fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lake");
    let out = oncelake(&["init", store.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    (dir, store)
}

/// A new store served by `oncelake serve`, and a client of that server.
pub fn served_store() -> (tempfile::TempDir, PathBuf, Server, Client) {
    let (dir, store) = new_store();
    let server = Server::start(&store);
    let client = Client::for_store(&store).unwrap();
    (dir, store, server, client)
}

/// `oncelake verify STORE` finds no problem (exit code 0); its output.
#[track_caller]
pub fn verifies(store: &Path) -> std::process::Output {
    let out = oncelake(&["verify", store.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    out
}

/// Puts `bytes` as `unit` at `version` (through a server if one runs).
pub fn put(store: &Path, unit: &str, version: u64, bytes: &[u8]) {
    let out = oncelake_with_input(
        &[
            "put",
            store.to_str().unwrap(),
            unit,
            &version.to_string(),
            "-",
        ],
        bytes,
    );
    assert!(out.status.success(), "{out:?}");
}

/// (exit code, stdout) of a CLI call.
pub fn run(args: &[&str]) -> (i32, String) {
    let out = oncelake(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

/// (exit code, stdout) of a CLI call reading `stdin`.
pub fn run_with_input(args: &[&str], stdin: &[u8]) -> (i32, String) {
    let out = oncelake_with_input(args, stdin);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

/// The same command with `stdin`, through a running server and in-process.
pub fn served_and_in_process_with_input(
    store: &Path,
    args: &[&str],
    stdin: &[u8],
) -> ((i32, String), (i32, String)) {
    let server = Server::start(store);
    let served = run_with_input(args, stdin);
    server.stop();
    (served, run_with_input(args, stdin))
}

/// The same command through a running server and in-process (after the server stopped): both
/// answers, which the caller compares.
pub fn served_and_in_process(store: &Path, args: &[&str]) -> ((i32, String), (i32, String)) {
    let server = Server::start(store);
    let served = run(args);
    server.stop();
    assert!(
        !store.join("serve.json").exists(),
        "the server left its address file"
    );
    (served, run(args))
}

/// Runs `args` (`{}` is the store) on both stores; the served answer, after checking it equals
/// the in-process one. Times that depend on when each ran (`expires_at_ms`, and the dates in
/// human output) are masked.
pub fn twins(served: &Path, local: &Path, args: &[&str], stdin: &[u8]) -> (i32, String) {
    let run = |store: &Path| {
        let a: Vec<String> = args
            .iter()
            .map(|a| a.replace("{}", store.to_str().unwrap()))
            .collect();
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, out) = run_with_input(&a, stdin);
        (code, mask(&out.replace(store.to_str().unwrap(), "STORE")))
    };
    let through = run(served);
    let in_process = run(local);
    assert_eq!(
        through, in_process,
        "{args:?}: through the server vs in-process"
    );
    through
}

/// `out` with the times that depend on when a command ran masked.
pub fn mask(out: &str) -> String {
    out.lines()
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(mut m)) => {
                if m.get("expires_at_ms").is_some_and(|v| !v.is_null()) {
                    m.insert("expires_at_ms".into(), "T".into());
                }
                Value::Object(m).to_string()
            }
            _ => match l.find(" until ") {
                Some(i) => format!("{} until T", &l[..i]),
                None => l.to_string(),
            },
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each line of `out`, parsed as JSON.
pub fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A served store and its in-process twin, with the pipeline definition in a file.
pub struct Twins {
    dir: tempfile::TempDir,
    /// The store a server serves.
    pub served: PathBuf,
    _local_dir: tempfile::TempDir,
    /// Its twin, run in-process.
    pub local: PathBuf,
}

impl Twins {
    /// Two new stores, and the pipeline definition `def` in a file.
    pub fn new(def: &str) -> Twins {
        let (dir, served) = new_store();
        let (_local_dir, local) = new_store();
        std::fs::write(dir.path().join("etl.toml"), def).unwrap();
        Twins {
            dir,
            served,
            _local_dir,
            local,
        }
    }

    /// The pipeline definition's path.
    pub fn def(&self) -> String {
        self.dir
            .path()
            .join("etl.toml")
            .to_str()
            .unwrap()
            .to_string()
    }

    /// Runs `args` on both (see [`twins`]).
    pub fn run(&self, args: &[&str], stdin: &[u8]) -> (i32, String) {
        twins(&self.served, &self.local, args, stdin)
    }

    /// `pipeline COMMAND {} --pipeline DEF ARGS` on both.
    pub fn pipeline(&self, command: &str, args: &[&str], stdin: &[u8]) -> (i32, String) {
        let def = self.def();
        let head = ["pipeline", command, "{}", "--pipeline", def.as_str()];
        self.run(&[&head[..], args].concat(), stdin)
    }

    /// The ready cells as (unit, stage), checked alike in human form and in JSON.
    pub fn ready(&self) -> Vec<(String, String)> {
        self.pipeline("ready", &[], b"");
        let (code, out) = self.pipeline("ready", &["--json"], b"");
        assert_eq!(code, 0);
        field_pairs(&out, "unit", "stage")
    }

    /// (stage, state) of a unit's cells, in stage order, as `explain --json` says.
    pub fn explain(&self, unit: &str) -> Vec<(String, String)> {
        let (code, out) = self.pipeline("explain", &[unit, "--json"], b"");
        assert_eq!(code, 0);
        field_pairs(&out, "stage", "state")
    }

    /// The states of a unit's cells, in stage order.
    pub fn states(&self, unit: &str) -> Vec<String> {
        self.explain(unit)
            .into_iter()
            .map(|(_, state)| state)
            .collect()
    }
}

/// The string fields `a` and `b` of each JSON line of `out`.
pub fn field_pairs(out: &str, a: &str, b: &str) -> Vec<(String, String)> {
    json_lines(out)
        .iter()
        .map(|v| {
            let field = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("no {k} in {v}"));
            (field(a).to_string(), field(b).to_string())
        })
        .collect()
}

/// Pairs of strings (unit and stage, stage and state), owned.
pub fn cells(of: &[(&str, &str)]) -> Vec<(String, String)> {
    of.iter()
        .map(|(u, s)| (u.to_string(), s.to_string()))
        .collect()
}

impl Server {
    /// SIGTERM, then the exit status if the server exits within `limit` (a server that does not
    /// is killed when dropped). Only that it ends is checked, never how fast.
    pub fn terminate_within(
        &mut self,
        limit: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGTERM) }, 0);
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
