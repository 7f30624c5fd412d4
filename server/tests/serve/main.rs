//! `oncelake serve` (SPEC R20) end to end and per concern. One test binary; `serve_bounds` (it
//! lowers the process's descriptor limit and measures its CPU) is its own.

#[path = "../../../tests/common/parquet.rs"]
mod parquet_files;
mod support;

mod boundary;
mod end_to_end;
mod get_output;
mod identity;
mod keepalive;
mod pipeline_cells;
mod progress;
mod routed;
mod shutdown;
mod status_page;
mod table;
mod threads;
