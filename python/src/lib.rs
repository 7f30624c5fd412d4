//! The Python binding of oncelake (SPEC R22): a thin layer over the engine. Every decision (the
//! commit rules, claims, run-once, reconcile, pipelines) is the engine's; this crate converts
//! arguments and results, maps errors onto the exception classes of `oncelake.errors`, and
//! releases the GIL while the engine stages, commits and reads, so that Python threads share
//! commit groups.

mod backend;
mod bench;
mod convert;
mod data;
mod maint;
mod pipeline;
mod reconcile;
mod run;
mod snapshot;
mod store;
mod submit;
mod wire;

use pyo3::prelude::*;

/// The native core of the `oncelake` package; import `oncelake` instead.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<store::PyStore>()?;
    m.add_class::<data::PyStaged>()?;
    m.add_class::<submit::PyCommitHandle>()?;
    m.add_class::<run::PyRun>()?;
    m.add_class::<snapshot::PySnapshot>()?;
    m.add_class::<pipeline::PyPipeline>()?;
    m.add_class::<pipeline::PyCell>()?;
    m.add_function(wrap_pyfunction!(bench::_rust_commit_bench, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
