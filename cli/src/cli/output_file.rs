//! Where `get -o PATH` writes, safely in a directory others can write to as well.
//!
//! A regular file (or a missing path, or a symlink, which is replaced, never followed) is
//! replaced whole: the object goes into a new temporary file next to it — a random name, created
//! exclusively (`O_EXCL`: a file or symlink planted at that name is never opened), owned by this
//! user — renamed over the path once complete. So a reader sees the old file or the whole new
//! one, two `get -o` into one directory never share a temporary file, and a planted symlink
//! cannot redirect the write. A pipe or a terminal is written in place (a FIFO stays a FIFO); any
//! other special file (a device such as `/dev/null`, a socket) is refused: replacing it would
//! destroy it, and writing into a device is no `get`.

use super::CliError;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How a path is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Replaced by a complete new file.
    Replace,
    /// A pipe or a terminal: written in place.
    InPlace,
}

/// Refuses, before the store is opened, an output path that cannot or must not be written: a
/// directory, a missing directory, a special file other than a pipe or a terminal.
pub(crate) fn check_output_path(path: &Path) -> Result<(), CliError> {
    kind(path).map(|_| ())
}

fn kind(path: &Path) -> Result<Kind, CliError> {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    let parent = parent(path);
    if !parent.is_dir() {
        return Err(CliError::Usage(format!(
            "{shown}: directory {} does not exist; create it first or pass another -o path",
            parent.display()
        )));
    }
    let t = match std::fs::symlink_metadata(path) {
        Ok(m) => m.file_type(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Kind::Replace),
        Err(e) => return Err(CliError::io(format!("stat {shown}"), e)),
    };
    if t.is_dir() || (t.is_symlink() && path.is_dir()) {
        return Err(CliError::Usage(format!(
            "{shown} is a directory; pass a file path to -o"
        )));
    }
    if t.is_file() || t.is_symlink() {
        return Ok(Kind::Replace);
    }
    if t.is_fifo() || (t.is_char_device() && is_terminal(path)) {
        return Ok(Kind::InPlace);
    }
    let what = if t.is_char_device() {
        "a device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    Err(CliError::Usage(format!(
        "{shown} is {what}, not a file: -o writes a file (or a pipe or terminal in place) and \
         will not replace or write into it; to discard the object, run without -o and send \
         standard output where you like (`> /dev/null`)"
    )))
}

/// Whether the character device at `path` is a terminal.
fn is_terminal(path: &Path) -> bool {
    use std::io::IsTerminal;
    open_in_place(path).is_ok_and(|f| f.is_terminal())
}

/// Opens a pipe or terminal for writing, never following a symlink and never becoming this
/// process' controlling terminal.
fn open_in_place(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// An output being written.
pub(crate) enum OutputFile {
    /// The temporary file that replaces `path` when complete (removed if dropped before).
    Replace {
        tmp: tempfile::NamedTempFile,
        path: PathBuf,
    },
    /// A pipe or terminal, written in place.
    InPlace { file: File, path: PathBuf },
}

impl OutputFile {
    /// Starts the output at `path` (checked again: it may have changed since
    /// [`check_output_path`]).
    pub(crate) fn create(path: &Path) -> Result<OutputFile, CliError> {
        let shown = path.display();
        match kind(path)? {
            Kind::Replace => {
                use std::os::unix::fs::PermissionsExt;
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let tmp = tempfile::Builder::new()
                    .prefix(&format!(".{name}."))
                    .suffix(".oncelake-tmp")
                    // What `File::create` gives: 0666 less the umask.
                    .permissions(std::fs::Permissions::from_mode(0o666))
                    .tempfile_in(parent(path))
                    .map_err(|e| CliError::io(format!("create a temporary file for {shown}"), e))?;
                Ok(OutputFile::Replace {
                    tmp,
                    path: path.to_path_buf(),
                })
            }
            Kind::InPlace => {
                let file =
                    open_in_place(path).map_err(|e| CliError::io(format!("open {shown}"), e))?;
                // Opened by name after the check: make sure it still is a pipe or terminal.
                let still = file.metadata().is_ok_and(|m| {
                    use std::io::IsTerminal;
                    use std::os::unix::fs::FileTypeExt;
                    m.file_type().is_fifo() || file.is_terminal()
                });
                if !still {
                    return Err(CliError::Usage(format!(
                        "{shown} changed while it was opened; run again"
                    )));
                }
                Ok(OutputFile::InPlace {
                    file,
                    path: path.to_path_buf(),
                })
            }
        }
    }

    /// Whether the output is written in place: what is written is seen at once, so the caller
    /// writes only bytes already checked.
    pub(crate) fn in_place(&self) -> bool {
        matches!(self, OutputFile::InPlace { .. })
    }

    /// The file to write to.
    pub(crate) fn file(&mut self) -> &mut File {
        match self {
            OutputFile::Replace { tmp, .. } => tmp.as_file_mut(),
            OutputFile::InPlace { file, .. } => file,
        }
    }

    /// Writes all of `bytes`.
    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> Result<(), CliError> {
        let r = self.file().write_all(bytes);
        r.map_err(|e| CliError::io(format!("write {}", self.path().display()), e))
    }

    fn path(&self) -> &Path {
        match self {
            OutputFile::Replace { path, .. } | OutputFile::InPlace { path, .. } => path,
        }
    }

    /// Completes the output: the temporary file renamed over the path.
    pub(crate) fn finish(self) -> Result<(), CliError> {
        match self {
            OutputFile::Replace { tmp, path } => tmp
                .persist(&path)
                .map(|_| ())
                .map_err(|e| CliError::io(format!("write {}", path.display()), e.error)),
            OutputFile::InPlace { mut file, path } => file
                .flush()
                .map_err(|e| CliError::io(format!("write {}", path.display()), e)),
        }
    }
}
