//! How a client finds the server of a store: two files in the store directory, both owner-only
//! (0600). `serve.sock` is the Unix socket (its permissions are the access control); `serve.json`
//! says where the server listens, its pid and — for TCP — the bearer token. Both are written
//! only after the server holds the store's lock, and are removed when it stops; files left by
//! a killed server are stale and removed by the next server (which can only start once the lock
//! is free, so it never removes a live server's files). A client that finds them but gets no
//! answer treats the store as not served. Before it sends the token or any data, it checks that
//! the server answering there is the server of this store directory (the `identity` module).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The Unix socket's file name inside the store directory.
pub const SOCKET_FILE: &str = "serve.sock";
/// The address file's name inside the store directory.
pub const INFO_FILE: &str = "serve.json";

/// What `serve.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServeInfo {
    /// `unix:PATH` or `tcp:HOST:PORT`.
    pub address: String,
    /// The server's process id.
    pub pid: u32,
    /// The bearer token every TCP request must carry (`Authorization: Bearer ...`); `None` for
    /// the Unix socket, where the file permissions are the access control.
    pub token: Option<String>,
    /// The key of the server's identity proof (the `identity` module), 64 hex digits: a client
    /// sends its token or data only to a server that proves it knows this key and holds this
    /// store directory. `None` in a file of an older server, which cannot prove anything.
    #[serde(default)]
    pub key: Option<String>,
    /// The store id of the served store.
    #[serde(default)]
    pub store_id: Option<u64>,
}

/// Where a server can be reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A Unix domain socket.
    Unix(PathBuf),
    /// Loopback (or given) TCP.
    Tcp(String),
}

impl ServeInfo {
    /// The parsed address.
    pub fn parsed(&self) -> Option<Address> {
        if let Some(p) = self.address.strip_prefix("unix:") {
            Some(Address::Unix(PathBuf::from(p)))
        } else {
            self.address
                .strip_prefix("tcp:")
                .map(|a| Address::Tcp(a.to_string()))
        }
    }
}

/// Reads a store's `serve.json`, if there is one that parses.
pub fn read_info(store: &Path) -> Option<ServeInfo> {
    let text = std::fs::read_to_string(store.join(INFO_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes `serve.json` owner-only, atomically (a temporary file renamed over it).
pub fn write_info(store: &Path, info: &ServeInfo) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = store.join(format!("{INFO_FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let text = serde_json::to_string(info).map_err(std::io::Error::other)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, store.join(INFO_FILE))
}

/// Removes the socket and address files (missing ones are fine).
pub fn remove_files(store: &Path) {
    for name in [SOCKET_FILE, INFO_FILE] {
        let _ = std::fs::remove_file(store.join(name));
    }
}

/// A fresh bearer token: 32 random bytes from the OS, hex.
pub fn new_token() -> std::io::Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(crate::wire::to_hex(&b))
}
