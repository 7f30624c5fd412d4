//! The change feed (SPEC R8) as a store method: the log records after a seq, streaming.

use crate::error::Result;
use crate::schema::log::Record;
use crate::store::Store;

impl Store {
    /// The commit log records after `seq`, oldest first, as of the newest commit (a convenience
    /// for [`crate::Snapshot::changes_since`] on a fresh snapshot). The iterator holds its own
    /// read view: commits made while it runs are not seen.
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = oncelake::Store::open(dir.path().join("lake"))?;
    /// let first = store.put("a", 1, b"x")?.outcome.seq().unwrap();
    /// store.put("b", 1, b"y")?;
    /// let later: Vec<u64> = store.changes_since(first)?.map(|r| r.map(|r| r.seq)).collect::<Result<_, _>>()?;
    /// assert_eq!(later, [first + 1]);
    /// # Ok(()) }
    /// ```
    pub fn changes_since(&self, seq: u64) -> Result<impl Iterator<Item = Result<Record>>> {
        self.snapshot()?.changes_since(seq)
    }
}
