//! Publishing (SPEC R21): the change feed since a table's published position becomes the table's
//! next versions, one per store commit that touched the prefix, each carrying the last seq it
//! includes. Format-independent: a format is a [`FormatLog`] (Delta today; Iceberg would be one
//! more module implementing it).
//!
//! Exactly-once comes from the format's own log: the position is read from it, every version is
//! a pure function of the store's log, and a version is created exclusively. A publish cut short
//! anywhere resumes where the log says, and writes what an uninterrupted one would have.

use super::footer::{Footer, FooterReader};
use super::layout::{data_file, partition_of, Partition};
use super::plan::{resolve_priors, PriorFiles};
use super::position::Position;
use super::{io_err, TableDef, TableError, TableFormat, TableResult};
use crate::schema::log::{LogEntry, RecordBody};
use crate::snapshot::Snapshot;
use crate::store::Store;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// A data file of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileRef {
    /// Relative to the table root, as on disk.
    pub path: String,
    /// Partition values.
    pub partition: Vec<(String, String)>,
    /// Bytes.
    pub size: u64,
}

/// A data file a version adds.
#[derive(Clone, Debug)]
pub(crate) struct FileAdd {
    pub file: FileRef,
    pub object: crate::ObjectId,
    pub num_records: i64,
}

/// One table version: the net change of one store commit.
#[derive(Clone, Debug)]
pub(crate) struct TableCommit {
    /// The store commit (the last seq the version includes).
    pub seq: u64,
    /// Its commit time, ms since the epoch: every time the version records.
    pub time_ms: u64,
    pub removes: Vec<FileRef>,
    pub adds: Vec<FileAdd>,
}

/// A table's data columns (Delta struct fields) and partition columns.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TableSchema {
    pub fields: Vec<Value>,
    pub partition_columns: Vec<String>,
}

/// A table format's log, as a publisher needs it.
pub(crate) trait FormatLog {
    /// Where the log says the table is published to.
    fn position(&self) -> Position;
    /// The schema the table was published with (`None` before its first version).
    fn schema(&self) -> Option<&TableSchema>;
    /// Appends the next version, created exclusively and durable on return.
    fn append(&mut self, commit: &TableCommit, schema: &TableSchema) -> TableResult<()>;
}

fn open_format(store: &Store, def: &TableDef) -> TableResult<Box<dyn FormatLog>> {
    match def.format {
        TableFormat::Delta => Ok(Box::new(super::delta::DeltaLog::open(store, def)?)),
    }
}

/// What one publish did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// The table.
    pub table: String,
    /// The `txn` appId its versions carry (`oncelake:<store id>:<table>`).
    pub app_id: String,
    /// Versions written by this publish.
    pub versions: u64,
    /// Data files added and removed by them.
    pub adds: u64,
    /// Data files removed.
    pub removes: u64,
    /// Entries left out because their object could not be published and a later entry of the
    /// unit supersedes it: `(unit, seq)`.
    pub skipped: Vec<(String, u64)>,
    /// The table's newest version after the publish (`None`: nothing published yet).
    pub version: Option<u64>,
    /// The last store seq it includes.
    pub seq: u64,
}

impl Store {
    /// Publishes table `name` up to the newest commit (SPEC R21). Safe to run at any time, from
    /// any thread, any number of times: what is published already is never written again.
    pub fn publish_table(&self, name: &str) -> TableResult<PublishReport> {
        let def = self.table(name)?;
        publish(self, &def)
    }

    /// Publishes every table; stops at the first that fails.
    pub fn publish_tables(&self) -> TableResult<Vec<PublishReport>> {
        self.tables()?.iter().map(|d| publish(self, d)).collect()
    }
}

/// One publisher per table directory in this process.
fn table_lock(dir: PathBuf) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    LOCKS
        .get_or_init(Default::default)
        .lock()
        .entry(dir)
        .or_default()
        .clone()
}

/// The store commits after `seq` that touch the table: (seq, time, its entries under the prefix).
type Touching = Vec<(u64, u64, Vec<LogEntry>)>;

fn touching(snap: &Snapshot, def: &TableDef, seq: u64) -> TableResult<Touching> {
    let mut out = Vec::new();
    for rec in snap.changes_since(seq)? {
        let rec = rec?;
        if let RecordBody::Commit { entries } = rec.body {
            let mine: Vec<LogEntry> = entries
                .into_iter()
                .filter(|e| def.contains(&e.unit))
                .collect();
            if !mine.is_empty() {
                out.push((rec.seq, rec.time_ms, mine));
            }
        }
    }
    Ok(out)
}

/// Reads the footers of every object in `commits` on a few threads: reading footers is most of
/// a publish's work, and each is independent.
fn prefetch(store: &Store, commits: &Touching) -> HashMap<crate::ObjectId, Result<Footer, String>> {
    let mut seen = std::collections::HashSet::new();
    let objects: Vec<(crate::ObjectId, u64)> = commits
        .iter()
        .flat_map(|(_, _, es)| es.iter())
        .filter(|e| seen.insert(e.object.id))
        .map(|e| (e.object.id, e.object.size))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    if objects.len() < 64 || threads == 1 {
        return HashMap::new(); // read as they come: not worth the threads
    }
    let chunk = objects.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = objects
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    let mut r = FooterReader::default();
                    part.iter()
                        .map(|(id, size)| (*id, r.read(&store.object_path(id), *size)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

fn publish(store: &Store, def: &TableDef) -> TableResult<PublishReport> {
    let lock = table_lock(store.table_dir(&def.name));
    let _guard = lock.lock();
    let mut log = open_format(store, def)?;
    let pos = log.position();
    let snap = store.snapshot()?;
    let commits = touching(&snap, def, pos.seq)?;
    let touched: BTreeSet<&str> = commits
        .iter()
        .flat_map(|(_, _, es)| es.iter().map(|e| e.unit.as_str()))
        .collect();
    let mut priors = resolve_priors(store, &snap, def, pos, &touched)?;
    let mut p = Publisher {
        store,
        def,
        snap: &snap,
        schema: log.schema().cloned(),
        footers: FooterReader::default(),
        prefetched: prefetch(store, &commits),
        same_schema: None,
        report: PublishReport {
            table: def.name.clone(),
            app_id: format!("oncelake:{}:{}", store.core().store_id, def.name),
            ..PublishReport::default()
        },
    };
    // Versions are built a chunk at a time, their data files linked with one sync per
    // directory for the whole chunk, then appended one by one. A unit that cannot be published
    // ends the chunk: the versions before it are published, nothing of it.
    let mut chunk: Vec<TableCommit> = Vec::new();
    let mut files = 0;
    let mut stop = None;
    for (seq, time_ms, entries) in &commits {
        match p.build(*seq, *time_ms, entries, &mut priors) {
            Ok(Some(commit)) => {
                files += commit.adds.len();
                chunk.push(commit);
            }
            Ok(None) => {}
            Err(e) => {
                stop = Some(e);
                break;
            }
        }
        if files >= CHUNK_FILES {
            p.publish_chunk(log.as_mut(), &mut chunk)?;
            files = 0;
        }
    }
    p.publish_chunk(log.as_mut(), &mut chunk)?;
    if let Some(e) = stop {
        return Err(e);
    }
    let end = log.position();
    p.report.version = end.version;
    p.report.seq = end.seq;
    Ok(p.report)
}

/// The most data files one chunk of versions links before its versions are appended: bounds
/// the memory a publish holds and how long its first version waits, while a chunk's directories
/// are synced once, not once per version.
const CHUNK_FILES: usize = 1 << 16;

/// The per-publish state: the schema (known once a version exists) and the report.
struct Publisher<'a> {
    store: &'a Store,
    def: &'a TableDef,
    snap: &'a Snapshot,
    schema: Option<TableSchema>,
    footers: FooterReader,
    /// Footers read ahead, in parallel, for the objects this publish adds.
    prefetched: HashMap<crate::ObjectId, Result<Footer, String>>,
    /// Footer fields last found equal to the table's schema.
    same_schema: Option<Arc<Vec<Value>>>,
    report: PublishReport,
}

impl Publisher<'_> {
    /// The next version from one store commit; `None` while nothing publishable has been seen
    /// (a table's first version needs a schema).
    fn build(
        &mut self,
        seq: u64,
        time_ms: u64,
        entries: &[LogEntry],
        priors: &mut PriorFiles,
    ) -> TableResult<Option<TableCommit>> {
        let mut order: Vec<&str> = Vec::new();
        let mut after: HashMap<&str, Option<FileAdd>> = HashMap::new();
        for e in entries {
            let placed = self.place(seq, e)?;
            if !after.contains_key(e.unit.as_str()) {
                order.push(&e.unit);
            }
            after.insert(&e.unit, placed);
        }
        if self.schema.is_none() {
            return Ok(None);
        }
        let mut commit = TableCommit {
            seq,
            time_ms,
            removes: Vec::new(),
            adds: Vec::new(),
        };
        for unit in order {
            let new = after.remove(unit).flatten();
            let old = priors.get(unit).cloned().flatten();
            if old.as_ref() == new.as_ref().map(|a| &a.file) {
                continue;
            }
            commit.removes.extend(old);
            priors.insert(unit.to_string(), new.as_ref().map(|a| a.file.clone()));
            commit.adds.extend(new);
        }
        Ok(Some(commit))
    }

    /// What an entry becomes in the table: its data file, or nothing when its object cannot be
    /// published but a later entry of the unit supersedes it.
    fn place(&mut self, seq: u64, e: &LogEntry) -> TableResult<Option<FileAdd>> {
        let part = self.partition(seq, e)?;
        let path = self.store.object_path(&e.object.id);
        let read = match self.prefetched.get(&e.object.id) {
            Some(r) => r.clone(),
            None => self.footers.read(&path, e.object.size),
        };
        let footer = read.and_then(|f| match &self.schema {
            // Footers of one reader with one schema share its fields: compared once.
            _ if self
                .same_schema
                .as_ref()
                .is_some_and(|a| Arc::ptr_eq(a, &f.fields)) =>
            {
                Ok(f)
            }
            Some(s) if s.fields[..] != f.fields[..] => Err(format!(
                "its Parquet schema {} differs from the table's {}",
                Value::Array(f.fields.to_vec()),
                Value::Array(s.fields.clone())
            )),
            Some(_) => {
                self.same_schema = Some(f.fields.clone());
                Ok(f)
            }
            None => Ok(f),
        });
        let footer = match footer {
            Ok(f) => f,
            Err(reason) => {
                let superseded = self.snap.get(&e.unit)?.is_some_and(|cur| cur.seq > seq);
                if superseded {
                    self.report.skipped.push((e.unit.clone(), seq));
                    return Ok(None);
                }
                return Err(TableError::BadUnit {
                    table: self.def.name.clone(),
                    unit: e.unit.clone(),
                    seq,
                    reason,
                });
            }
        };
        if self.schema.is_none() {
            self.schema = Some(TableSchema {
                fields: footer.fields.to_vec(),
                partition_columns: part.columns(),
            });
        }
        Ok(Some(FileAdd {
            file: FileRef {
                path: data_file(&part, &e.unit, &e.object.id),
                partition: part.values,
                size: e.object.size,
            },
            object: e.object.id,
            num_records: footer.num_records,
        }))
    }

    /// The unit's partition, checked against the table's partition columns.
    fn partition(&self, seq: u64, e: &LogEntry) -> TableResult<Partition> {
        let part = partition_of(&self.def.prefix, &e.unit).ok_or_else(|| TableError::BadUnit {
            table: self.def.name.clone(),
            unit: e.unit.clone(),
            seq,
            reason: "a partition segment does not URL-unquote to UTF-8".into(),
        })?;
        if let Some(s) = &self.schema {
            if !s
                .partition_columns
                .iter()
                .eq(part.values.iter().map(|(k, _)| k))
            {
                return Err(TableError::BadPartitions {
                    table: self.def.name.clone(),
                    unit: e.unit.clone(),
                    seq,
                    found: part.columns().join(", "),
                    expected: s.partition_columns.join(", "),
                });
            }
        }
        Ok(part)
    }

    /// Links the data files of `chunk`, then appends its versions in order; empties it.
    fn publish_chunk(
        &mut self,
        log: &mut dyn FormatLog,
        chunk: &mut Vec<TableCommit>,
    ) -> TableResult<()> {
        self.link(chunk)?;
        for commit in chunk.drain(..) {
            let schema = self.schema.as_ref().ok_or_else(|| {
                // build() returns a commit only once a schema is known.
                TableError::Store(crate::Error::InvalidRequest(
                    "invariant: a table version is built only with a known schema".into(),
                ))
            })?;
            log.append(&commit, schema)?;
            self.report.versions += 1;
            self.report.adds += commit.adds.len() as u64;
            self.report.removes += commit.removes.len() as u64;
        }
        Ok(())
    }

    /// Hard-links the data files the versions of `chunk` add into the table and makes the links
    /// durable (each directory synced once), before any version that names them exists. A link
    /// made ahead of its version is harmless: it is the file that version will name, and
    /// [`resolve_priors`] looks only at entries the log already includes. The order of the links
    /// among themselves does not matter (no version exists before all are synced), so the
    /// directories are linked on several threads.
    fn link(&self, chunk: &[TableCommit]) -> TableResult<()> {
        let root = self.store.table_dir(&self.def.name);
        let vfs = self.store.core().vfs();
        let mut groups: BTreeMap<PathBuf, Vec<(PathBuf, PathBuf)>> = BTreeMap::new();
        for a in chunk.iter().flat_map(|c| &c.adds) {
            let to = root.join(&a.file.path);
            let dir = to.parent().map_or(root.clone(), |p| p.to_path_buf());
            groups
                .entry(dir)
                .or_default()
                .push((self.store.object_path(&a.object), to));
        }
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
        link_groups(vfs.as_ref(), groups.into_values().collect())?;
        for dir in &dirs {
            vfs.sync_dir(dir)
                .map_err(|e| io_err(format!("sync {}", dir.display()), e))?;
        }
        Ok(())
    }
}

/// Below this many links a chunk is linked on the calling thread: threads cost more than they
/// save.
const PARALLEL_LINKS: usize = 512;

/// Makes every `(object, data file)` link of `groups` (one group per directory). Links into one
/// directory serialise in the kernel (it holds the directory's lock for the lookup and the
/// insert), so each thread takes whole directories: the largest first, each to the thread with
/// the fewest links so far.
fn link_groups(
    vfs: &dyn crate::vfs::Vfs,
    mut groups: Vec<Vec<(PathBuf, PathBuf)>>,
) -> TableResult<()> {
    let total: usize = groups.iter().map(Vec::len).sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(groups.len());
    if threads <= 1 || total < PARALLEL_LINKS {
        return groups
            .iter()
            .flatten()
            .try_for_each(|(f, t)| link_one(vfs, f, t));
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.len()));
    let mut shares: Vec<(usize, Vec<&[(PathBuf, PathBuf)]>)> = vec![(0, Vec::new()); threads];
    for g in &groups {
        if let Some(least) = shares.iter_mut().min_by_key(|(n, _)| *n) {
            least.0 += g.len();
            least.1.push(g);
        }
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .iter()
            .map(|(_, share)| {
                s.spawn(move || {
                    share
                        .iter()
                        .flat_map(|g| g.iter())
                        .try_for_each(|(f, t)| link_one(vfs, f, t))
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

fn link_one(vfs: &dyn crate::vfs::Vfs, from: &Path, to: &Path) -> TableResult<()> {
    vfs.link_no_replace(from, to)
        .map(drop)
        .map_err(|e| io_err(format!("link {} to {}", from.display(), to.display()), e))
}
