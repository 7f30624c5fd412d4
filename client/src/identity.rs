//! How a client knows that it reached the server of *its* store (SPEC R20) before it sends the
//! bearer token or a byte of data.
//!
//! An address outlives its server: a killed server leaves `serve.json` behind, and its TCP port
//! is anyone's to take; a copy of a served store directory (`cp -a`) carries the original's
//! `serve.json`, which names the original's server. So a client asks first, without the token:
//! `GET /v1/identity?nonce=N`. The server answers its store id, its pid, the path and the device
//! and inode of the store directory it opened (and whose lock it holds), and a keyed BLAKE3 MAC
//! over the client's nonce and those facts. The key is random per server start and written only
//! into `serve.json` (owner-only, like the token), so only a process that could read that file
//! can answer, and the nonce makes each answer good for one question only. The client then checks
//! the facts against its own: the store id and pid in `serve.json`, and the device and inode of
//! the directory it was asked to use — a copy has other ones, a moved or symlinked store the same.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The route of the identity question (answered without the bearer token).
pub const PATH: &str = "/v1/identity";

/// Bytes of the key, the nonce and the MAC.
const LEN: usize = 32;

/// Separates this MAC from any other use of the key.
const DOMAIN: &[u8] = b"oncelake serve identity v1\0";

/// A directory's identity on this node: a copy of it has another, a rename or a symlink to it the
/// same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirId {
    /// The device (`st_dev`).
    pub dev: u64,
    /// The inode (`st_ino`).
    pub ino: u64,
}

impl DirId {
    /// The identity of `dir` (symlinks followed).
    pub fn of(dir: &Path) -> std::io::Result<DirId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir)?;
        Ok(DirId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// The server's answer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdentityW {
    /// The store id of the store the server holds.
    pub store_id: u64,
    /// The server's process id.
    pub pid: u32,
    /// The store directory the server opened, as it names it.
    pub path: String,
    /// That directory's identity.
    pub dir: DirId,
    /// The keyed BLAKE3 MAC over the nonce and the facts above, 64 hex digits.
    pub mac: String,
}

/// The MAC of an answer to `nonce`.
fn mac(
    key: &[u8; LEN],
    nonce: &[u8; LEN],
    store_id: u64,
    pid: u32,
    path: &str,
    dir: DirId,
) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(DOMAIN);
    h.update(nonce);
    h.update(&store_id.to_le_bytes());
    h.update(&pid.to_le_bytes());
    h.update(&dir.dev.to_le_bytes());
    h.update(&dir.ino.to_le_bytes());
    // Last, so its length needs no prefix.
    h.update(path.as_bytes());
    h.finalize()
}

/// 32 random bytes from the OS (a key or a nonce).
pub fn random() -> std::io::Result<[u8; LEN]> {
    let mut b = [0u8; LEN];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(b)
}

/// Exactly 32 bytes from 64 hex digits.
pub fn parse32(hex: &str) -> Option<[u8; LEN]> {
    let b = hex.as_bytes();
    if b.len() != 2 * LEN {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(out)
}

/// What the server of a store is: its half of the handshake.
pub struct Identity {
    key: [u8; LEN],
    store_id: u64,
    pid: u32,
    path: String,
    dir: DirId,
}

impl Identity {
    /// The identity of this process serving the store `store_id` opened at `dir`, with a fresh
    /// key (its hex goes into `serve.json`).
    pub fn new(store_id: u64, dir: &Path) -> std::io::Result<Identity> {
        Ok(Identity {
            key: random()?,
            store_id,
            pid: std::process::id(),
            path: dir.to_string_lossy().into_owned(),
            dir: DirId::of(dir)?,
        })
    }

    /// The key, hex, for `serve.json`.
    pub fn key_hex(&self) -> String {
        crate::wire::to_hex(&self.key)
    }

    /// The answer to the question with this query string (`nonce=HEX`), or why it is malformed.
    pub fn answer(&self, query: Option<&str>) -> Result<IdentityW, String> {
        let nonce = query
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("nonce="))
            .and_then(parse32)
            .ok_or_else(|| format!("{PATH} needs nonce=HEX: 32 random bytes as 64 hex digits"))?;
        let mac = mac(
            &self.key,
            &nonce,
            self.store_id,
            self.pid,
            &self.path,
            self.dir,
        );
        Ok(IdentityW {
            store_id: self.store_id,
            pid: self.pid,
            path: self.path.clone(),
            dir: self.dir,
            mac: mac.to_hex().to_string(),
        })
    }
}

/// What a client expects of the server of its store: from `serve.json` (the key, the store id,
/// the pid) and from the store directory itself (its identity).
#[derive(Clone, Debug)]
pub struct Expected {
    key: [u8; LEN],
    store_id: Option<u64>,
    pid: u32,
    dir: DirId,
}

/// How an answer compares with what the client expects.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The server of this store.
    Ours,
    /// The genuine server of another directory with this `serve.json`: the original of a copy.
    OtherDirectory {
        /// The directory it serves.
        path: String,
    },
    /// Not proved: what was found instead.
    NotProved(String),
}

impl Expected {
    /// What the server named by `serve.json`'s `info` must prove for the store directory `dir`;
    /// `Err` says why nothing can be proved (a file written by a server without a key).
    pub fn new(info: &crate::discovery::ServeInfo, dir: DirId) -> Result<Expected, String> {
        let key = info.key.as_deref().and_then(parse32).ok_or_else(|| {
            "serve.json holds no identity key, so no server can prove it holds the store \
             (written by an older `oncelake serve`?)"
                .to_string()
        })?;
        Ok(Expected {
            key,
            store_id: info.store_id,
            pid: info.pid,
            dir,
        })
    }

    /// Checks the answer to `nonce`.
    pub fn check(&self, nonce: &[u8; LEN], a: &IdentityW) -> Verdict {
        let proved = parse32(&a.mac).is_some_and(|m| {
            // `blake3::Hash` compares in constant time.
            blake3::Hash::from_bytes(m) == mac(&self.key, nonce, a.store_id, a.pid, &a.path, a.dir)
        });
        if !proved {
            return Verdict::NotProved(
                "it could not prove that it knows the secret in serve.json (its answer's MAC is \
                 wrong)"
                    .into(),
            );
        }
        if self.store_id.is_some_and(|id| id != a.store_id) || a.pid != self.pid {
            return Verdict::NotProved(format!(
                "it holds store {:016x} as pid {}, but serve.json names store {} and pid {}",
                a.store_id,
                a.pid,
                self.store_id
                    .map_or_else(|| "?".into(), |id| format!("{id:016x}")),
                self.pid
            ));
        }
        if a.dir != self.dir {
            return Verdict::OtherDirectory {
                path: a.path.clone(),
            };
        }
        Verdict::Ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::ServeInfo;

    fn pair() -> (tempfile::TempDir, Identity, ServeInfo) {
        let d = tempfile::tempdir().unwrap();
        let id = Identity::new(42, d.path()).unwrap();
        let info = ServeInfo {
            address: "tcp:127.0.0.1:1".into(),
            pid: std::process::id(),
            token: Some("t".into()),
            key: Some(id.key_hex()),
            store_id: Some(42),
        };
        (d, id, info)
    }

    fn ask(id: &Identity, nonce: &[u8; LEN]) -> IdentityW {
        id.answer(Some(&format!("nonce={}", crate::wire::to_hex(nonce))))
            .unwrap()
    }

    #[test]
    fn the_server_proves_its_store_and_nothing_else_passes() {
        let (d, id, info) = pair();
        let want = Expected::new(&info, DirId::of(d.path()).unwrap()).unwrap();
        let nonce = random().unwrap();
        let a = ask(&id, &nonce);
        assert_eq!(want.check(&nonce, &a), Verdict::Ours);
        // An answer replayed for another nonce, or with any fact changed, proves nothing.
        let other = random().unwrap();
        assert!(matches!(want.check(&other, &a), Verdict::NotProved(_)));
        for forged in [
            IdentityW {
                store_id: 43,
                ..a.clone()
            },
            IdentityW {
                pid: a.pid + 1,
                ..a.clone()
            },
            IdentityW {
                path: "/elsewhere".into(),
                ..a.clone()
            },
            IdentityW {
                dir: DirId { dev: 1, ino: 2 },
                ..a.clone()
            },
            IdentityW {
                mac: "00".repeat(LEN),
                ..a.clone()
            },
            IdentityW {
                mac: "not hex".into(),
                ..a.clone()
            },
        ] {
            assert!(
                matches!(want.check(&nonce, &forged), Verdict::NotProved(_)),
                "{forged:?}"
            );
        }
        // Another key (a server that never wrote this serve.json) proves nothing either.
        let stranger = Identity::new(42, d.path()).unwrap();
        assert!(matches!(
            want.check(&nonce, &ask(&stranger, &nonce)),
            Verdict::NotProved(_)
        ));
    }

    #[test]
    fn a_copy_of_the_directory_is_told_from_the_original() {
        let (_d, id, info) = pair();
        let copy = tempfile::tempdir().unwrap();
        let want = Expected::new(&info, DirId::of(copy.path()).unwrap()).unwrap();
        let nonce = random().unwrap();
        assert!(matches!(
            want.check(&nonce, &ask(&id, &nonce)),
            Verdict::OtherDirectory { .. }
        ));
    }

    #[test]
    fn malformed_questions_and_keyless_files_are_refused() {
        let (d, id, mut info) = pair();
        for q in [
            None,
            Some(""),
            Some("nonce=12"),
            Some("nonce=zz"),
            Some(&*"nonce=é".repeat(40)),
        ] {
            assert!(id.answer(q).is_err(), "{q:?}");
        }
        info.key = None;
        assert!(Expected::new(&info, DirId::of(d.path()).unwrap()).is_err());
    }
}
