//! The `oncelake` binary for the tests that run the command line. The `cli/` member's own tests
//! get it from Cargo (`CARGO_BIN_EXE_oncelake`). It belongs to that member, so Cargo gives the
//! tests of other packages none; for them it comes from `$ONCELAKE_BIN` if set, else it is built
//! once per test process with the same Cargo, profile and target directory as the running test. The build cannot wait on the
//! outer `cargo test`: Cargo releases the build-directory lock before it runs test binaries.

#![allow(dead_code)] // each binary uses a part

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

/// The path of the `oncelake` binary (built on first use).
pub fn oncelake() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(path) = option_env!("CARGO_BIN_EXE_oncelake") {
            return PathBuf::from(path);
        }
        match std::env::var_os("ONCELAKE_BIN") {
            Some(path) => PathBuf::from(path),
            None => build(),
        }
    })
}

/// `cargo build -p oncelake-cli --bin oncelake` into the directory this test runs from:
/// the test is `<target>/<profile dir>/deps/<test>`, the binary `<target>/<profile dir>/oncelake`.
fn build() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not in <target>/<profile>/deps", exe.display()));
    let target_dir = profile_dir
        .parent()
        .expect("a profile directory has a parent");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(name) => name,
        None => panic!("no profile directory above {}", exe.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let status = Command::new(&cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "oncelake-cli",
            "--bin",
            "oncelake",
        ])
        .arg("--profile")
        .arg(profile)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .unwrap_or_else(|e| panic!("could not run {cargo:?} to build the oncelake binary: {e}"));
    assert!(
        status.success(),
        "`cargo build -p oncelake-cli --bin oncelake --profile {profile}` failed ({status}); \
         fix the build, or point ONCELAKE_BIN at a built oncelake binary"
    );
    let bin = profile_dir.join(format!("oncelake{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the build left no binary at {}",
        bin.display()
    );
    bin
}

/// Runs `oncelake ARGS` to its end with `stdin` as its input (none: an empty input) and
/// `env` added to its environment, capturing its output. The progress interval a caller's
/// environment may set is removed, so that progress lines come only where a test asks for them.
pub fn run_env(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
    run_into(args, stdin, Stdio::piped(), env)
}

/// [`run_env`] with standard output `stdout` (a pipe whose reader is gone, `/dev/full`, ...):
/// what the command wrote there is not captured.
pub fn run_into(
    args: &[&str],
    stdin: Option<&[u8]>,
    stdout: Stdio,
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(oncelake());
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .env_remove("ONCELAKE_PROGRESS_INTERVAL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run the oncelake binary");
    let mut input = child.stdin.take().expect("a piped stdin");
    if let Some(data) = stdin {
        let _ = input.write_all(data); // the command may exit before it reads its input
    }
    drop(input);
    child.wait_with_output().expect("wait for oncelake")
}

/// [`run_env`] with the caller's environment as it is.
pub fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    run_env(args, stdin, &[])
}

/// The JSON lines of the standard output of a command that must have succeeded, each parsed.
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{out:?}");
    std::str::from_utf8(&out.stdout)
        .expect("UTF-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

/// [`run`] without input: the exit code, standard output and standard error (which must be
/// UTF-8).
pub fn run_text(args: &[&str]) -> (Option<i32>, String, String) {
    let out = run(args, None);
    (
        out.status.code(),
        String::from_utf8(out.stdout).expect("UTF-8 standard output"),
        String::from_utf8(out.stderr).expect("UTF-8 standard error"),
    )
}

/// Spawns `serve` (an `oncelake serve` command) with its standard output piped here, and waits
/// for its ready line: the server, and the address the line names (`unix:PATH` or
/// `tcp:HOST:PORT`). A server that ends before it is ready fails the test, saying its standard
/// error where `serve` pipes that.
pub fn spawn_serve(serve: &mut Command) -> (Child, String) {
    let mut child = serve.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.is_empty() {
        let mut err = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            stderr.read_to_string(&mut err).unwrap();
        }
        panic!("the server did not start: {err}");
    }
    let address = line
        .split_whitespace()
        .find(|w| w.starts_with("unix:") || w.starts_with("tcp:"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (child, address)
}
