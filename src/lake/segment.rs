//! One log segment of a lake: one commit group, written once with put-if-absent at
//! `log/<N:020>` (SPEC R23).
//!
//! ```text
//! "OLSEG" | version u8 | N u64 | BLAKE3 of segment N-1 [32] | node u64 | nonce u64 | time_ms u64
//!         | frame length u32 | the group's write-ahead frame (wal::redo) | CRC32 of all before
//! ```
//!
//! The frame is the group's physical redo, the record a single store appends to its write-ahead
//! log, so a node applies another node's segment exactly as recovery applies a record. The hash
//! of the previous segment chains the log: a replica that applied something else at N-1 (it
//! diverged) cannot apply N. The nonce tells the writer its own segment from another node's
//! when a response was lost and the segment is read back.

/// A decoded segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Its place in the log (= the group's number).
    pub n: u64,
    /// BLAKE3 of segment `n - 1`'s bytes (zeros for segment 1).
    pub prev: [u8; 32],
    /// The node that wrote it (its store id).
    pub node: u64,
    /// Random per attempt: whose write this is.
    pub nonce: u64,
    /// The log time of the group: never below the previous segment's.
    pub time_ms: u64,
    /// The group's write-ahead frame.
    pub frame: Vec<u8>,
}

const MAGIC: &[u8; 5] = b"OLSEG";
const VERSION: u8 = 1;
const HEAD: usize = 5 + 1 + 8 + 32 + 8 + 8 + 8 + 4;

/// The BLAKE3 hash a segment's successor names.
pub(crate) fn hash(bytes: &[u8]) -> [u8; 32] {
    *blake3::hash(bytes).as_bytes()
}

/// The object path of segment `n`: zero-padded, so names sort in log order.
pub(crate) fn path(n: u64) -> String {
    format!("log/{n:020}")
}

impl Segment {
    /// Its bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + self.frame.len() + 4);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.n.to_le_bytes());
        out.extend_from_slice(&self.prev);
        out.extend_from_slice(&self.node.to_le_bytes());
        out.extend_from_slice(&self.nonce.to_le_bytes());
        out.extend_from_slice(&self.time_ms.to_le_bytes());
        out.extend_from_slice(&(self.frame.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.frame);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes the bytes read at `log/<n>`; the error says what is wrong with them.
    pub(crate) fn decode(n: u64, b: &[u8]) -> Result<Segment, String> {
        if b.len() < HEAD + 4 {
            return Err(format!("segment {n} is too short ({} bytes)", b.len()));
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32fast::hash(body) != u32::from_le_bytes(arr(crc)) {
            return Err(format!("segment {n} fails its checksum"));
        }
        if &body[..5] != MAGIC || body[5] != VERSION {
            return Err(format!("segment {n} is not a version-{VERSION} segment"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(arr(&body[i..i + 8]));
        let stamped = u64_at(6);
        if stamped != n {
            return Err(format!("segment {n} says it is segment {stamped}"));
        }
        let len = u32::from_le_bytes(arr(&body[HEAD - 4..HEAD])) as usize;
        if body.len() != HEAD + len {
            return Err(format!(
                "segment {n}'s frame length {len} does not match its size"
            ));
        }
        Ok(Segment {
            n,
            prev: arr(&body[14..46]),
            node: u64_at(46),
            nonce: u64_at(54),
            time_ms: u64_at(62),
            frame: body[HEAD..].to_vec(),
        })
    }
}

/// Checks a codec of the lake's objects: `bytes` decode back to `value`, and flipping any one
/// byte (by `flip`) or cutting the last one off is refused.
#[cfg(test)]
pub(super) fn assert_decodes_only_undamaged<T: PartialEq + std::fmt::Debug>(
    value: &T,
    bytes: &[u8],
    flip: u8,
    decode: impl Fn(&[u8]) -> Result<T, String>,
) {
    assert_eq!(&decode(bytes).unwrap(), value);
    for i in 0..bytes.len() {
        let mut bad = bytes.to_vec();
        bad[i] ^= flip;
        assert!(decode(&bad).is_err(), "byte {i}");
    }
    assert!(decode(&bytes[..bytes.len() - 1]).is_err());
}

fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(b);
    a
}

/// A fresh random nonce (the standard library's per-process random hash keys, mixed with a
/// counter and the time, so two attempts never share one).
pub(crate) fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg() -> Segment {
        Segment {
            n: 7,
            prev: [3; 32],
            node: 11,
            nonce: 13,
            time_ms: 17,
            frame: b"frame bytes".to_vec(),
        }
    }

    #[test]
    fn a_segment_round_trips_and_any_flipped_byte_is_refused() {
        let b = seg().encode();
        assert_decodes_only_undamaged(&seg(), &b, 0x40, |b| Segment::decode(7, b));
        assert!(Segment::decode(8, &b)
            .unwrap_err()
            .contains("says it is segment 7"));
    }

    #[test]
    fn paths_sort_in_log_order_and_nonces_differ() {
        assert!(path(9) < path(10));
        assert_eq!(path(1), "log/00000000000000000001");
        assert_ne!(nonce(), nonce());
    }
}
