//! The concurrent stages of a publish: footers read ahead on a few threads, and each chunk of
//! built versions linked (several threads, one directory each) and then appended on threads of
//! their own, so reading, building, linking and appending overlap.
//!
//! The order rules of a publish do not depend on the threads: versions are built in commit
//! order on the caller's thread; a chunk's versions are appended only once every data file of
//! the chunk is linked and its directories synced; chunks are appended in order, each version
//! created exclusively and durable before the next. A stage that fails ends the stages after it
//! at a chunk boundary: what is appended is whole versions whose files exist.

use super::footer::{Footer, FooterReader, ObjectDir, ObjectRel};
use super::version::{FormatLog, TableCommit, TableSchema};
use super::{io_err, TableDef, TableResult};
use crate::object::ObjectId;
use crate::schema::log::LogEntry;
use crate::store::Store;
use crate::vfs::{Vfs, VfsDir};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

/// The footers of one commit's objects, by object.
pub(crate) type Footers = HashMap<ObjectId, Result<Footer, String>>;

/// Threads for reading footers and for linking: the machine's cores, at most 8.
fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
}

/// Footers read ahead, commit by commit, by reader threads; the builder takes them in commit
/// order as they become ready. A commit the readers never reached (they stopped, or a reader
/// died) is read by the caller of [`FooterFeed::take`].
pub(crate) struct FooterFeed<'c> {
    commits: &'c [(u64, u64, Vec<LogEntry>)],
    objects: &'c ObjectDir,
    slots: Mutex<Vec<Option<Footers>>>,
    ready: Condvar,
    next: AtomicUsize,
    readers: AtomicUsize,
    stop: AtomicBool,
    own: Mutex<FooterReader>,
}

/// Below this many objects footers are read by the builder as it goes: threads cost more.
/// Debug builds (the test suite) read ahead from 2 objects on, so the tests run the threads.
const READ_AHEAD_MIN: usize = if cfg!(debug_assertions) { 2 } else { 64 };

impl<'c> FooterFeed<'c> {
    pub(crate) fn new(commits: &'c [(u64, u64, Vec<LogEntry>)], objects: &'c ObjectDir) -> Self {
        FooterFeed {
            commits,
            objects,
            slots: Mutex::new(vec![None; commits.len()]),
            ready: Condvar::new(),
            next: AtomicUsize::new(0),
            readers: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            own: Mutex::new(FooterReader::default()),
        }
    }

    /// Starts the reader threads in `scope` when there are enough objects to be worth them.
    pub(crate) fn start<'s>(&'s self, scope: &'s std::thread::Scope<'s, '_>) {
        let objects: usize = self.commits.iter().map(|(_, _, es)| es.len()).sum();
        let n = threads();
        if objects < READ_AHEAD_MIN || n == 1 {
            return;
        }
        self.readers.store(n, Ordering::SeqCst);
        for _ in 0..n {
            scope.spawn(move || {
                // Counts the reader out however it ends, so a waiting builder never waits for it.
                let _out = ReaderOut(self);
                let mut r = FooterReader::default();
                while !self.stop.load(Ordering::Relaxed) {
                    let i = self.next.fetch_add(1, Ordering::Relaxed);
                    let Some((_, _, entries)) = self.commits.get(i) else {
                        break;
                    };
                    let footers = read_all(self.objects, &mut r, entries);
                    self.slots.lock()[i] = Some(footers);
                    self.ready.notify_all();
                }
            });
        }
    }

    /// Tells the readers to stop after the commit each is reading.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// The footers of commit `i`: read ahead, or read now when no reader will deliver them.
    pub(crate) fn take(&self, i: usize) -> Footers {
        let mut slots = self.slots.lock();
        loop {
            if let Some(f) = slots[i].take() {
                return f;
            }
            let claimed = i < self.next.load(Ordering::Relaxed);
            if !claimed || self.readers.load(Ordering::SeqCst) == 0 {
                break;
            }
            self.ready.wait(&mut slots);
        }
        drop(slots);
        // Claim it, so a reader that starts now skips past it (it would only repeat the work).
        let _ = self.next.fetch_max(i + 1, Ordering::Relaxed);
        read_all(self.objects, &mut self.own.lock(), &self.commits[i].2)
    }
}

struct ReaderOut<'a, 'c>(&'a FooterFeed<'c>);

impl Drop for ReaderOut<'_, '_> {
    fn drop(&mut self) {
        let _slots = self.0.slots.lock();
        self.0.readers.fetch_sub(1, Ordering::SeqCst);
        self.0.ready.notify_all();
    }
}

fn read_all(objects: &ObjectDir, r: &mut FooterReader, entries: &[LogEntry]) -> Footers {
    let mut out = Footers::with_capacity(entries.len());
    for e in entries {
        out.entry(e.object.id)
            .or_insert_with(|| r.read_object(objects, &e.object.id, e.object.size));
    }
    out
}

/// A chunk of built versions and the schema they are published with.
pub(crate) type Chunk = (Vec<TableCommit>, TableSchema);

/// What the appending stage did.
#[derive(Default)]
pub(crate) struct Appended {
    pub versions: u64,
    pub adds: u64,
    pub removes: u64,
}

/// The linking and appending stages, each a thread, fed chunk by chunk by the builder.
pub(crate) struct Stages<'s> {
    to_link: Option<mpsc::SyncSender<Chunk>>,
    linker: std::thread::ScopedJoinHandle<'s, TableResult<()>>,
    appender: std::thread::ScopedJoinHandle<'s, (Box<dyn FormatLog>, TableResult<Appended>)>,
}

impl<'s> Stages<'s> {
    /// Starts the stages for table `def`; `log` is appended to by the appending stage only.
    pub(crate) fn start(
        scope: &'s std::thread::Scope<'s, '_>,
        store: &'s Store,
        def: &'s TableDef,
        mut log: Box<dyn FormatLog>,
    ) -> Self {
        // One chunk waiting per stage: the builder runs at most about two chunks ahead.
        let (to_link, linked_rx) = mpsc::sync_channel::<Chunk>(1);
        let (to_append, append_rx) = mpsc::sync_channel::<Chunk>(1);
        let linker = scope.spawn(move || {
            for chunk in linked_rx {
                link(store, def, &chunk.0)?;
                if to_append.send(chunk).is_err() {
                    break; // the appender failed; its error is the one reported
                }
            }
            Ok(())
        });
        let appender = scope.spawn(move || {
            let mut done = Appended::default();
            for (commits, schema) in append_rx {
                for c in &commits {
                    if let Err(e) = log.append(c, &schema) {
                        return (log, Err(e));
                    }
                    done.versions += 1;
                    done.adds += c.adds.len() as u64;
                    done.removes += c.removes.len() as u64;
                }
            }
            (log, Ok(done))
        });
        Stages {
            to_link: Some(to_link),
            linker,
            appender,
        }
    }

    /// Hands a chunk to the linking stage; `false` when a stage has failed (the builder stops).
    pub(crate) fn send(&self, chunk: Chunk) -> bool {
        self.to_link.as_ref().is_some_and(|t| t.send(chunk).is_ok())
    }

    /// Waits for every chunk sent to be linked and appended. Returns the log, what was
    /// appended, and the first stage's error.
    pub(crate) fn finish(mut self) -> (Box<dyn FormatLog>, TableResult<Appended>) {
        drop(self.to_link.take());
        let linked = self
            .linker
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        let (log, appended) = self
            .appender
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        // A link error stops the chunks after it; the appender's own error comes first in time.
        let result = appended.and_then(|a| linked.map(|()| a));
        (log, result)
    }
}

/// Hard-links the data files the versions of `chunk` add into the table and makes the links
/// durable (each directory synced once), before any version that names them exists. A link made
/// ahead of its version is harmless: it is the file that version will name, and
/// `plan::resolve_priors` looks only at entries the log already includes. The order of the
/// links among themselves does not matter (no version of the chunk exists before all are
/// synced), so the directories are linked on several threads.
pub(crate) fn link(store: &Store, def: &TableDef, chunk: &[TableCommit]) -> TableResult<()> {
    let root = store.table_dir(&def.name);
    let vfs = store.core().vfs();
    let objects_root = &store.core().stager.objects;
    // Grouped by the data file's directory as a string: no path built or compared per link.
    let mut by_dir: BTreeMap<&str, Vec<(ObjectId, &str)>> = BTreeMap::new();
    for a in chunk.iter().flat_map(|c| &c.adds) {
        let (dir, name) = a.file.path.rsplit_once('/').unwrap_or(("", &a.file.path));
        by_dir.entry(dir).or_default().push((a.object, name));
    }
    let groups: BTreeMap<PathBuf, Group<'_>> = by_dir
        .into_iter()
        .map(|(dir, links)| {
            let dir = if dir.is_empty() {
                root.clone()
            } else {
                root.join(dir)
            };
            (dir.clone(), Group { dir, links })
        })
        .collect();
    let mut dirs = BTreeSet::new();
    for dir in groups.keys() {
        vfs.create_dir_all(dir)
            .map_err(|e| io_err(format!("create {}", dir.display()), e))?;
        // A new partition directory is durable once each directory above it is synced.
        let mut d = dir.as_path();
        while d.starts_with(&root) && dirs.insert(d.to_path_buf()) {
            match d.parent() {
                Some(p) => d = p,
                None => break,
            }
        }
    }
    // Each group's directory is synced by the thread that linked it, the directories above
    // (new partition directories' parents) here, after.
    for dir in groups.keys() {
        dirs.remove(dir);
    }
    // Links go relative to open directories where the Vfs offers them: the kernel then resolves
    // `xx/<hash>` and the file's name, not both whole paths (the walks were ~9% of a publish).
    // Without a handle (the fault model, no descriptor to spare) each link goes by path.
    let objects = Objects {
        root: objects_root,
        dir: vfs.open_dir(objects_root).ok().flatten(),
    };
    link_groups(vfs.as_ref(), &objects, groups.into_values().collect())?;
    for dir in &dirs {
        vfs.sync_dir(dir)
            .map_err(|e| io_err(format!("sync {}", dir.display()), e))?;
    }
    Ok(())
}

/// Below this many links a chunk is linked on one thread: threads cost more than they save.
/// Debug builds (the test suite) link on threads from 2 links on, so the tests run them.
const PARALLEL_LINKS: usize = if cfg!(debug_assertions) { 2 } else { 512 };

/// The store's object directory, and a handle on it when the Vfs offers one.
struct Objects<'a> {
    root: &'a Path,
    dir: Option<Arc<dyn VfsDir>>,
}

/// The links into one directory: `(object, data file name)` pairs.
struct Group<'a> {
    dir: PathBuf,
    links: Vec<(ObjectId, &'a str)>,
}

/// Makes every link of `groups` and syncs each group's directory. Links into one directory
/// serialise in the kernel (it holds the directory's lock for the lookup and the insert), so
/// each thread takes whole directories: the largest first, each to the thread with the fewest
/// links so far. A thread syncs a directory as soon as it has linked it, so the syncs overlap
/// the other threads' links.
fn link_groups(
    vfs: &dyn Vfs,
    objects: &Objects<'_>,
    mut groups: Vec<Group<'_>>,
) -> TableResult<()> {
    let total: usize = groups.iter().map(|g| g.links.len()).sum();
    let n = threads().min(groups.len());
    if n <= 1 || total < PARALLEL_LINKS {
        return groups.iter().try_for_each(|g| link_group(vfs, objects, g));
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.links.len()));
    let mut shares: Vec<(usize, Vec<&Group<'_>>)> = (0..n).map(|_| (0, Vec::new())).collect();
    for g in &groups {
        if let Some(least) = shares.iter_mut().min_by_key(|(k, _)| *k) {
            least.0 += g.links.len();
            least.1.push(g);
        }
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .iter()
            .map(|(_, share)| {
                s.spawn(move || share.iter().try_for_each(|g| link_group(vfs, objects, g)))
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

fn link_group(vfs: &dyn Vfs, objects: &Objects<'_>, g: &Group<'_>) -> TableResult<()> {
    let sync_err = |e| io_err(format!("sync {}", g.dir.display()), e);
    let held = match &objects.dir {
        Some(from) => vfs
            .open_dir(&g.dir)
            .ok()
            .flatten()
            .map(|to| (from.as_ref(), to)),
        None => None,
    };
    let by_path = |rel: &ObjectRel, name: &str| {
        let (from, to) = (objects.root.join(rel.as_str()), g.dir.join(name));
        vfs.link_no_replace(&from, &to)
            .map(drop)
            .map_err(|e| io_err(format!("link {} to {}", from.display(), to.display()), e))
    };
    let Some((from, to)) = held else {
        for (id, name) in &g.links {
            by_path(&ObjectRel::of(id), name)?;
        }
        return vfs.sync_dir(&g.dir).map_err(sync_err);
    };
    for (id, name) in &g.links {
        let rel = ObjectRel::of(id);
        match to.link_from(from, Path::new(rel.as_str()), name) {
            Ok(_) => {}
            // This Vfs links by path only; the path link reports its own error.
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => by_path(&rel, name)?,
            Err(e) => {
                let (from, to) = (objects.root.join(rel.as_str()), g.dir.join(name));
                return Err(io_err(
                    format!("link {} to {}", from.display(), to.display()),
                    e,
                ));
            }
        }
    }
    to.sync().map_err(sync_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectMeta;

    fn commits(n: u64, per: u64) -> Vec<(u64, u64, Vec<LogEntry>)> {
        (0..n)
            .map(|c| {
                let entries = (0..per)
                    .map(|u| LogEntry {
                        unit: format!("t/u{u}"),
                        source_version: c,
                        revision: 0,
                        // Objects that do not exist: each footer is an error naming the read.
                        object: ObjectMeta {
                            id: ObjectId::of(format!("{c}/{u}").as_bytes()),
                            size: 100,
                            crc32: 0,
                        },
                        token: None,
                    })
                    .collect();
                (c + 1, 0, entries)
            })
            .collect()
    }

    /// The model: commit i's footers are exactly its objects, however they were read.
    fn check(feed: &FooterFeed<'_>, commits: &[(u64, u64, Vec<LogEntry>)]) {
        for (i, (_, _, entries)) in commits.iter().enumerate() {
            let got = feed.take(i);
            let want: BTreeSet<ObjectId> = entries.iter().map(|e| e.object.id).collect();
            assert_eq!(
                got.keys().copied().collect::<BTreeSet<_>>(),
                want,
                "commit {i}"
            );
            assert!(got
                .values()
                .all(|r| r.as_ref().is_err_and(|e| e.contains("read"))));
        }
    }

    /// Links through held directories and by path give the same files: each data file is the
    /// object (same inode), an existing link is kept, and the directories' handles are used only
    /// where the Vfs offers them.
    #[test]
    fn links_relative_to_held_directories_are_the_objects() {
        use crate::vfs::RealVfs;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let root = &store.core().stager.objects;
        let ids: Vec<ObjectId> = (0..6u8)
            .map(|i| store.stage_bytes(&[i; 20]).unwrap().id())
            .collect();
        for (held, sub) in [(true, "held"), (false, "paths")] {
            let names: Vec<String> = ids.iter().map(|id| format!("{id}.parquet")).collect();
            let group = Group {
                dir: dir.path().join(sub).join("p=1"),
                links: ids
                    .iter()
                    .copied()
                    .zip(names.iter().map(|n| n.as_str()))
                    .collect(),
            };
            std::fs::create_dir_all(&group.dir).unwrap();
            let objects = Objects {
                root,
                dir: if held {
                    RealVfs.open_dir(root).unwrap()
                } else {
                    None
                },
            };
            assert_eq!(objects.dir.is_some(), held && cfg!(target_os = "linux"));
            // Twice: the second run finds every link made and keeps it.
            for _ in 0..2 {
                link_group(&RealVfs, &objects, &group).unwrap();
            }
            for (id, name) in &group.links {
                let file = group.dir.join(name);
                let file = &file;
                assert_eq!(
                    std::fs::read(file).unwrap(),
                    std::fs::read(store.object_path(id)).unwrap()
                );
                #[cfg(unix)]
                {
                    use std::os::unix::fs::MetadataExt;
                    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
                    assert_eq!(ino(file), ino(&store.object_path(id)));
                }
            }
            let n = std::fs::read_dir(&group.dir).unwrap().count();
            assert_eq!(n, ids.len());
        }
        // An object that is not there is an error naming both paths, not a silent skip.
        let missing = ObjectId::of(b"never staged");
        let group = Group {
            dir: dir.path().join("held").join("p=1"),
            links: vec![(missing, "x.parquet")],
        };
        let objects = Objects {
            root,
            dir: RealVfs.open_dir(root).unwrap(),
        };
        let e = link_group(&RealVfs, &objects, &group)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&missing.to_hex()) && e.contains("x.parquet"),
            "{e}"
        );
    }

    #[test]
    fn the_feed_delivers_each_commit_whether_or_not_a_reader_reached_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let commits = commits(40, 7);
        let objects = ObjectDir::hold(store.core().stager.objects.clone());
        // Read ahead by threads, taken in order.
        let feed = FooterFeed::new(&commits, &objects);
        std::thread::scope(|s| {
            feed.start(s);
            check(&feed, &commits);
        });
        // Stopped before reading anything: the builder reads every commit itself.
        let feed = FooterFeed::new(&commits, &objects);
        std::thread::scope(|s| {
            feed.stop();
            feed.start(s);
            check(&feed, &commits);
        });
    }
}
