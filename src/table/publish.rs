//! Publishing (SPEC R21): the change feed since a table's published position becomes the table's
//! next versions, one per store commit that touched the prefix, each carrying the last seq it
//! includes. Format-independent: a format is a [`FormatLog`] (Delta today; Iceberg would be one
//! more module implementing it).
//!
//! Exactly-once comes from the format's own log: the position is read from it, every version is
//! a pure function of the store's log, and a version is created exclusively. A publish cut short
//! anywhere resumes where the log says, and writes what an uninterrupted one would have.

use super::footer::{FooterReader, ObjectDir};
use super::layout::{data_file, partition_of, Partition};
use super::plan::{resolve_priors, PriorFiles};
use super::stages::{FooterFeed, Footers, Stages};
use super::version::{FileAdd, FileRef, FormatLog, TableCommit, TableSchema};
use super::{PublishReport, Skipped, TableDef, TableError, TableFormat, TableResult};
use crate::schema::log::{LogEntry, RecordBody};
use crate::snapshot::Snapshot;
use crate::store::Store;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

fn open_format(store: &Store, def: &TableDef) -> TableResult<Box<dyn FormatLog>> {
    match def.format {
        TableFormat::Delta => Ok(Box::new(super::delta::DeltaLog::open(store, def)?)),
    }
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

fn publish(store: &Store, def: &TableDef) -> TableResult<PublishReport> {
    let lock = table_lock(store.table_dir(&def.name));
    let _guard = lock.lock();
    // A lake node's table is the lake's: caught up from it, built here, published into it.
    #[cfg(feature = "lake")]
    if let Some(lake) = &store.core().lake {
        return super::lake::publish_into_lake(store, lake, def, publish_here);
    }
    publish_here(store, def)
}

/// Publishes `def` into the store's own table directory (the caller holds the table's lock).
pub(super) fn publish_here(store: &Store, def: &TableDef) -> TableResult<PublishReport> {
    let log = open_format(store, def)?;
    let pos = log.position();
    let snap = store.snapshot()?;
    let commits = touching(&snap, def, pos.seq)?;
    #[cfg(feature = "lake")]
    let _fetched = super::lake::fetch_objects(store, &commits)?;
    let touched: BTreeSet<&str> = commits
        .iter()
        .flat_map(|(_, _, es)| es.iter().map(|e| e.unit.as_str()))
        .collect();
    let mut priors = resolve_priors(store, &snap, def, pos, &touched)?;
    let objects = ObjectDir::hold(store.core().stager.objects.clone());
    let mut p = Publisher {
        objects: &objects,
        def,
        snap: &snap,
        schema: log.schema().cloned(),
        footers: FooterReader::default(),
        same_schema: None,
        report: PublishReport {
            table: def.name.clone(),
            app_id: format!("oncelake:{}:{}", super::owner(store), def.name),
            ..PublishReport::default()
        },
    };
    let feed = FooterFeed::new(&commits, &objects);
    let (log, appended, stop) = std::thread::scope(|s| {
        feed.start(s);
        let stages = Stages::start(s, store, def, log);
        let stop = p.build_all(&commits, &feed, &mut priors, &stages);
        feed.stop();
        let (log, appended) = stages.finish();
        (log, appended, stop)
    });
    let appended = appended?;
    p.report.versions = appended.versions;
    p.report.adds = appended.adds;
    p.report.removes = appended.removes;
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
/// are synced once, not once per version. Chunks are linked while the next is built and the
/// one before is appended, so a chunk is a fraction of a large publish. Debug builds (the test
/// suite) use chunks of a few files, so every multi-version publish of a test crosses chunk
/// boundaries and its cuts fall between chunks too.
const CHUNK_FILES: usize = if cfg!(debug_assertions) { 4 } else { 1 << 14 };

/// The per-publish state: the schema (known once a version exists) and the report.
struct Publisher<'a> {
    objects: &'a ObjectDir,
    def: &'a TableDef,
    snap: &'a Snapshot,
    schema: Option<TableSchema>,
    /// Reads a footer the feed did not deliver.
    footers: FooterReader,
    /// Footer fields last found equal to the table's schema.
    same_schema: Option<Arc<Vec<Value>>>,
    report: PublishReport,
}

impl Publisher<'_> {
    /// Builds the versions of `commits` in order and hands them to `stages` a chunk at a time.
    /// A unit that cannot be published ends the chunk it is in: the versions before it are
    /// published, nothing of it; its error is returned. Stops early when a stage failed.
    fn build_all(
        &mut self,
        commits: &Touching,
        feed: &FooterFeed<'_>,
        priors: &mut PriorFiles,
        stages: &Stages<'_>,
    ) -> Option<TableError> {
        let mut chunk: Vec<TableCommit> = Vec::new();
        let mut files = 0;
        let mut stop = None;
        for (i, (seq, time_ms, entries)) in commits.iter().enumerate() {
            let footers = feed.take(i);
            match self.build(*seq, *time_ms, entries, &footers, priors) {
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
                if !self.send(stages, &mut chunk) {
                    return stop;
                }
                files = 0;
            }
        }
        self.send(stages, &mut chunk);
        stop
    }

    /// Sends the built versions to the stages (empties `chunk`); `false` when a stage failed.
    fn send(&self, stages: &Stages<'_>, chunk: &mut Vec<TableCommit>) -> bool {
        match &self.schema {
            // build() returns a version only once a schema is known.
            Some(schema) if !chunk.is_empty() => {
                stages.send((std::mem::take(chunk), schema.clone()))
            }
            _ => true,
        }
    }

    /// The next version from one store commit; `None` while nothing publishable has been seen
    /// (a table's first version needs a schema).
    fn build(
        &mut self,
        seq: u64,
        time_ms: u64,
        entries: &[LogEntry],
        footers: &Footers,
        priors: &mut PriorFiles,
    ) -> TableResult<Option<TableCommit>> {
        let mut order: Vec<&str> = Vec::new();
        let mut after: HashMap<&str, Option<FileAdd>> = HashMap::new();
        for e in entries {
            let placed = self.place(seq, e, footers)?;
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
            let file = new.as_ref().map(|a| a.file.clone());
            // resolve_priors put every touched unit in: no key to allocate per change.
            match priors.get_mut(unit) {
                Some(slot) => *slot = file,
                None => {
                    priors.insert(unit.to_string(), file);
                }
            }
            commit.adds.extend(new);
        }
        Ok(Some(commit))
    }

    /// What an entry becomes in the table: its data file, or nothing when its object cannot be
    /// published but a later entry of the unit supersedes it.
    fn place(&mut self, seq: u64, e: &LogEntry, footers: &Footers) -> TableResult<Option<FileAdd>> {
        let part = self.partition(seq, e)?;
        let read = match footers.get(&e.object.id) {
            Some(r) => r.clone(),
            None => self
                .footers
                .read_object(self.objects, &e.object.id, e.object.size),
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
                    self.report.skipped.push(Skipped {
                        unit: e.unit.clone(),
                        seq,
                    });
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
}
