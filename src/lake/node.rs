//! A node directory's binding to its lake (SPEC R23): the file `LAKE` in the store directory,
//! written once when the node is initialised and read by every open.

use std::io::Write;
use std::path::Path;

/// The binding's file name in a node directory.
pub const LAKE_FILE: &str = "LAKE";
const HEADER: &str = "oncelake lake 1";

/// The URL `dir` is bound to, or `None` for a store that is not a lake node. The error says
/// what is wrong with the file.
pub(crate) fn read(dir: &Path) -> Result<Option<String>, String> {
    let path = dir.join(LAKE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("read {}: {e}", path.display())),
    };
    let mut lines = text.lines();
    match (lines.next(), lines.next(), lines.next()) {
        (Some(HEADER), Some(url), None) if !url.is_empty() => Ok(Some(url.to_string())),
        _ => Err(format!(
            "{} is not a lake binding (expected {HEADER:?} and one URL line)",
            path.display()
        )),
    }
}

/// Binds `dir` to `url`, durably: a temporary file, synced, renamed over the name, and the
/// directory synced, so a crash leaves either no binding or the whole one.
pub(crate) fn write(dir: &Path, url: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!("{LAKE_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(format!("{HEADER}\n{url}\n").as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(LAKE_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_round_trips_and_a_damaged_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        write(d.path(), "s3://b/p").unwrap();
        assert_eq!(read(d.path()).unwrap().as_deref(), Some("s3://b/p"));
        std::fs::write(d.path().join(LAKE_FILE), "garbage").unwrap();
        assert!(read(d.path()).unwrap_err().contains("not a lake binding"));
    }
}
