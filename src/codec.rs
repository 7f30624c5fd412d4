//! The little-endian byte codec shared by the self-describing records (commit log, pipeline
//! records): writers append, a [`Reader`] consumes and turns every shortfall into an error
//! instead of a panic, so the decoders can be fuzzed.

use crate::error::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;

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
