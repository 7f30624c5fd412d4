//! Parquet files for the tests of lake tables (the engine's `tables` feature and the server's
//! table commands), kept apart from `mod.rs` because only they depend on arrow-rs.

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use std::sync::Arc;

/// A Parquet file of `rows` rows (id, name): ids from `first_id`, every name `name`.
pub fn parquet(first_id: i64, rows: usize, name: &str) -> Vec<u8> {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(
        first_id..first_id + rows as i64,
    ));
    let names: ArrayRef = Arc::new(StringArray::from_iter_values((0..rows).map(|_| name)));
    let batch = RecordBatch::try_from_iter([("id", ids), ("name", names)]).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(Vec::new(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.into_inner().unwrap()
}
