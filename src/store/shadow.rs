//! A database file opened so that redb's writes stay in memory: the file itself is opened
//! read-only and is never written.
//!
//! Opening a store may need writes before anything can be read — redb's repair of a file not
//! closed cleanly, the replay of the write-ahead log's unapplied groups — and what opening finds
//! may then refuse the store. Done over a shadow first, those writes cannot change a store that
//! is refused (SPEC I9: a damaged store is left as it was found, so it can be examined or
//! restored), and a read-only open reads a store not closed cleanly without writing it.
//!
//! Memory: only the blocks redb writes are held (repair's allocator state, the replayed groups'
//! pages), never the file.

use redb::StorageBackend;

type BackendIoError = std::io::Error;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Granularity of the blocks held in memory.
const BLOCK: u64 = 4096;

/// A redb storage backend over a read-only file, its writes kept in memory.
#[derive(Debug)]
pub(super) struct ShadowFile {
    file: File,
    state: parking_lot::Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The length redb sees.
    len: u64,
    /// The prefix of the file still visible: a shrink hides the file's bytes past it for good
    /// (a later growth reads zeros there, as a real truncate would).
    visible: u64,
    /// Block number → the block as written (bytes past `len` are zero).
    blocks: BTreeMap<u64, Vec<u8>>,
}

impl ShadowFile {
    /// Shadows `file` (opened for reading).
    pub(super) fn new(file: File) -> std::io::Result<ShadowFile> {
        let len = file.metadata()?.len();
        Ok(ShadowFile {
            file,
            state: parking_lot::Mutex::new(State {
                len,
                visible: len,
                blocks: BTreeMap::new(),
            }),
        })
    }

    /// Reads `out.len()` bytes of the file at `offset`, zeros past what is visible.
    fn read_file(&self, visible: u64, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        out.fill(0);
        if offset >= visible {
            return Ok(());
        }
        let n = (visible - offset).min(out.len() as u64) as usize;
        self.file.read_exact_at(&mut out[..n], offset)
    }
}

impl StorageBackend for ShadowFile {
    fn len(&self) -> Result<u64, BackendIoError> {
        Ok(self.state.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        let st = self.state.lock();
        for s in spans(offset, out.len(), st.len)? {
            let dst = &mut out[(s.at - offset) as usize..][..s.n];
            match st.blocks.get(&s.block) {
                Some(b) => dst.copy_from_slice(&b[s.within..s.within + s.n]),
                None => self.read_file(st.visible, s.at, dst)?,
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        let mut st = self.state.lock();
        if len < st.len {
            st.visible = st.visible.min(len);
            let first_gone = len.div_ceil(BLOCK);
            st.blocks.split_off(&first_gone);
            if !len.is_multiple_of(BLOCK) {
                if let Some(b) = st.blocks.get_mut(&(len / BLOCK)) {
                    b[(len % BLOCK) as usize..].fill(0);
                }
            }
        }
        st.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        let mut st = self.state.lock();
        for Span {
            block,
            within,
            n,
            at,
        } in spans(offset, data.len(), st.len)?
        {
            if !st.blocks.contains_key(&block) {
                let mut b = vec![0u8; BLOCK as usize];
                self.read_file(st.visible, block * BLOCK, &mut b)?;
                st.blocks.insert(block, b);
            }
            let src = &data[(at - offset) as usize..][..n];
            if let Some(b) = st.blocks.get_mut(&block) {
                b[within..within + n].copy_from_slice(src);
            }
        }
        Ok(())
    }
}

/// The part of one block that a byte range `at..` covers.
struct Span {
    block: u64,
    /// Where in the block it starts.
    within: usize,
    /// How many bytes of the block it covers.
    n: usize,
    /// Its offset in the file.
    at: u64,
}

/// The `n` bytes at `offset` cut at block boundaries, in order; past `len` (the length redb
/// sees) is an unexpected end of file, as it would be for a real file.
fn spans(offset: u64, n: usize, len: u64) -> std::io::Result<impl Iterator<Item = Span>> {
    let end = offset.saturating_add(n as u64);
    if end > len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    let mut at = offset;
    Ok(std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let within = (at % BLOCK) as usize;
        let n = ((BLOCK - within as u64).min(end - at)) as usize;
        let span = Span {
            block: at / BLOCK,
            within,
            n,
            at,
        };
        at += n as u64;
        Some(span)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shadow reads as a file written the same way would, and the file is never changed.
    #[test]
    fn a_shadow_reads_like_the_file_would_and_leaves_it_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let original: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &original).unwrap();
        let shadow = ShadowFile::new(File::open(&path).unwrap()).unwrap();
        let mut model = original.clone();
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for _ in 0..500 {
            match next(4) {
                0 => {
                    let len = next(20_000);
                    shadow.set_len(len).unwrap();
                    model.resize(len as usize, 0);
                }
                1 if !model.is_empty() => {
                    let off = next(model.len() as u64);
                    let n = next((model.len() as u64 - off).min(9000) + 1);
                    let data: Vec<u8> = (0..n).map(|_| next(256) as u8).collect();
                    shadow.write(off, &data).unwrap();
                    model[off as usize..(off + n) as usize].copy_from_slice(&data);
                }
                _ if !model.is_empty() => {
                    let off = next(model.len() as u64);
                    let n = next(model.len() as u64 - off + 1);
                    let mut out = vec![0xAA; n as usize];
                    shadow.read(off, &mut out).unwrap();
                    assert_eq!(out, model[off as usize..(off + n) as usize]);
                }
                _ => {}
            }
            assert_eq!(shadow.len().unwrap(), model.len() as u64);
        }
        assert_eq!(std::fs::read(&path).unwrap(), original);
    }
}
