//! Lake tables on a lake node (SPEC R21, R23): a table is the lake's, and any node publishes its
//! next version. A publish on a node syncs the replica, brings the node's copy of the table up
//! to the lake's newest version ([`pull`]: the lake's log files it lacks, and the data files
//! live at the newest one, linked from the node's objects or fetched from the lake), builds the
//! next versions into its own directory as a local store does, then copies them into
//! `<lake>/tables/<name>/` through the lake's object store ([`copy_to_lake`]), so delta-rs and
//! DuckDB read the table from S3 (or the shared directory) itself.
//!
//! Per version, in order: the data files it adds (named by their object's hash, so an upload is
//! idempotent), then its log file `_delta_log/<v>.json` created with put-if-absent — Delta's own
//! rule for writers, so a reader never sees a version whose files are missing, and two writers
//! can never both write version `v`. Every byte of a version is a function of the lake's log
//! (the `txn` appId and table id are the lake's, `oncelake:lake:<table>`), so two nodes racing
//! for version `v` build the same bytes and both are accepted. A node whose `v` differs (it left
//! out an entry the other did not, having seen the unit's correction) lost the race: it discards
//! its versions from `v` on, pulls the winner's and builds again, a bounded number of times. The
//! checkpoints follow their version (plain puts: a reader that misses one reads the JSON), and
//! the node remembers the newest version it knows the lake holds (`_oncelake_lake_version`, a
//! hint only: without it, versions are compared with the lake's again).

use super::position::{commit_file, newest_version, DELTA_LOG};
use super::registry::write_synced;
use super::{io_err, PublishReport, TableDef, TableError, TableResult};
use crate::lake::log::Published;
use crate::lake::Lake;
use crate::store::Store;
use object_store::path::Path as LakePath;
use object_store::{ObjectStore, PutOptions, PutPayload};
use std::collections::BTreeSet;
use std::path::Path;

/// The node's hint of the newest version it knows the lake holds, in the table's directory.
const COPIED: &str = "_oncelake_lake_version";
/// The lake's directory of tables.
const LAKE_TABLES: &str = "tables";
/// How many times a publish pulls and builds again after losing a version to another node.
const ATTEMPTS: u32 = 8;
/// Delta's pointer to the newest checkpoint.
const LAST_CHECKPOINT: &str = "_last_checkpoint";

/// Publishes `def` on lake node `store`: pull, sync, `build` (the local publish) and copy into
/// the lake, again from the pull when another node won a version with other bytes.
pub(super) fn publish_into_lake(
    store: &Store,
    lake: &Lake,
    def: &TableDef,
    build: fn(&Store, &TableDef) -> TableResult<PublishReport>,
) -> TableResult<PublishReport> {
    let mut lost = Vec::new();
    for attempt in 0..ATTEMPTS {
        pull(store, lake, &def.name)?;
        // After the pull: the replica then holds every commit the pulled versions include
        // (each was in the lake's log before a node built its version), so the next version
        // is built from the commits after them.
        store.sync()?;
        // A build stopped by a unit that cannot be published still copies the versions
        // before it: they are published, as on a local store.
        let built = build(store, def);
        match copy_to_lake(store, lake, &def.name)? {
            None => return built,
            Some(v) => {
                discard_from(store, &def.name, v)?;
                lost.push(v);
                crate::lake::backoff(attempt);
            }
        }
    }
    Err(TableError::LakeTable {
        name: def.name.clone(),
        url: lake.url.clone(),
        detail: format!(
            "other nodes published other bytes for versions {lost:?} than this node built, \
             {ATTEMPTS} times in a row"
        ),
        todo: "publish again (what is in the lake stays); if it keeps failing, the nodes \
               disagree on the table's units: run `verify` on each",
    })
}

/// Reads the newest-version hint.
fn copied_hint(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join(COPIED))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
}

/// Writes the hint; a hint only: lost, versions are compared with the lake's again.
fn set_hint(dir: &Path, v: Option<u64>) {
    let _ = match v {
        Some(v) => std::fs::write(dir.join(COPIED), v.to_string()),
        None => std::fs::remove_file(dir.join(COPIED)),
    };
}

fn lake_path(name: &str, rel: &str) -> LakePath {
    LakePath::from(format!("{LAKE_TABLES}/{name}/{rel}"))
}

/// The lake's version `v` of table `name`, if it has one.
fn lake_version(lake: &Lake, name: &str, v: u64) -> TableResult<Option<Vec<u8>>> {
    let rel = format!("{DELTA_LOG}/{}", commit_file(v));
    Ok(lake.read_if_present(&lake_path(name, &rel), &format!("{rel} of table {name}"))?)
}

/// Brings the node's copy of table `name` up to the lake's newest version. Versions the node
/// holds past its hint are compared with the lake's first: from the first that differs on,
/// they are discarded (another node won them). Then every newer version of the lake is pulled:
/// the data files live at the lake's newest version first, then the log files in order (and
/// the checkpoints of their versions), so the node's log never names a file it lacks.
fn pull(store: &Store, lake: &Lake, name: &str) -> TableResult<()> {
    let dir = store.table_dir(name);
    let log_dir = dir.join(DELTA_LOG);
    let vfs = store.core().vfs();
    vfs.create_dir_all(&log_dir)
        .map_err(|e| io_err(format!("create {}", log_dir.display()), e))?;
    let mut next = copied_hint(&dir).map_or(0, |v| v + 1);
    let local = newest_version(&log_dir)?;
    while local.is_some_and(|local| next <= local) {
        let Some(theirs) = lake_version(lake, name, next)? else {
            break; // the lake lacks it: the copy puts it there
        };
        let path = log_dir.join(commit_file(next));
        let ours =
            std::fs::read(&path).map_err(|e| io_err(format!("read {}", path.display()), e))?;
        if ours != theirs {
            discard_from(store, name, next)?;
            break;
        }
        next += 1;
    }
    let start = newest_version(&log_dir)?.map_or(0, |v| v + 1);
    let mut pulled = Vec::new();
    while let Some(json) = lake_version(lake, name, start + pulled.len() as u64)? {
        pulled.push(json);
    }
    if pulled.is_empty() {
        if next > 0 {
            set_hint(&dir, Some(next - 1));
        }
        return Ok(());
    }
    link_live_files(store, lake, name, &pulled)?;
    for (v, json) in (start..).zip(&pulled) {
        let checkpoint = format!("{v:020}.checkpoint.parquet");
        let rel = format!("{DELTA_LOG}/{checkpoint}");
        if v > 0 && v % super::delta::CHECKPOINT_INTERVAL == 0 {
            let what = format!("{rel} of table {name}");
            if let Some(bytes) = lake.read_if_present(&lake_path(name, &rel), &what)? {
                write_new(store, &log_dir, &checkpoint, &bytes)?;
            }
        }
        write_new(store, &log_dir, &commit_file(v), json)?;
    }
    vfs.sync_dir(&log_dir)
        .map_err(|e| io_err(format!("sync {}", log_dir.display()), e))?;
    set_hint(&dir, Some(start + pulled.len() as u64 - 1));
    Ok(())
}

/// Makes every data file live after the `pulled` versions exist in the node's copy: a link to
/// the node's object (as a local publish makes it), or the lake's file where the node lacks
/// the object. A file added and removed within them is not needed: no version to come names it.
fn link_live_files(store: &Store, lake: &Lake, name: &str, pulled: &[Vec<u8>]) -> TableResult<()> {
    let mut live = BTreeSet::new();
    for json in pulled {
        for (add, file) in actions(json) {
            if add {
                live.insert(file);
            } else {
                live.remove(&file);
            }
        }
    }
    let dir = store.table_dir(name);
    let vfs = store.core().vfs();
    let mut dirs = BTreeSet::new();
    for file in live {
        let path = dir.join(&file);
        let parent = path.parent().unwrap_or(&dir).to_path_buf();
        vfs.create_dir_all(&parent)
            .map_err(|e| io_err(format!("create {}", parent.display()), e))?;
        let object = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(super::layout::object_of_file_name)
            .map(|id| store.core().stager.object_path(&id))
            .filter(|o| o.exists());
        let linked = match object {
            Some(o) => vfs.link_no_replace(&o, &path).is_ok(),
            None => path.exists(),
        };
        if !linked {
            let what = format!("{file} of table {name}");
            let Some(bytes) = lake.read_if_present(&lake_path(name, &file), &what)? else {
                return Err(TableError::LakeTable {
                    name: name.to_string(),
                    url: lake.url.clone(),
                    detail: format!("the lake's table names {file}, which is not in the lake"),
                    todo: "restore the file in the lake (a node that published it holds it \
                           in its table directory), then publish again",
                });
            };
            write_new(
                store,
                &parent,
                &path.file_name().unwrap_or_default().to_string_lossy(),
                &bytes,
            )?;
        }
        dirs.insert(parent);
    }
    for d in dirs {
        vfs.sync_dir(&d)
            .map_err(|e| io_err(format!("sync {}", d.display()), e))?;
    }
    Ok(())
}

/// Creates `dir/file` with `bytes` (synced temporary file, linked without replacing); a file
/// already there is kept.
fn write_new(store: &Store, dir: &Path, file: &str, bytes: &[u8]) -> TableResult<()> {
    let vfs = store.core().vfs();
    let tmp = dir.join(format!(".oncelake-{file}-{}.tmp", std::process::id()));
    let _ = vfs.remove(&tmp);
    write_synced(vfs.as_ref(), &tmp, bytes)?;
    let linked = vfs.link_no_replace(&tmp, &dir.join(file));
    let _ = vfs.remove(&tmp);
    linked
        .map(|_| ())
        .map_err(|e| io_err(format!("create {}", dir.join(file).display()), e))
}

/// Removes the node's versions of table `name` from `v` on (log files and checkpoints, and
/// `_last_checkpoint`, which opening the table writes again): another node won version `v`.
/// Their data files stay: named by content, they are the very files a version to come names.
fn discard_from(store: &Store, name: &str, v: u64) -> TableResult<()> {
    let dir = store.table_dir(name);
    let log_dir = dir.join(DELTA_LOG);
    let rd = std::fs::read_dir(&log_dir)
        .map_err(|e| io_err(format!("list {}", log_dir.display()), e))?;
    let vfs = store.core().vfs();
    for ent in rd.flatten() {
        let file = ent.file_name().to_string_lossy().into_owned();
        let version = file.get(..20).and_then(|d| d.parse::<u64>().ok());
        let delta = file.ends_with(".json") || file.ends_with(".checkpoint.parquet");
        if delta && version.is_some_and(|w| w >= v) || file == LAST_CHECKPOINT {
            vfs.remove(&ent.path())
                .map_err(|e| io_err(format!("remove {}", ent.path().display()), e))?;
        }
    }
    vfs.sync_dir(&log_dir)
        .map_err(|e| io_err(format!("sync {}", log_dir.display()), e))?;
    if copied_hint(&dir).is_some_and(|h| h >= v) {
        set_hint(&dir, v.checked_sub(1));
    }
    Ok(())
}

/// Copies table `name`'s versions the lake lacks into it. `Some(v)`: the lake holds version
/// `v` with other bytes (another node won it); nothing after it was copied.
pub(super) fn copy_to_lake(store: &Store, lake: &Lake, name: &str) -> TableResult<Option<u64>> {
    let dir = store.table_dir(name);
    let mut v = copied_hint(&dir).map_or(0, |v| v + 1);
    loop {
        let json = match std::fs::read(dir.join(DELTA_LOG).join(commit_file(v))) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(format!("read version {v} of table {name}"), e)),
        };
        for (_, file) in actions(&json).into_iter().filter(|(add, _)| *add) {
            let bytes = std::fs::read(dir.join(&file))
                .map_err(|e| io_err(format!("read {file} of table {name}"), e))?;
            put(lake, name, &file, bytes)?;
        }
        let rel = format!("{DELTA_LOG}/{}", commit_file(v));
        let what = format!("{rel} of table {name}");
        if let Published::Lost(_) = lake.create_once(&lake_path(name, &rel), &json, &what)? {
            return Ok(Some(v));
        }
        let checkpoint = format!("{v:020}.checkpoint.parquet");
        if let Ok(bytes) = std::fs::read(dir.join(DELTA_LOG).join(&checkpoint)) {
            put(lake, name, &format!("{DELTA_LOG}/{checkpoint}"), bytes)?;
            if let Ok(last) = std::fs::read(dir.join(DELTA_LOG).join(LAST_CHECKPOINT)) {
                put(lake, name, &format!("{DELTA_LOG}/{LAST_CHECKPOINT}"), last)?;
            }
        }
        set_hint(&dir, Some(v));
        v += 1;
    }
}

/// On a lake node, fetches into `objects/` the objects of `commits` this node has not read yet
/// (it applies other nodes' segments without fetching them), so the publisher finds every data
/// file it links. Returns the handles that pin them until the publish ends; an object the lake
/// no longer holds is left for the publisher to report as missing, as on any store.
pub(super) fn fetch_objects(
    store: &Store,
    commits: &[(u64, u64, Vec<crate::log::LogEntry>)],
) -> TableResult<Vec<crate::stage::Staged>> {
    let Some(lake) = store.core().lake.clone() else {
        return Ok(Vec::new());
    };
    let stager = &store.core().stager;
    let mut seen = std::collections::HashSet::new();
    let wanted: Vec<_> = commits
        .iter()
        .flat_map(|(seq, _, es)| es.iter().map(move |e| (e.object, *seq)))
        .filter(|(m, _)| seen.insert(m.id) && !stager.object_path(&m.id).exists())
        .collect();
    Ok(lake.fetch_all_if_present(&wanted, stager)?)
}

/// The data files a version's log adds (`true`) and removes (`false`), in order, by relative
/// path (`add.path` / `remove.path`, percent-decoded).
fn actions(json: &[u8]) -> Vec<(bool, String)> {
    String::from_utf8_lossy(json)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|a| {
            let add = a["add"]["path"].as_str().map(|p| (true, percent_decode(p)));
            add.or_else(|| {
                a["remove"]["path"]
                    .as_str()
                    .map(|p| (false, percent_decode(p)))
            })
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Puts `tables/<name>/<rel>` in the lake (a data file or checkpoint: the same bytes whoever
/// puts them, so replacing one is harmless).
fn put(lake: &Lake, name: &str, rel: &str, bytes: Vec<u8>) -> TableResult<()> {
    let store: &dyn ObjectStore = lake.object_store().as_ref();
    let payload = PutPayload::from(bytes);
    lake.block_on(store.put_opts(&lake_path(name, rel), payload, PutOptions::default()))
        .map(|_| ())
        .map_err(|e| TableError::LakeTable {
            name: name.to_string(),
            url: lake.url.clone(),
            detail: format!("{rel}: {e}"),
            todo: "check the lake is reachable and publish again (what is copied stays)",
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_percent_decoded_and_other_actions_ignored() {
        let json = b"{\"commitInfo\":{}}\n{\"add\":{\"path\":\"d=a%20b/x.parquet\"}}\n\
                     {\"remove\":{\"path\":\"y.parquet\"}}\n{\"add\":{\"path\":\"z%2\"}}\n";
        let want = [
            (true, "d=a b/x.parquet"),
            (false, "y.parquet"),
            (true, "z%2"),
        ];
        let want: Vec<_> = want.iter().map(|(a, p)| (*a, p.to_string())).collect();
        assert_eq!(actions(json), want);
    }
}
