//! Maintenance and the work built on the store: gc, reconcile, fencing, and pipelines (with
//! cut-off). One test binary, one module per subject.

#[path = "../bin/mod.rs"]
mod bin;
#[path = "../common/mod.rs"]
mod common;
#[path = "../common/vfs.rs"]
mod hooked_vfs;

mod fencing;
mod gc;
mod gc_stress;
mod pipeline;
mod pipeline_cutoff;
mod reconcile;
