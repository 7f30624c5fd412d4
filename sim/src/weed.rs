//! Starting a temporary SeaweedFS (`weed mini` on free loopback ports, serving one bucket) for
//! a lake on a real S3 server. Standard library only: `tests/lake_s3.rs` of the engine includes
//! this file as a module of its own (it cannot depend on this crate, which depends on the
//! engine).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `weed` from `ONCELAKE_WEED`, else from `PATH`.
pub fn find_weed() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ONCELAKE_WEED") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("weed"))
        .find(|p| p.is_file())
}

/// Offsets from the base port of every port `weed mini` listens on (http, then grpc).
const PORTS: [u16; 10] = [0, 1, 2, 3, 4, 10, 11, 12, 13, 14];

/// A base port whose every offset is free now (a later race with another process is possible;
/// the start is then retried on another base).
fn free_base(attempt: u16) -> Option<u16> {
    let seed = (std::process::id() as u16)
        .wrapping_mul(31)
        .wrapping_add(attempt.wrapping_mul(97));
    (0..200u16)
        .map(|i| 20_000 + (seed.wrapping_add(i.wrapping_mul(41)) % 9_000))
        .find(|base| {
            PORTS
                .iter()
                .all(|o| TcpListener::bind(("127.0.0.1", base + o)).is_ok())
        })
}

/// Whether `GET /BUCKET` on the S3 port answers 200 (the bucket exists, the server is up).
fn bucket_ready(port: u16, bucket: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET /{bucket} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    // "HTTP/1.x 200": Go answers an HTTP/1.0 request in kind.
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[8..] == b" 200"
}

/// Starts `weed mini` serving `bucket` with its data under `dir`; returns it and its S3 port.
pub fn start_weed(weed: &Path, dir: &Path, bucket: &str) -> Result<(Child, u16), String> {
    for attempt in 0..3 {
        let data = dir.join(attempt.to_string());
        std::fs::create_dir_all(&data).map_err(|e| format!("create {}: {e}", data.display()))?;
        let p = free_base(attempt).ok_or("no free loopback ports for weed mini")?;
        let arg = |name: &str, off: u16| format!("-{name}={}", p + off);
        let mut child = Command::new(weed)
            .arg("mini")
            .arg(format!("-dir={}", data.display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
            .args([
                arg("master.port", 0),
                arg("volume.port", 1),
                arg("filer.port", 2),
                arg("s3.port", 3),
                arg("admin.port", 4),
                arg("master.port.grpc", 10),
                arg("volume.port.grpc", 11),
                arg("filer.port.grpc", 12),
                arg("s3.port.grpc", 13),
                arg("admin.port.grpc", 14),
            ])
            .args([
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
            ])
            .arg(format!("-bucket={bucket}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", weed.display()))?;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = child.try_wait() {
                break; // Exited early (a port taken meanwhile): another base.
            }
            if bucket_ready(p + 3, bucket) {
                return Ok((child, p + 3));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    Err(format!(
        "{} mini did not serve the bucket {bucket} within 30 s, three times",
        weed.display()
    ))
}
