//! Starting a new (or wiped) node from the lake's newest checkpoint (SPEC R23, P10): its
//! database file is written into the node directory as the replica, and the open that follows
//! applies the segments after it.
//!
//! The order makes every crash safe: the binding (`LAKE`) first, then the database under a
//! temporary name, stamped with an identity of this node's own, then hard-linked to its name —
//! which fails if a database is there already (another opener created one: its replica then
//! replays from segment 1, slower but the same state). Until the store's marker is written
//! the directory counts as an unfinished creation, which the open completes.
//!
//! A damaged checkpoint (its BLAKE3 fails, or it does not decode) is skipped for the next
//! older one, and with none left the node replays the log from segment 1: the log is the
//! truth and a checkpoint only a shortcut through it, so damage to one must not make the lake
//! unjoinable. The skipped ones are reported in [`Seeded::skipped`].

use super::checkpoint::Checkpoint;
use super::Lake;
use crate::error::{DbContext, Error, IoContext, Result};
use crate::layout::DB_FILE;
use std::path::Path;

/// What seeding a node directory did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Seeded {
    /// The checkpoint the replica was written from (`None`: no usable one; the node replays
    /// the log from segment 1).
    pub from: Option<u64>,
    /// Checkpoints skipped as damaged, newest first, with what is wrong.
    pub skipped: Vec<(u64, String)>,
}

/// Writes the newest usable checkpoint of the lake at `url` into `dir` as its replica, if the
/// lake has one. `dir` must hold no database yet.
pub(crate) fn seed(dir: &Path, url: &str) -> Result<Seeded> {
    let lake = Lake::connect(url, 0, 0)?;
    let mut seeded = Seeded::default();
    for n in lake.list_checkpoints()? {
        // Listed, so written whole; gone only if deleted by hand since.
        let Some(bytes) = lake.read_checkpoint(n)? else {
            continue;
        };
        match Checkpoint::decode(n, &bytes) {
            Ok(c) => {
                drop(bytes);
                install(dir, url, &c)?;
                seeded.from = Some(n);
                return Ok(seeded);
            }
            Err(detail) => seeded.skipped.push((n, detail)),
        }
    }
    Ok(seeded)
}

fn install(dir: &Path, url: &str, c: &Checkpoint) -> Result<()> {
    std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
    super::node::write(dir, url)
        .map_err(|e| Error::io(format!("bind {} to the lake {url}", dir.display()), e))?;
    let tmp = dir.join(format!("{DB_FILE}.checkpoint"));
    std::fs::write(&tmp, &c.db).ctx(|| format!("write {}", tmp.display()))?;
    stamp_identity(&tmp)?;
    let linked = std::fs::hard_link(&tmp, dir.join(DB_FILE));
    std::fs::remove_file(&tmp).ctx(|| format!("remove {}", tmp.display()))?;
    match linked {
        Ok(()) => std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .ctx(|| format!("sync {}", dir.display())),
        // Another opener created the database first: it replays from segment 1.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(
            format!("install the checkpoint in {}", dir.display()),
            e,
        )),
    }
}

/// Gives the replica an identity of its own (the writer's is in the file), durably.
fn stamp_identity(path: &Path) -> Result<()> {
    let db = redb::Database::builder()
        .create(path)
        .db("open a checkpoint's database")?;
    let w = db.begin_write().db("begin stamping the checkpoint")?;
    {
        let mut meta = w
            .open_table(crate::schema::META)
            .db("open the checkpoint's meta table")?;
        crate::schema::meta::put(
            &mut meta,
            crate::schema::meta::STORE_ID,
            super::segment::nonce() | 1,
        )?;
    }
    w.commit().db("stamp the checkpoint")
}
