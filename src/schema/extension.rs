//! Extension records of a higher layer (pipelines), kept by key in `EXTENSIONS`:
//! `seq (u64) ++ data`, sealed. Written only by the leader's extension op, in the same
//! transaction as its `RecordBody::Extension` log record.

use super::codec::{put_u64, seal, unseal, Reader, SEAL_LEN};
use super::EXTENSIONS_TABLE;
use crate::error::{Error, Result};

/// The sealed `EXTENSIONS` value of `key`.
pub(crate) fn encode(key: &str, seq: u64, data: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(8 + data.len() + SEAL_LEN);
    put_u64(&mut value, seq);
    value.extend_from_slice(data);
    seal(EXTENSIONS_TABLE, key.as_bytes(), value)
}

/// Splits `key`'s sealed value into the seq that wrote it and its data, checking the seal.
pub(crate) fn decode<'a>(key: &str, v: &'a [u8]) -> Result<(u64, &'a [u8])> {
    decode_payload(key, unseal(EXTENSIONS_TABLE, key.as_bytes(), key, v)?)
}

/// Splits an unsealed payload (a checked seal's content, or a format-1 value).
pub(crate) fn decode_payload<'a>(key: &str, v: &'a [u8]) -> Result<(u64, &'a [u8])> {
    let mut r = Reader::new(v, "extension record");
    let seq = r
        .u64()
        .map_err(|e| Error::corrupt_record(EXTENSIONS_TABLE, key, e.to_string()))?;
    Ok((seq, r.take(r.remaining())?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn extension_values_round_trip_and_check_their_key() {
        let v = super::encode("k", 7, b"data");
        assert_eq!(super::decode("k", &v).unwrap(), (7, &b"data"[..]));
        assert!(super::decode("j", &v).is_err(), "another key");
        assert!(super::decode("k", &v[..6]).is_err(), "truncated");
    }
}
