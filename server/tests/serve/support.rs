//! A running `oncelake serve` for the tests that compare the CLI through a server with the CLI
//! in-process.
#![allow(dead_code)]

#[path = "../../../tests/bin/mod.rs"]
pub mod bin;

use std::io::{BufRead, BufReader, Read};
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
        let mut child = Command::new(bin::oncelake())
            .arg("serve")
            .arg(store)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line.is_empty() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("the server did not start: {err}");
        }
        let address = line
            .split_whitespace()
            .find(|w| w.starts_with("unix:") || w.starts_with("tcp:"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
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
    Command::new(bin::oncelake()).args(args).output().unwrap()
}

/// Runs the CLI with `stdin` as its input.
pub fn oncelake_with_input(args: &[&str], stdin: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(bin::oncelake())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// A new store in a temporary directory.
pub fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lake");
    let out = oncelake(&["init", store.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    (dir, store)
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
