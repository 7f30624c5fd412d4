//! The power-loss model: what was made durable and what was not (the database file's writes since
//! its last sync, each file's unsynced bytes, the directory entries changed since their directory's
//! last sync), and the cuts that rewrite the real file system into a state a power cut could have
//! left.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// The unit a torn database write keeps: whole sectors, as disks write them atomically.
pub(super) const SECTOR: usize = 512;

/// What the power-loss model knows about durability.
#[derive(Debug, Default)]
pub(super) struct Durable {
    /// Each database file (the store's and its write-ahead log's), by path.
    pub(super) dbs: Vec<DbModel>,
    /// Files created through the Vfs: each path's file ("inode").
    pub(super) names: HashMap<PathBuf, u64>,
    /// Per file created through the Vfs: bytes written, and how many of them are synced.
    pub(super) files: HashMap<u64, FileData>,
    pub(super) next_file: u64,
    /// Directory entry changes through the Vfs, oldest first.
    pub(super) entries: Vec<EntryChange>,
}

/// One database file as the power-loss model sees it.
#[derive(Debug)]
pub(super) struct DbModel {
    pub(super) path: PathBuf,
    /// The file as of its last successful sync (or as opened).
    pub(super) image: Option<Vec<u8>>,
    /// The writes and resizes since then, in order.
    pub(super) pending: Vec<DbChange>,
}

#[derive(Debug)]
pub(super) enum DbChange {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FileData {
    pub(super) written: u64,
    pub(super) synced: u64,
}

/// A file's bytes and permissions, kept to undo a remove or a replacing rename.
#[derive(Debug)]
pub(super) struct Saved {
    pub(super) bytes: Vec<u8>,
    pub(super) mode: u32,
    /// The file it was, when it was created through the Vfs (its unsynced tail is lost too).
    pub(super) file: Option<u64>,
}

#[derive(Debug)]
pub(super) struct EntryChange {
    /// The directory whose sync makes the change durable.
    pub(super) dir: PathBuf,
    pub(super) durable: bool,
    pub(super) kind: EntryKind,
}

#[derive(Debug)]
pub(super) enum EntryKind {
    Create(PathBuf),
    Link(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<Saved>,
    },
    Remove(PathBuf, Saved),
    Mkdir(PathBuf),
}

/// What a seeded power cut did (for the simulation's log and its counters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PowerLoss {
    /// Database writes and resizes since the last sync that were lost.
    pub db_changes_lost: usize,
    /// Database writes and resizes since the last sync that were kept.
    pub db_changes_kept: usize,
    /// Whether a kept database write was torn (only a prefix of its sectors kept).
    pub db_torn: bool,
    /// Files that lost all or part of their unsynced bytes.
    pub files_cut: usize,
    /// Files that kept a part, but not all, of their unsynced bytes.
    pub files_torn: usize,
    /// Directory entry changes undone (not yet durable, past the cut).
    pub entries_undone: usize,
    /// Directory entry changes that were not durable but survived.
    pub entries_kept: usize,
}

/// SplitMix64: small, fast, and the same sequence on every platform for a seed.
#[derive(Debug, Clone)]
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..=n`.
    fn upto(&mut self, n: u64) -> u64 {
        match n.checked_add(1) {
            Some(m) => self.next() % m,
            None => self.next(),
        }
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
    /// How much of `n` unsynced units survive: none, all, or a uniform part, a third each.
    fn portion(&mut self, n: u64) -> u64 {
        match self.next() % 3 {
            0 => 0,
            1 => n,
            _ => self.upto(n),
        }
    }
}

/// Cuts every file written through the seam back to its synced bytes plus (seeded) a random
/// prefix of the rest; returns the length each file keeps.
pub(super) fn cut_files(
    d: &Durable,
    mut rng: Option<&mut Rng>,
    report: &mut PowerLoss,
) -> io::Result<HashMap<u64, u64>> {
    let mut kept = HashMap::new();
    let mut ids: Vec<_> = d.files.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let f = d.files[&id];
        let unsynced = f.written - f.synced;
        let extra = match rng.as_deref_mut() {
            Some(r) => r.portion(unsynced),
            None => 0,
        };
        kept.insert(id, f.synced + extra);
        if extra < unsynced {
            report.files_cut += 1;
            if extra > 0 {
                report.files_torn += 1;
            }
        }
    }
    let mut names: Vec<_> = d.names.iter().collect();
    names.sort();
    for (path, id) in names {
        let len = kept[id];
        if d.files[id].written > len {
            truncate(path, len)?;
        }
    }
    Ok(kept)
}

/// Undoes the directory entry changes that are not durable: all of them, or (seeded) those after
/// a random point in the order they were made, newest first.
pub(super) fn undo_entries(
    entries: Vec<EntryChange>,
    kept: &HashMap<u64, u64>,
    rng: Option<&mut Rng>,
    report: &mut PowerLoss,
) -> io::Result<()> {
    let volatile = entries.iter().filter(|e| !e.durable).count() as u64;
    let survive = match rng {
        Some(r) => r.portion(volatile),
        None => 0,
    };
    let mut seen = 0u64;
    let mut undo = Vec::new();
    for e in entries {
        if e.durable {
            continue;
        }
        seen += 1;
        if seen <= survive {
            report.entries_kept += 1;
        } else {
            undo.push(e);
        }
    }
    for e in undo.into_iter().rev() {
        report.entries_undone += 1;
        match e.kind {
            EntryKind::Create(p) | EntryKind::Link(p) => ignore_missing(std::fs::remove_file(p))?,
            EntryKind::Mkdir(p) => ignore_missing(std::fs::remove_dir_all(p))?,
            EntryKind::Remove(p, saved) => restore(&p, &saved, kept)?,
            EntryKind::Rename { from, to, replaced } => {
                ignore_missing(std::fs::rename(&to, &from))?;
                if let Some(saved) = replaced {
                    restore(&to, &saved, kept)?;
                }
            }
        }
    }
    Ok(())
}

/// The database file a cut leaves: the synced image plus (seeded) a random subset of the changes
/// since, the last kept write possibly torn to a prefix of its sectors.
pub(super) fn cut_db(
    mut image: Vec<u8>,
    pending: Vec<DbChange>,
    rng: Option<&mut Rng>,
    report: &mut PowerLoss,
) -> Vec<u8> {
    let Some(rng) = rng else {
        report.db_changes_lost = pending.len();
        return image;
    };
    let mode = rng.next() % 3;
    let mut kept: Vec<DbChange> = Vec::new();
    for c in pending {
        // Mode 0 keeps none, mode 1 every one, mode 2 each with probability 1/2.
        let keep = match mode {
            0 => false,
            1 => true,
            _ => rng.chance(2),
        };
        if keep {
            kept.push(c);
        } else {
            report.db_changes_lost += 1;
        }
    }
    report.db_changes_kept = kept.len();
    let tear = rng.chance(2);
    let last_write = kept
        .iter()
        .rposition(|c| matches!(c, DbChange::Write { .. }));
    for (i, c) in kept.into_iter().enumerate() {
        match c {
            DbChange::SetLen(len) => image.resize(len as usize, 0),
            DbChange::Write { offset, mut data } => {
                if tear && Some(i) == last_write {
                    let sectors = data.len().div_ceil(SECTOR) as u64;
                    let keep = (rng.upto(sectors.saturating_sub(1)) as usize) * SECTOR;
                    data.truncate(keep.min(data.len()));
                    report.db_torn = true;
                }
                let end = offset as usize + data.len();
                if image.len() < end {
                    image.resize(end, 0);
                }
                image[offset as usize..end].copy_from_slice(&data);
            }
        }
    }
    image
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Cuts a file that may be read-only (as published objects are) to `len` bytes.
fn truncate(path: &Path, len: u64) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let perm = match std::fs::metadata(path) {
        Ok(m) => m.permissions(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .set_len(len)?;
    std::fs::set_permissions(path, perm)
}

/// Puts a removed or replaced file back, with only the bytes the cut keeps of it.
fn restore(path: &Path, saved: &Saved, kept: &HashMap<u64, u64>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let len = saved
        .file
        .and_then(|id| kept.get(&id))
        .map_or(saved.bytes.len(), |&k| (k as usize).min(saved.bytes.len()));
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.is_file() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))?;
        }
    }
    std::fs::write(path, &saved.bytes[..len])?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(saved.mode))
}

/// A file's bytes and mode before a remove or a replacing rename, or `None` if it is not there.
pub(super) fn save(path: &Path, file: Option<u64>) -> io::Result<Option<Saved>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m.permissions().mode(),
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(Saved {
        bytes: std::fs::read(path)?,
        mode,
        file,
    }))
}
