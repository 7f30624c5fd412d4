//! Where a benchmark puts its scratch stores.

use super::BenchError;

/// The directory a bench puts its scratch stores in: `--dir`, created if it is missing, or the
/// system's temporary directory.
pub(crate) fn scratch_dir(
    dir: Option<std::path::PathBuf>,
) -> Result<std::path::PathBuf, BenchError> {
    let Some(dir) = dir else {
        return Ok(std::env::temp_dir());
    };
    if dir.exists() && !dir.is_dir() {
        return Err(BenchError::Usage(format!(
            "--dir {} is not a directory; pass a directory for the scratch stores",
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir).map_err(|e| {
        BenchError::Usage(format!(
            "cannot create --dir {}: {e}; pass a directory you can write to",
            dir.display()
        ))
    })?;
    Ok(dir)
}
