//! Object identity: the BLAKE3 content hash, shown as hex.

use std::fmt;
use std::str::FromStr;

/// The content hash (BLAKE3) that names an object. Identical bytes are one object.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; 32]);

impl ObjectId {
    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        ObjectId(*blake3::hash(bytes).as_bytes())
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// The object's path relative to the store's `objects/` directory: a two-hex-digit fan-out
    /// directory, then the full hash.
    pub(crate) fn rel_path(&self) -> String {
        let hex = self.to_hex();
        format!("{}/{}", &hex[..2], hex)
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", &self.to_hex()[..16])
    }
}

/// Error of [`ObjectId::from_str`].
#[derive(Debug, thiserror::Error)]
#[error("not an object id: expected 64 hex digits")]
pub struct ParseObjectIdError;

impl FromStr for ObjectId {
    type Err = ParseObjectIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        blake3::Hash::from_hex(s)
            .map(|h| ObjectId(*h.as_bytes()))
            .map_err(|_| ParseObjectIdError)
    }
}

// An object id crosses the wire as its 64 hex digits, as it is shown everywhere else.
#[cfg(feature = "serde")]
impl serde::Serialize for ObjectId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for ObjectId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let hex = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        hex.parse().map_err(|_| {
            serde::de::Error::custom(format!("{hex:?} is not an object id (64 hex digits)"))
        })
    }
}

/// What staging computed for an object: its id, size and CRC32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ObjectMeta {
    /// BLAKE3 content hash.
    #[cfg_attr(feature = "serde", serde(rename = "object"))]
    pub id: ObjectId,
    /// Length in bytes.
    pub size: u64,
    /// CRC32 (IEEE) of the bytes.
    pub crc32: u32,
}

/// Hashes an [`ObjectId`] by its first eight bytes: it is a cryptographic hash already, so
/// SipHash over all 32 bytes (the default) only costs time on the staging path's maps.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // `[u8; 32]` hashes as its length, then its bytes: the bytes are the id.
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(word);
    }
}

/// Builds [`IdHasher`]s, for maps and sets keyed by [`ObjectId`].
pub(crate) type IdHash = std::hash::BuildHasherDefault<IdHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Different ids hash apart (by their leading bytes), equal ids alike.
    #[test]
    fn ids_hash_by_their_leading_bytes() {
        let build = IdHash::default();
        let a = ObjectId::of(b"a");
        let b = ObjectId::of(b"b");
        assert_eq!(build.hash_one(a), build.hash_one(a));
        assert_ne!(build.hash_one(a), build.hash_one(b));
        let mut set: std::collections::HashSet<ObjectId, IdHash> = Default::default();
        for i in 0..1000u32 {
            assert!(set.insert(ObjectId::of(&i.to_le_bytes())));
        }
        assert_eq!(set.len(), 1000);
    }
}
