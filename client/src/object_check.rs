//! The size and CRC32 check of an object read through the server (SPEC I2), the one the engine's
//! `Snapshot::read_object` makes in-process. An object is streamed, never held whole, so the
//! check is made on the way: the server compares the file's length with the entry's before it
//! answers (a file of the wrong length cannot even be framed by the entry's `Content-Length`),
//! and the client computes the CRC32 of the bytes as they arrive and compares it at the end.
//! Either side that finds damage fails with the engine's own `Corrupt` error and message.

use oncelake::Entry;
use std::io::Write;

/// The engine's error for an object of `len` bytes with CRC32 `crc` where the manifest records
/// `entry`'s, or `None` when they match. The message is the one `oncelake::check_object` gives
/// for the same bytes (a test below holds them together), so a damaged object reads the same
/// through a server as in-process.
pub fn damaged(entry: &Entry, len: u64, crc: u32) -> Option<oncelake::Error> {
    if len == entry.object.size && crc == entry.object.crc32 {
        return None;
    }
    Some(oncelake::Error::Corrupt {
        path: object_path(entry).into(),
        detail: format!(
            "object of unit {:?} has {len} bytes / crc32 {crc:08x}, the manifest records {} / {:08x}",
            entry.unit, entry.object.size, entry.object.crc32
        ),
    })
}

/// The object's path in the store, as the engine names it in its errors.
fn object_path(entry: &Entry) -> String {
    let hex = entry.object.id.to_hex();
    format!("objects/{}/{hex}", &hex[..2])
}

/// A writer that counts and checksums what passes through it.
pub struct Checking<'w> {
    inner: &'w mut dyn Write,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<'w> Checking<'w> {
    pub fn new(inner: &'w mut dyn Write) -> Self {
        Checking {
            inner,
            crc: crc32fast::Hasher::new(),
            len: 0,
        }
    }

    /// The engine's error if what passed through is not `entry`'s object.
    pub fn damaged(self, entry: &Entry) -> Option<oncelake::Error> {
        damaged(entry, self.len, self.crc.finalize())
    }
}

impl Write for Checking<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        // Only what the inner writer took: `io::copy` hands the rest to the next call.
        self.crc.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The server's check before it answers with an object: a file whose length is not the entry's
/// is damaged (its CRC32 is computed, streaming, only then, for the engine's message). The
/// CRC32 of a file of the right length is the client's to check as the bytes arrive.
pub fn check_length(file: &std::fs::File, entry: &Entry) -> oncelake::Result<()> {
    use std::io::Read;
    let io = |e| oncelake::Error::Io {
        context: format!("read object {}", entry.object.id),
        source: e,
    };
    let len = file.metadata().map_err(io)?.len();
    if len == entry.object.size {
        return Ok(());
    }
    // On damage the file is not streamed, so reading it through the caller's handle (and
    // moving its offset) costs nothing.
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut read = 0u64;
    let mut f = file;
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        crc.update(&buf[..n]);
        read += n as u64;
    }
    match damaged(entry, read, crc.finalize()) {
        Some(e) => Err(e),
        // The file changed length between the stat and the read: report what was read.
        None => Err(oncelake::Error::Corrupt {
            path: object_path(entry).into(),
            detail: format!(
                "object of unit {:?} changed while it was read ({len} bytes, then {read})",
                entry.unit
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `damaged` says what the engine's `check_object` says for the same bytes.
    #[test]
    fn damaged_matches_the_engines_check() {
        let dir = tempfile::tempdir().unwrap();
        let store = oncelake::Store::open(dir.path().join("s")).unwrap();
        store.put("u/1", 1, b"the object's bytes").unwrap();
        let entry = store.snapshot().unwrap().get("u/1").unwrap().unwrap();
        for bad in [&b"the object's bytez"[..], b"short", b""] {
            let want = oncelake::check_object(&entry, bad).unwrap_err().to_string();
            let got = damaged(&entry, bad.len() as u64, crc32fast::hash(bad))
                .unwrap()
                .to_string();
            assert_eq!(got, want);
        }
        let good = b"the object's bytes";
        assert!(damaged(&entry, good.len() as u64, crc32fast::hash(good)).is_none());
    }
}
