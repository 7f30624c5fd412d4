//! `get -o PATH` in a directory others can write to (SPEC R19, R20), in-process and through a
//! server: a file or symlink planted at a temporary name is never used, concurrent gets into one
//! directory never share a temporary file, a pipe is written in place and any other special
//! file is refused, never replaced.

use crate::support;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

/// Runs `each` against the store in-process, then through a server of it, each time with a
/// new directory of its own inside `dir`.
fn both_ways(dir: &tempfile::TempDir, store: &Path, mut each: impl FnMut(&str, &Path)) {
    let fresh = || tempfile::tempdir_in(dir.path()).unwrap();
    each("in-process", fresh().path());
    let server = Server::start(store);
    each("served", fresh().path());
    server.stop();
}

/// The bytes of unit `u` in these tests: distinct per unit, large enough to take a while.
fn object(u: &str, len: usize) -> Vec<u8> {
    u.bytes().cycle().take(len).collect()
}

/// A new store whose unit `u` holds `len` bytes at version 1: its directory, path and the bytes.
fn store_holding_u(len: usize) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let (dir, store) = new_store();
    let want = object("unit-u", len);
    put(&store, "u", 1, &want);
    (dir, store, want)
}

fn get_o(store: &Path, unit: &str, out: &Path) -> std::process::Output {
    oncelake(&[
        "get",
        store.to_str().unwrap(),
        unit,
        "-o",
        out.to_str().unwrap(),
    ])
}

/// The names in `dir` that look like temporary files of a get.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("oncelake-tmp"))
        .collect()
}

/// A symlink planted at the old fixed temporary name (`OUT.oncelake-tmp`) pointing at a file
/// the attacker cannot write, and a regular file planted there by someone else: the get writes
/// neither, and its output is a new file of its own.
#[test]
fn a_symlink_or_file_planted_at_a_temporary_name_is_never_written() {
    let (dir, store, want) = store_holding_u(100_000);
    both_ways(&dir, &store, |how, d| {
        let victim = d.join("victim");
        std::fs::write(&victim, b"root only").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("out.oncelake-tmp")).unwrap();
        let planted = d.join("other.oncelake-tmp");
        std::fs::write(&planted, b"planted").unwrap();
        let planted_ino = std::fs::metadata(&planted).unwrap().ino();

        for name in ["out.bin", "other.bin"] {
            let out = get_o(&store, "u", &d.join(name));
            assert_eq!(out.status.code(), Some(0), "{how}: {out:?}");
            assert!(
                std::fs::read(d.join(name)).unwrap() == want,
                "{how}: {name}"
            );
        }
        let v = std::fs::read(&victim).unwrap();
        assert!(
            v == b"root only",
            "{how}: the symlink was followed ({} bytes written)",
            v.len()
        );
        let link = d.join("out.oncelake-tmp");
        assert!(
            std::fs::symlink_metadata(&link).unwrap().is_symlink(),
            "{how}"
        );
        assert_eq!(std::fs::read(&planted).unwrap(), b"planted", "{how}");
        assert_ne!(
            std::fs::metadata(d.join("other.bin")).unwrap().ino(),
            planted_ino,
            "{how}: the planted file became the output"
        );
        let mut left = leftovers(d);
        left.sort();
        assert_eq!(left, ["other.oncelake-tmp", "out.oncelake-tmp"], "{how}");
    });
}

/// Two gets of different units into one directory at once, outputs `x.a` and `x.b` (the old
/// fixed temporary name `x.oncelake-tmp` was the same for both): each output holds its own
/// unit's bytes, round after round.
#[test]
fn concurrent_gets_into_one_directory_each_get_their_own_bytes() {
    let (dir, store) = new_store();
    let units = ["a", "b"];
    for u in units {
        put(&store, u, 1, &object(u, 1 << 20));
    }
    let server = Server::start(&store);
    let d = tempfile::tempdir_in(dir.path()).unwrap();
    let s = store.to_str().unwrap().to_string();
    for round in 0..30 {
        let children: Vec<_> = units
            .iter()
            .map(|u| {
                let out = d.path().join(format!("x.{u}"));
                std::process::Command::new(bin::oncelake())
                    .args(["get", &s, u, "-o", out.to_str().unwrap()])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (u, child) in units.iter().zip(children) {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}, unit {u}: {out:?}");
            let got = std::fs::read(d.path().join(format!("x.{u}"))).unwrap();
            assert!(
                got == object(u, 1 << 20),
                "round {round}: x.{u} holds other bytes ({} bytes, starting {:?})",
                got.len(),
                String::from_utf8_lossy(&got[..got.len().min(8)])
            );
        }
    }
    assert_eq!(leftovers(d.path()), Vec::<String>::new());
    server.stop();
}

/// A FIFO is written in place (it stays a FIFO, its reader gets the object); a socket and a
/// device (a `/dev/null` made in a temporary directory, when this user may make one) are refused
/// before anything is written, and stay what they were.
#[test]
fn a_pipe_is_written_in_place_and_other_special_files_are_refused() {
    let (dir, store, want) = store_holding_u(300_000);
    both_ways(&dir, &store, |how, d| {
        let fifo = d.join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let reading = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read(reading));
        });
        let out = get_o(&store, "u", &fifo);
        assert_eq!(out.status.code(), Some(0), "{how}: {out:?}");
        let t = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(t.is_fifo(), "{how}: the FIFO was replaced by {t:?}");
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the reader got an end of file")
            .unwrap();
        assert!(got == want, "{how}: the reader got {} bytes", got.len());

        let sock = d.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let out = get_o(&store, "u", &sock);
        assert_eq!(out.status.code(), Some(2), "{how}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is a socket"), "{how}: {err}");
        assert!(
            std::fs::symlink_metadata(&sock)
                .unwrap()
                .file_type()
                .is_socket(),
            "{how}: the socket was replaced"
        );

        // /dev/null's twin (char 1:3), so that a regression replaces nothing the machine needs.
        let null = d.join("null");
        let c = std::ffi::CString::new(null.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; mknod only creates the node (or fails unprivileged).
        let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        if made != 0 {
            eprintln!(
                "{how}: cannot mknod here ({}); the device case is skipped",
                std::io::Error::last_os_error()
            );
        } else {
            let out = get_o(&store, "u", &null);
            assert_eq!(out.status.code(), Some(2), "{how}: {out:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("is a device"), "{how}: {err}");
            let m = std::fs::symlink_metadata(&null).unwrap();
            assert!(
                m.file_type().is_char_device(),
                "{how}: the device was replaced"
            );
            assert_eq!(m.rdev(), libc::makedev(1, 3), "{how}");
        }
        assert_eq!(leftovers(d), Vec::<String>::new(), "{how}");
    });
}
