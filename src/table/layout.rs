//! Where a unit's object lives in a table: its Hive-style partition (`k=v` key segments after
//! the prefix) and its data file, a hard link `k=v/.../<object hash>-<unit tag>.parquet`.
//!
//! The unit tag (16 hex digits of the BLAKE3 hash of the unit key) keeps two units with the same
//! bytes in one partition as two files, as readers must see two sets of rows; a new version of a
//! unit with unchanged bytes keeps its path.

use crate::object::ObjectId;

/// A unit's partition: the column names and their URL-unquoted values, in key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// `(column, value)` pairs.
    pub values: Vec<(String, String)>,
    /// The raw segments (`date=2026-11-29`), as the directory path under the table root.
    pub dir: String,
}

impl Partition {
    /// The column names.
    pub fn columns(&self) -> Vec<String> {
        self.values.iter().map(|(k, _)| k.clone()).collect()
    }
}

/// The partition of `unit` in a table with `prefix`: the leading `k=v` segments after the
/// prefix. `None` when a value does not URL-unquote to UTF-8.
pub fn partition_of(prefix: &str, unit: &str) -> Option<Partition> {
    let rest = unit.strip_prefix(prefix)?;
    let mut values = Vec::new();
    let mut dirs = Vec::new();
    for seg in rest.split('/') {
        let Some((k, v)) = seg.split_once('=') else {
            break;
        };
        if k.is_empty() {
            break;
        }
        values.push((unquote(k)?, unquote(v)?));
        dirs.push(seg);
    }
    Some(Partition {
        values,
        dir: dirs.join("/"),
    })
}

/// The data file of a unit's object, relative to the table root, as it is on disk.
pub fn data_file(partition: &Partition, unit: &str, object: &ObjectId) -> String {
    let tag = blake3::hash(unit.as_bytes()).to_hex();
    let name = format!("{}-{}.parquet", object.to_hex(), &tag[..16]);
    if partition.dir.is_empty() {
        name
    } else {
        format!("{}/{}", partition.dir, name)
    }
}

/// The object a data file name says it links to (`<64 hex>-<16 hex>.parquet`).
pub fn object_of_file_name(name: &str) -> Option<ObjectId> {
    let stem = name.strip_suffix(".parquet")?;
    let (hash, tag) = stem.split_once('-')?;
    if tag.len() != 16 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    hash.parse().ok()
}

/// A relative path as a URI path (what Delta's `add.path` holds): every byte but unreserved
/// characters, `=` and `/` percent-encoded.
pub fn uri_path(path: &str) -> String {
    // A table, not a test per byte: every add and remove line of a version goes through here.
    const SAFE: [bool; 256] = {
        let mut t = [false; 256];
        let mut i = 0;
        while i < 256 {
            let b = i as u8;
            t[i] =
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'=' | b'/');
            i += 1;
        }
        t
    };
    let safe = |b: u8| SAFE[b as usize];
    if path.bytes().all(safe) {
        return path.to_string(); // the usual case: one copy, no per-byte pushes
    }
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if safe(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unquote(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
            match u8::from_str_radix(hex, 16) {
                Ok(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            }
        } else {
            out.push(b[i]);
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_segments_become_partitions() {
        let p = partition_of("sales/", "sales/date=2026-11-29/region=eu%20west/part-1").unwrap();
        assert_eq!(
            p.values,
            vec![
                ("date".into(), "2026-11-29".into()),
                ("region".into(), "eu west".into())
            ]
        );
        assert_eq!(p.dir, "date=2026-11-29/region=eu%20west");
        assert_eq!(partition_of("sales/", "sales/file").unwrap().values, vec![]);
        assert_eq!(partition_of("sales/", "other/x"), None);
        assert_eq!(partition_of("", "=x/y").unwrap().values, vec![]);
        assert_eq!(partition_of("", "a=%FF"), None);
        assert_eq!(partition_of("", "a=100%").unwrap().values[0].1, "100%");
    }

    #[test]
    fn file_names_name_their_object_and_paths_are_uris() {
        let id = ObjectId::of(b"x");
        let p = partition_of("", "d=1/u").unwrap();
        let f = data_file(&p, "d=1/u", &id);
        assert!(f.starts_with("d=1/"));
        assert_eq!(object_of_file_name(f.rsplit('/').next().unwrap()), Some(id));
        assert_ne!(data_file(&p, "d=1/v", &id), f);
        assert_eq!(object_of_file_name("x.parquet"), None);
        assert_eq!(uri_path("d=a b%/x.parquet"), "d=a%20b%25/x.parquet");
    }
}
