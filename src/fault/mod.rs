//! Fault injection: a plan that fails or "crashes" the N-th file operation, shared by a [`Vfs`]
//! wrapper (object, staging and index-snapshot files) and a redb [`StorageBackend`] wrapper (the
//! database file), so that one operation counter covers every write, sync, link, rename and remove
//! the engine makes.
//!
//! * `fail_at(n)`: operation n returns an I/O error; later operations work again (a transient
//!   error, like EIO on one fsync).
//! * `crash_at(n)`: operation n and every later one fails without touching the disk, as if the
//!   power had been cut just before it; [`FaultPlan::crash_now`] cuts it at once. Reopening the
//!   store with the real file system then shows what a crash at that point leaves behind.
//! * `fail_syncs(true)`: every sync fails until turned off; `fail_reads(true)`: every streamed
//!   read through the seam (`open_read`: the index snapshot) fails until turned off (`metadata`
//!   and whole small files, `read`, fail only after a crash). Reads are never counted as
//!   operations, so the indices of the crash sweeps stay those of the writes.
//! * `lose_unsynced_writes(true)`: the power-loss model. The plan then records what was made
//!   durable and what was not, and after the store is dropped one of two calls rewrites the real
//!   file system into a state a power cut could have left:
//!   * [`FaultPlan::apply_power_loss`], the pessimistic cut: every unsynced write and every
//!     unsynced directory entry is lost, nothing is torn;
//!   * [`FaultPlan::apply_power_loss_seeded`], a cut drawn from a seed: the database file keeps a
//!     random subset of the writes since its last sync, the last of them possibly torn (a prefix
//!     of whole 512-byte sectors); each file written through the seam keeps a random prefix of its
//!     unsynced bytes (a torn last write); and the directory entries changed since their
//!     directory's last sync (creates, links, renames, removes, new directories) survive up to a
//!     random point in the order they were made, the rest being undone newest first.
//!
//! What the model holds durable: file data once the file is synced (it follows the file, not its
//! name, so a hard link or rename carries it); a directory entry once its directory is synced
//! after the change; the database file as of its last successful sync. Permissions and times are
//! not modelled.

mod faulty_backend;
mod faulty_vfs;
mod power_loss;

pub(crate) use faulty_backend::FaultyBackend;
// Without `testing` the module is private and only the backend is used (by the store's open).
#[cfg_attr(not(feature = "testing"), allow(unused_imports))]
pub use faulty_vfs::FaultyVfs;
pub use power_loss::PowerLoss;

use parking_lot::Mutex;
use power_loss::{cut_db, cut_files, undo_entries, Durable, EntryChange, EntryKind, Rng};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// Which operation to fail, shared by every wrapper built from it.
#[derive(Debug, Default)]
pub struct FaultPlan {
    ops: AtomicU64,
    fail_at: AtomicU64,
    panic_at: AtomicU64,
    crash_at: AtomicU64,
    /// Database syncs to let pass before the one that is the crash point (0: none planned).
    crash_at_db_sync: AtomicU64,
    crashed: AtomicBool,
    fail_syncs: AtomicBool,
    fail_reads: AtomicBool,
    lose_unsynced: AtomicBool,
    durable: Mutex<Durable>,
}

impl FaultPlan {
    /// A plan that injects nothing (yet).
    pub fn new() -> Arc<Self> {
        Arc::new(FaultPlan::default())
    }
    /// Fails operation `n` (1-based) once.
    pub fn fail_at(&self, n: u64) {
        self.fail_at.store(n, SeqCst);
    }
    /// Panics at operation `n` (1-based), once: a bug in the code under the seam, or a caller's
    /// code reached at that step (SPEC I10). The panic unwinds quietly (no panic hook runs, as
    /// for `std::panic::resume_unwind`); its payload is a `String` that says what it interrupted.
    pub fn panic_at(&self, n: u64) {
        self.panic_at.store(n, SeqCst);
    }
    /// Disarms a panic planned with [`FaultPlan::panic_at`]; returns whether it came.
    pub fn disarm_panic(&self) -> bool {
        let at = self.panic_at.swap(0, SeqCst);
        at != 0 && self.ops.load(SeqCst) >= at
    }
    /// Crashes at operation `n` (1-based): it and all later operations fail.
    pub fn crash_at(&self, n: u64) {
        self.crash_at.store(n, SeqCst);
    }
    /// Crashes at the `n`-th database sync from now (1: the next): its writes have reached the
    /// page cache, the sync does not complete. With the seeded cut this is where an
    /// unacknowledged commit most often survives whole.
    pub fn crash_at_db_sync(&self, n: u64) {
        self.crash_at_db_sync.store(n, SeqCst);
    }
    /// Crashes now: every later operation fails, as after the power was cut.
    pub fn crash_now(&self) {
        self.crashed.store(true, SeqCst);
    }
    /// Makes every sync fail (or work again).
    pub fn fail_syncs(&self, on: bool) {
        self.fail_syncs.store(on, SeqCst);
    }
    /// Makes every read through the seam fail (or work again).
    pub fn fail_reads(&self, on: bool) {
        self.fail_reads.store(on, SeqCst);
    }
    /// Models a power cut that loses what was not made durable (see the module docs). Turn it
    /// on before the store is opened.
    pub fn lose_unsynced_writes(&self, on: bool) {
        self.lose_unsynced.store(on, SeqCst);
    }

    /// The pessimistic power cut: throws away, on the real file system, everything that was not
    /// made durable, tearing nothing. Call it after the store is dropped and before it is
    /// reopened. `db_file` is the store's database file; every other database file opened
    /// under the plan (the write-ahead log) is cut at the path it was opened at.
    pub fn apply_power_loss(&self, db_file: &Path) -> io::Result<()> {
        self.cut(db_file, None).map(|_| ())
    }

    /// A power cut drawn from `seed` (see the module docs): the same seed on the same history
    /// gives the same disk. Call it after the store is dropped and before it is reopened.
    pub fn apply_power_loss_seeded(&self, db_file: &Path, seed: u64) -> io::Result<PowerLoss> {
        self.cut(db_file, Some(Rng(seed)))
    }

    fn cut(&self, db_file: &Path, mut rng: Option<Rng>) -> io::Result<PowerLoss> {
        let d = std::mem::take(&mut *self.durable.lock());
        let mut report = PowerLoss::default();
        let kept = cut_files(&d, rng.as_mut(), &mut report)?;
        undo_entries(d.entries, &kept, rng.as_mut(), &mut report)?;
        for (i, db) in d.dbs.into_iter().enumerate() {
            if let Some(image) = db.image {
                let image = cut_db(image, db.pending, rng.as_mut(), &mut report);
                // The first database opened under the plan is the store's own.
                let path = if i == 0 { db_file } else { db.path.as_path() };
                std::fs::write(path, image)?;
            }
        }
        Ok(report)
    }

    fn modelling(&self) -> bool {
        self.lose_unsynced.load(SeqCst)
    }

    /// How many operations have been attempted.
    pub fn ops(&self) -> u64 {
        self.ops.load(SeqCst)
    }
    /// Whether the crash point was reached.
    pub fn crashed(&self) -> bool {
        self.crashed.load(SeqCst)
    }

    fn check(&self, what: &str, is_sync: bool) -> io::Result<()> {
        if self.crashed.load(SeqCst) {
            return Err(io::Error::other(format!(
                "injected crash: {what} after the cut"
            )));
        }
        let n = self.ops.fetch_add(1, SeqCst) + 1;
        if self.crash_at.load(SeqCst) == n {
            self.crashed.store(true, SeqCst);
            return Err(io::Error::other(format!(
                "injected crash at operation {n} ({what})"
            )));
        }
        if self.panic_at.load(SeqCst) == n {
            std::panic::resume_unwind(Box::new(format!(
                "injected panic at operation {n} ({what})"
            )));
        }
        if self.fail_at.load(SeqCst) == n {
            return Err(io::Error::other(format!(
                "injected failure of operation {n} ({what})"
            )));
        }
        if is_sync && self.fail_syncs.load(SeqCst) {
            return Err(io::Error::other(format!("injected sync failure ({what})")));
        }
        Ok(())
    }

    /// Reads are not operations (not counted, never the crash point), but they fail after a
    /// crash and while `fail_reads` is on.
    fn check_read(&self, what: &str) -> io::Result<()> {
        if self.crashed.load(SeqCst) {
            return Err(io::Error::other(format!(
                "injected crash: {what} after the cut"
            )));
        }
        if self.fail_reads.load(SeqCst) {
            return Err(io::Error::other(format!("injected read failure ({what})")));
        }
        Ok(())
    }

    /// Stats and small whole-file reads fail only after a crash.
    fn check_stat(&self) -> io::Result<()> {
        if self.crashed.load(SeqCst) {
            return Err(io::Error::other("injected crash: stat after the cut"));
        }
        Ok(())
    }

    fn record_entry(&self, dir: Option<&Path>, kind: EntryKind) {
        let dir = dir.map(Path::to_path_buf).unwrap_or_default();
        self.durable.lock().entries.push(EntryChange {
            dir,
            durable: false,
            kind,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::power_loss::{DbChange, SECTOR};
    use super::*;
    use crate::vfs::{RealVfs, Vfs};
    use std::io::Write;

    fn modelled() -> (tempfile::TempDir, Arc<FaultPlan>, FaultyVfs) {
        let dir = tempfile::tempdir().unwrap();
        let plan = FaultPlan::new();
        plan.lose_unsynced_writes(true);
        let vfs = FaultyVfs::new(Arc::new(RealVfs), plan.clone());
        (dir, plan, vfs)
    }

    #[test]
    fn the_pessimistic_cut_loses_unsynced_data_and_entries_and_keeps_synced_ones() {
        let (dir, plan, vfs) = modelled();
        let d = dir.path();
        let write = |path: &Path, bytes: &[u8], sync: bool| {
            let mut f = vfs.create_new(path).unwrap();
            f.write_all(bytes).unwrap();
            if sync {
                f.sync().unwrap();
            }
        };
        // Durable: written, synced, directory synced.
        write(&d.join("kept"), b"durable", true);
        vfs.create_dir_all(&d.join("sub")).unwrap();
        vfs.sync_dir(d).unwrap();
        // A durable entry with a synced prefix and an unsynced tail.
        let mut f = vfs.create_new(&d.join("sub/file")).unwrap();
        f.write_all(b"abc").unwrap();
        f.sync().unwrap();
        f.write_all(b"def").unwrap();
        drop(f);
        vfs.sync_dir(&d.join("sub")).unwrap();
        // Synced data, but neither its create nor its rename over `kept` is durable.
        write(&d.join("tmp"), b"new", true);
        vfs.rename(&d.join("tmp"), &d.join("kept")).unwrap();
        plan.crash_now();
        assert!(vfs.create_new(&d.join("late")).is_err(), "crashed");
        plan.apply_power_loss(&d.join("no-db")).unwrap();

        assert_eq!(std::fs::read(d.join("kept")).unwrap(), b"durable");
        assert!(
            !d.join("tmp").exists(),
            "the rename was undone, tmp's create too"
        );
        assert_eq!(std::fs::read(d.join("sub/file")).unwrap(), b"abc");
        assert!(!d.join("late").exists());
    }

    #[test]
    fn an_unsynced_remove_is_undone_and_a_new_directory_without_parent_sync_vanishes() {
        let (dir, plan, vfs) = modelled();
        let d = dir.path();
        std::fs::write(d.join("old"), b"old bytes").unwrap();
        vfs.remove(&d.join("old")).unwrap();
        vfs.create_dir_all(&d.join("a/b")).unwrap();
        let mut f = vfs.create_new(&d.join("a/b/f")).unwrap();
        f.write_all(b"x").unwrap();
        f.sync().unwrap();
        drop(f);
        vfs.sync_dir(&d.join("a/b")).unwrap();
        plan.apply_power_loss(&d.join("no-db")).unwrap();
        assert_eq!(std::fs::read(d.join("old")).unwrap(), b"old bytes");
        assert!(!d.join("a").exists(), "a's entry in d was never synced");
    }

    #[test]
    fn a_seeded_cut_is_reproducible_and_sometimes_tears() {
        let run = |seed: u64| {
            let (dir, plan, vfs) = modelled();
            let d = dir.path();
            for i in 0..20 {
                let mut f = vfs.create_new(&d.join(format!("f{i}"))).unwrap();
                f.write_all(&[b'a'; 1000]).unwrap();
                if i % 2 == 0 {
                    f.sync().unwrap();
                }
            }
            let report = plan
                .apply_power_loss_seeded(&d.join("no-db"), seed)
                .unwrap();
            let sizes: Vec<Option<u64>> = (0..20)
                .map(|i| {
                    std::fs::metadata(d.join(format!("f{i}")))
                        .ok()
                        .map(|m| m.len())
                })
                .collect();
            (report, sizes)
        };
        assert_eq!(run(7), run(7));
        let torn = (0..20u64).any(|s| run(s).0.files_torn > 0);
        assert!(torn, "no seed tore a file");
        let kept_some = (0..20u64).any(|s| run(s).0.entries_kept > 0);
        assert!(kept_some, "no seed kept an unsynced entry");
    }

    #[test]
    fn a_torn_database_write_keeps_whole_sectors_of_the_last_kept_write() {
        let mut report = PowerLoss::default();
        for seed in 0..64 {
            let pending = vec![
                DbChange::Write {
                    offset: 0,
                    data: vec![1; 2048],
                },
                DbChange::Write {
                    offset: 4096,
                    data: vec![2; 2048],
                },
            ];
            let image = cut_db(vec![0; 8192], pending, Some(&mut Rng(seed)), &mut report);
            assert_eq!(image.len(), 8192);
            for s in image.chunks(SECTOR) {
                assert!(
                    s.iter().all(|&b| b == s[0]),
                    "a sector was split: seed {seed}"
                );
            }
        }
        assert!(report.db_torn);
    }
}
