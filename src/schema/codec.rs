//! The little-endian byte codec shared by every record the engine stores: writers append, a
//! [`Reader`] consumes and turns every shortfall into an error instead of a panic, so the decoders
//! can be fuzzed.
//!
//! Every value the engine keeps in a redb table (manifest, history, claims, extensions, meta) is
//! *sealed* here: `payload ++ crc32(table ++ 0 ++ key ++ payload)`. The checksum covers the table
//! and the key as well as the value, so a damaged value, a value under a damaged key and a value
//! that ended up in the wrong table are all caught on read ([`unseal`]) and reported as
//! [`Error::Corrupt`] instead of being believed (SPEC I9). Log records carry their own
//! CRC frame (`schema/log.rs`).

use crate::error::{Error, Result};

/// Bytes the seal adds to a payload.
pub(crate) const SEAL_LEN: usize = 4;

fn seal_crc(table: &str, key: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(table.as_bytes());
    h.update(&[0]);
    h.update(&(key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(payload);
    h.finalize()
}

/// Appends the seal of `payload` (stored in `table` under `key`) to it.
pub fn seal(table: &str, key: &[u8], mut payload: Vec<u8>) -> Vec<u8> {
    let crc = seal_crc(table, key, &payload);
    put_u32(&mut payload, crc);
    payload
}

/// Checks a sealed value read from `table` under `key` and returns its payload. `unit` names the
/// record for the error (the unit key, or the meta entry's name).
pub(crate) fn unseal<'a>(
    table: &'static str,
    key: &[u8],
    unit: &str,
    sealed: &'a [u8],
) -> Result<&'a [u8]> {
    if sealed.len() < SEAL_LEN {
        return Err(Error::corrupt_record(
            table,
            unit,
            format!("{} bytes, too short to carry its checksum", sealed.len()),
        ));
    }
    let (payload, crc) = sealed.split_at(sealed.len() - SEAL_LEN);
    let mut a = [0u8; SEAL_LEN];
    a.copy_from_slice(crc);
    if u32::from_le_bytes(a) != seal_crc(table, key, payload) {
        return Err(Error::corrupt_record(
            table,
            unit,
            "its checksum does not match (the value or its key is damaged)",
        ));
    }
    Ok(payload)
}

pub(crate) fn put_u64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

pub(crate) fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// A length-prefixed (u32) UTF-8 string.
pub(crate) fn put_str(v: &mut Vec<u8>, s: &str) {
    put_u32(v, s.len() as u32);
    v.extend_from_slice(s.as_bytes());
}

/// Consumes a byte slice; `what` names the record in error messages.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { rest: bytes, what }
    }

    /// An error about this record.
    pub(crate) fn bad(&self, detail: impl std::fmt::Display) -> Error {
        Error::BadRecord(format!("{}: {detail}", self.what))
    }

    /// Bytes not consumed yet.
    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(self.bad(format_args!(
                "truncated: wanted {n} bytes, {} left",
                self.rest.len()
            )));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(a))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    /// A length-prefixed UTF-8 string, borrowed from the record.
    pub(crate) fn str_ref(&mut self) -> Result<&'a str> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        std::str::from_utf8(b).map_err(|_| self.bad("a string is not UTF-8"))
    }

    pub(crate) fn string(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.bad("a string is not UTF-8"))
    }

    /// Fails unless every byte was consumed.
    pub(crate) fn finish(self) -> Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(self.bad(format_args!("{} trailing bytes", self.rest.len())))
        }
    }
}

/// Reads `key`'s sealed value from the unit-keyed table `name` and decodes it with `decode`
/// (which checks the seal). A damaged key no longer finds its row, and a miss would then be believed: so on a
/// miss the rows on either side of `key` (where a row with a damaged key sits) are checked too,
/// and "absent" is answered only when they check out (SPEC I9). A hit costs one range lookup, a
/// miss two.
pub(crate) fn get_sealed<V>(
    table: &impl redb::ReadableTable<&'static str, &'static [u8]>,
    name: &'static str,
    key: &str,
    decode: impl Fn(&str, &[u8]) -> Result<V>,
) -> Result<Option<V>> {
    use crate::error::DbContext;
    let read = |e: redb::StorageError| Error::db("read a table", e);
    let mut after = table.range::<&str>(key..).db("read a table")?;
    if let Some(row) = after.next() {
        let (k, v) = row.map_err(read)?;
        if k.value() == key {
            return decode(key, v.value()).map(Some);
        }
        unseal(name, k.value().as_bytes(), k.value(), v.value())?;
    }
    let mut before = table.range::<&str>(..key).db("read a table")?;
    if let Some(row) = before.next_back() {
        let (k, v) = row.map_err(read)?;
        unseal(name, k.value().as_bytes(), k.value(), v.value())?;
        if k.value() >= key {
            return Err(Error::corrupt_record(
                name,
                key,
                "the table's keys are out of order",
            ));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_catches_every_flipped_bit_of_value_key_and_table() {
        let sealed = seal("claims", b"unit-a", b"payload".to_vec());
        assert_eq!(
            unseal("claims", b"unit-a", "unit-a", &sealed).unwrap(),
            b"payload"
        );
        for i in 0..sealed.len() * 8 {
            let mut bad = sealed.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(
                unseal("claims", b"unit-a", "unit-a", &bad).is_err(),
                "bit {i}"
            );
        }
        assert!(
            unseal("claims", b"unit-b", "unit-b", &sealed).is_err(),
            "other key"
        );
        assert!(
            unseal("manifest", b"unit-a", "unit-a", &sealed).is_err(),
            "other table"
        );
        let err = unseal("claims", b"u", "u", &[1, 2])
            .unwrap_err()
            .to_string();
        assert!(err.contains("claims") && err.contains("verify"), "{err}");
    }

    #[test]
    fn round_trip_and_every_shortfall_is_an_error() {
        let mut v = Vec::new();
        put_u64(&mut v, 7);
        put_u32(&mut v, 9);
        put_str(&mut v, "héllo");
        let mut r = Reader::new(&v, "test record");
        assert_eq!((r.u64().unwrap(), r.u32().unwrap()), (7, 9));
        assert_eq!(r.string().unwrap(), "héllo");
        r.finish().unwrap();
        for n in 0..v.len() {
            let mut r = Reader::new(&v[..n], "test record");
            let ok = r.u64().and_then(|_| r.u32()).and_then(|_| r.string());
            let err = ok.unwrap_err().to_string();
            assert!(err.contains("test record: truncated"), "{err}");
        }
        let mut r = Reader::new(&[1, 2], "x");
        r.u8().unwrap();
        assert!(r
            .finish()
            .unwrap_err()
            .to_string()
            .contains("1 trailing bytes"));
    }
}
