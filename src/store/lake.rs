//! Opening a lake node (SPEC R23): the node directory's binding to its lake, made or checked,
//! and the connection, caught up with the lake before the open returns.

use crate::core::{Core, Options};
use crate::error::{Error, Result};
use crate::wal::overlay::LeaderState;
use std::path::Path;

/// The lake `dir` is bound to, binding it first when `options.lake` asks for a store that has
/// no commits yet. `None`: a local store. A read-only open reads the replica as it is.
pub(super) fn binding(
    dir: &Path,
    options: &Options,
    leader: &LeaderState,
) -> Result<Option<String>> {
    if options.read_only {
        return Ok(None);
    }
    let bound = read_binding(dir)?;
    match (bound, options.lake.as_deref()) {
        (Some(b), Some(asked)) if b != asked => Err(Error::InvalidRequest(format!(
            "{} is a node of the lake {b}, not of {asked}; open it without a lake URL, or \
             initialise a new node directory for {asked}",
            dir.display()
        ))),
        (Some(b), _) => Ok(Some(b)),
        (None, None) => Ok(None),
        (None, Some(asked)) => {
            if leader.group > 0 || leader.next_seq > 1 {
                return Err(Error::InvalidRequest(format!(
                    "{} is a local store with commits; only a new (empty) directory becomes a \
                     node of the lake {asked} — initialise a new node directory",
                    dir.display()
                )));
            }
            // The lake must answer before the directory is bound to it for good.
            #[cfg(feature = "lake")]
            crate::lake::Lake::connect(asked, 0, 0)?.read_segment(1)?;
            write_binding(dir, asked)?;
            Ok(Some(asked.to_string()))
        }
    }
}

#[cfg(feature = "lake")]
fn read_binding(dir: &Path) -> Result<Option<String>> {
    crate::lake::node::read(dir).map_err(|detail| Error::Corrupt {
        path: dir.join(crate::lake::node::LAKE_FILE),
        detail,
    })
}

#[cfg(feature = "lake")]
fn write_binding(dir: &Path, url: &str) -> Result<()> {
    // Refused before anything is written when the URL does not parse.
    crate::lake::url::LakeUrl::parse(url).map_err(|detail| Error::Lake {
        url: url.to_string(),
        what: "binding the node".into(),
        detail,
        todo: "give a lake URL in one of the forms above",
    })?;
    crate::lake::node::write(dir, url)
        .map_err(|e| Error::io(format!("bind {} to the lake {url}", dir.display()), e))
}

#[cfg(not(feature = "lake"))]
fn read_binding(dir: &Path) -> Result<Option<String>> {
    // The binding's file name, as `lake::node` writes it.
    match dir.join("LAKE").try_exists() {
        Ok(false) => Ok(None),
        _ => Err(no_lake_support(dir)),
    }
}

#[cfg(not(feature = "lake"))]
fn write_binding(dir: &Path, _url: &str) -> Result<()> {
    Err(no_lake_support(dir))
}

#[cfg(not(feature = "lake"))]
fn no_lake_support(dir: &Path) -> Error {
    Error::InvalidRequest(format!(
        "{} is (or is asked to be) a node of a shared lake, and this build of oncelake has no \
         lake support; use the oncelake command line, or build the engine with the `lake` feature",
        dir.display()
    ))
}

/// Connects a lake node to its lake, from the replica's applied segment on.
#[cfg(feature = "lake")]
pub(super) fn connect(
    url: Option<String>,
    store_id: u64,
    leader: &LeaderState,
    options: &Options,
) -> Result<Option<std::sync::Arc<crate::lake::Lake>>> {
    url.map(|u| {
        let mut lake = crate::lake::Lake::connect(&u, store_id, leader.group)?;
        lake.checkpoint_every = options.lake_checkpoint_every;
        Ok(std::sync::Arc::new(lake))
    })
    .transpose()
}

/// Starts a new lake node directory from its lake's newest checkpoint (docs/lake.md), before
/// the open creates the store in it: only when the open asks for a lake and `dir` holds no
/// store and no database yet. Returns the checkpoint used, if any.
pub(super) fn seed(dir: &Path, options: &Options) -> Result<Option<u64>> {
    #[cfg(feature = "lake")]
    if let (Some(url), false) = (options.lake.as_deref(), options.read_only) {
        let fresh = !dir.join(crate::layout::MARKER_FILE).exists()
            && !dir.join(crate::layout::DB_FILE).exists();
        if fresh {
            return Ok(crate::lake::seed::seed(dir, url)?.from);
        }
    }
    let _ = (dir, options);
    Ok(None)
}

/// Writes (or checks against the lake's) a checkpoint of a lake node's replica.
pub(super) fn checkpoint(core: &Core) -> Result<crate::commit::CheckpointReport> {
    #[cfg(feature = "lake")]
    if let Some(lake) = &core.lake {
        crate::commit::lake::sync(core, lake)?;
        return crate::commit::lake_checkpoint::checkpoint(core, lake);
    }
    Err(Error::InvalidRequest(format!(
        "{} is not a node of a shared lake: only a lake node writes checkpoints",
        core.dir.display()
    )))
}

/// Catches a freshly opened lake node up with its lake.
pub(super) fn catch_up(core: &Core) -> Result<()> {
    #[cfg(feature = "lake")]
    if let Some(lake) = &core.lake {
        return crate::commit::lake::sync(core, lake);
    }
    let _ = core;
    Ok(())
}
