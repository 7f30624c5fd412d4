//! What a table needs from an object's Parquet footer: its row count and its schema, as Delta's
//! `schemaString` type JSON. Reads only the footer (one positioned read of the file's tail).

use crate::object::ObjectId;
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use parquet::file::metadata::{
    ParquetMetaDataOptions, ParquetMetaDataReader, ParquetStatisticsPolicy,
};
use serde_json::{json, Value};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The footer facts of one data file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Footer {
    /// Rows in the file (`stats.numRecords`).
    pub num_records: i64,
    /// The data columns as a Delta struct type's `fields` (partition columns not included).
    pub fields: Arc<Vec<Value>>,
}

/// Bytes read from the end of a file in one go; a larger footer costs a second read.
const TAIL: u64 = 64 << 10;

/// Reads footers, converting each distinct Parquet schema to Delta's form once: the objects of
/// one table almost always share one schema, and the conversion costs more than the read.
#[derive(Default)]
pub(crate) struct FooterReader {
    last: Option<(parquet::schema::types::TypePtr, Arc<Vec<Value>>)>,
}

impl FooterReader {
    /// Reads the footer of the `size`-byte Parquet file at `path`, as [`FooterReader::read_object`].
    #[cfg(test)]
    pub(crate) fn read(&mut self, path: &Path, size: u64) -> Result<Footer, String> {
        self.read_with(|| open_no_atime(rustix_cwd(), path), size)
    }

    /// Reads the footer of object `id` of `objects` (`size` bytes). `Err` says, in words a user
    /// can act on, why the file is not a Parquet file a Delta table can hold.
    pub(crate) fn read_object(
        &mut self,
        objects: &ObjectDir,
        id: &ObjectId,
        size: u64,
    ) -> Result<Footer, String> {
        self.read_with(|| objects.open(id), size)
    }

    fn read_with(
        &mut self,
        open: impl FnOnce() -> std::io::Result<File>,
        size: u64,
    ) -> Result<Footer, String> {
        let meta = read_metadata(open, size)?;
        let fm = meta.file_metadata();
        let root = fm.schema_descr().root_schema_ptr();
        let fields = match &self.last {
            Some((t, fields)) if *t == root => fields.clone(),
            _ => {
                let fields = Arc::new(delta_fields(fm.schema_descr())?);
                self.last = Some((root, fields.clone()));
                fields
            }
        };
        Ok(Footer {
            num_records: fm.num_rows(),
            fields,
        })
    }
}

fn delta_fields(descr: &parquet::schema::types::SchemaDescriptor) -> Result<Vec<Value>, String> {
    let schema = parquet::arrow::parquet_to_arrow_schema(descr, None)
        .map_err(|e| format!("the object's Parquet schema cannot be read: {e}"))?;
    schema.fields().iter().map(|f| delta_field(f)).collect()
}

fn read_metadata(
    open: impl FnOnce() -> std::io::Result<File>,
    size: u64,
) -> Result<parquet::file::metadata::ParquetMetaData, String> {
    if size < 12 {
        return Err(format!(
            "the object has {size} bytes, too few for a Parquet file"
        ));
    }
    let file = open().map_err(|e| format!("cannot read the object: {e}"))?;
    let want = size.min(TAIL);
    let mut tail = read_at(&file, size - want, want as usize)?;
    let n = tail.len();
    if &tail[n - 4..] != b"PAR1" {
        return Err(if &tail[n - 4..] == b"PARE" {
            "the object is an encrypted Parquet file, which a table cannot publish".into()
        } else {
            "the object is not a Parquet file (no PAR1 footer)".into()
        });
    }
    let len = u32::from_le_bytes([tail[n - 8], tail[n - 7], tail[n - 6], tail[n - 5]]) as u64;
    if len + 12 > size {
        return Err("the object's Parquet footer length is larger than the file".into());
    }
    if len + 8 > want {
        tail = read_at(&file, size - len - 8, len as usize + 8)?;
    }
    let n = tail.len();
    ParquetMetaDataReader::decode_metadata_with_options(
        &tail[n - 8 - len as usize..n - 8],
        Some(skip_statistics()),
    )
    .map_err(|e| format!("the object's Parquet footer is unreadable: {e}"))
}

/// A table needs the row count and the schema, not the column statistics: they are skipped
/// (still parsed over, so a malformed footer is still refused), saving their allocations.
fn skip_statistics() -> &'static ParquetMetaDataOptions {
    static OPTIONS: std::sync::OnceLock<ParquetMetaDataOptions> = std::sync::OnceLock::new();
    OPTIONS.get_or_init(|| {
        ParquetMetaDataOptions::new()
            .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
            .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
            .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll)
    })
}

/// The store's object directory held open for a publish, so that each object is opened by its
/// two names below it (`xx/<hash>`) rather than by a walk of the store's whole path.
pub(crate) struct ObjectDir {
    root: PathBuf,
    #[cfg(target_os = "linux")]
    fd: Option<std::os::fd::OwnedFd>,
}

impl ObjectDir {
    /// Holds `root` open where the system allows; else objects are opened by their paths.
    pub(crate) fn hold(root: PathBuf) -> ObjectDir {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::{Mode, OFlags};
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            // No handle (a missing directory, no descriptor to spare): each open goes by path
            // and reports its own error.
            let fd = rustix::fs::open(&root, flags, Mode::empty()).ok();
            ObjectDir { root, fd }
        }
        #[cfg(not(target_os = "linux"))]
        ObjectDir { root }
    }

    /// Opens object `id` for reading (without updating its access time where allowed).
    pub(crate) fn open(&self, id: &ObjectId) -> std::io::Result<File> {
        let rel = ObjectRel::of(id);
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            use std::os::fd::AsFd;
            return open_no_atime(fd.as_fd(), Path::new(rel.as_str()));
        }
        open_no_atime(rustix_cwd(), &self.root.join(rel.as_str()))
    }
}

/// An object's path under the store's object directory, `xx/<hash>` (as `ObjectId::rel_path`),
/// built on the stack: a publish names every object it reads and links.
pub(crate) struct ObjectRel([u8; 67]);

impl ObjectRel {
    pub(crate) fn of(id: &ObjectId) -> ObjectRel {
        let hex = blake3::Hash::from_bytes(id.0).to_hex();
        let mut b = [b'/'; 67];
        b[..2].copy_from_slice(&hex.as_bytes()[..2]);
        b[3..].copy_from_slice(hex.as_bytes());
        ObjectRel(b)
    }

    pub(crate) fn as_str(&self) -> &str {
        // Hex digits and a slash: always UTF-8.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

#[cfg(target_os = "linux")]
fn rustix_cwd() -> std::os::fd::BorrowedFd<'static> {
    rustix::fs::CWD
}

/// Elsewhere objects are opened by path: no directory to open them relative to.
#[cfg(not(target_os = "linux"))]
#[derive(Clone, Copy)]
struct Cwd;

#[cfg(not(target_os = "linux"))]
fn rustix_cwd() -> Cwd {
    Cwd
}

/// Opens `path` (relative to `dir`) for reading without updating its access time where the
/// system allows that (Linux `O_NOATIME`, for the file's owner). A footer read is most of the
/// kernel work of a publish after linking: with `relatime`, the first read of a freshly written
/// or linked object would otherwise write its inode back (measured: ~7% of a publish's CPU time).
#[cfg(target_os = "linux")]
fn open_no_atime(dir: std::os::fd::BorrowedFd<'_>, path: &Path) -> std::io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    use std::sync::atomic::{AtomicBool, Ordering};
    // Set once the system refused O_NOATIME (not the owner): later opens go straight to a plain open.
    static REFUSED: AtomicBool = AtomicBool::new(false);
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    if !REFUSED.load(Ordering::Relaxed) {
        match rustix::fs::openat(dir, path, flags | OFlags::NOATIME, Mode::empty()) {
            Ok(fd) => return Ok(File::from(fd)),
            Err(rustix::io::Errno::PERM) => REFUSED.store(true, Ordering::Relaxed),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(File::from(rustix::fs::openat(
        dir,
        path,
        flags,
        Mode::empty(),
    )?))
}

#[cfg(not(target_os = "linux"))]
fn open_no_atime(_dir: Cwd, path: &Path) -> std::io::Result<File> {
    File::open(path)
}

fn read_at(file: &File, offset: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; len];
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| format!("cannot read the object: {e}"))?;
    }
    #[cfg(not(unix))]
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| format!("cannot read the object: {e}"))?;
    }
    Ok(buf)
}

/// A Delta struct field.
fn delta_field(f: &Field) -> Result<Value, String> {
    Ok(json!({
        "name": f.name(),
        "type": delta_type(f.name(), f.data_type())?,
        "nullable": f.is_nullable(),
        "metadata": {},
    }))
}

/// The Delta (protocol reader 1 / writer 2) type of an Arrow type read from Parquet.
fn delta_type(name: &str, t: &DataType) -> Result<Value, String> {
    let prim = |s: &str| Ok(Value::String(s.into()));
    match t {
        DataType::Boolean => prim("boolean"),
        DataType::Int8 => prim("byte"),
        DataType::Int16 | DataType::UInt8 => prim("short"),
        DataType::Int32 | DataType::UInt16 => prim("integer"),
        DataType::Int64 | DataType::UInt32 => prim("long"),
        DataType::Float32 => prim("float"),
        DataType::Float64 => prim("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => prim("string"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => prim("binary"),
        DataType::FixedSizeBinary(_) => prim("binary"),
        DataType::Date32 | DataType::Date64 => prim("date"),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => prim("timestamp"),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) if *p <= 38 => {
            Ok(Value::String(format!("decimal({p},{s})")))
        }
        DataType::Struct(fields) => struct_type(fields),
        DataType::List(item) | DataType::LargeList(item) => Ok(json!({
            "type": "array",
            "elementType": delta_type(name, item.data_type())?,
            "containsNull": item.is_nullable(),
        })),
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(format!(
                    "column {name:?} is a map without key/value entries"
                ));
            };
            if kv.len() != 2 {
                return Err(format!(
                    "column {name:?} is a map without key/value entries"
                ));
            }
            Ok(json!({
                "type": "map",
                "keyType": delta_type(name, kv[0].data_type())?,
                "valueType": delta_type(name, kv[1].data_type())?,
                "valueContainsNull": kv[1].is_nullable(),
            }))
        }
        other => Err(format!(
            "column {name:?} has type {other}, which a Delta table (reader 1, writer 2) cannot \
             hold; write it as a supported type (timestamps in microseconds with a time zone)"
        )),
    }
}

fn struct_type(fields: &Fields) -> Result<Value, String> {
    Ok(json!({
        "type": "struct",
        "fields": fields.iter().map(|f| delta_field(f)).collect::<Result<Vec<_>, _>>()?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_on_the_stack_are_the_store_s() {
        for i in 0..100u32 {
            let id = ObjectId::of(&i.to_le_bytes());
            assert_eq!(ObjectRel::of(&id).as_str(), id.rel_path());
        }
    }

    #[test]
    fn non_parquet_bytes_are_refused_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, b"just some csv,1,2\n").unwrap();
        let mut r = FooterReader::default();
        let e = r.read(&p, 18).unwrap_err();
        assert!(e.contains("not a Parquet file"), "{e}");
        std::fs::write(&p, b"PAR1").unwrap();
        assert!(r.read(&p, 4).unwrap_err().contains("too few"));
        let mut bad = b"PAR1xxxxxxxx".to_vec();
        bad.extend_from_slice(&1000u32.to_le_bytes());
        bad.extend_from_slice(b"PAR1");
        std::fs::write(&p, &bad).unwrap();
        assert!(r.read(&p, bad.len() as u64).unwrap_err().contains("larger"));
    }
}
