//! `oncelake simulate --pipeline`: the worked example's pipeline mode (SPEC R24), cells run with
//! and without early cutoff after a source bump (`oncelake_sim::pipeline`).

use super::{exit, print_json, CliError};
use oncelake_sim::pipeline::{simulate_pipeline, PipelineSimConfig, PipelineSimReport};
use serde_json::json;
use std::path::Path;

/// What `--pipeline` takes from the command line.
pub(crate) struct PipelineSimArgs {
    pub units: u64,
    pub workers: usize,
    pub bump: f64,
    pub changed: f64,
    pub seed: u64,
    pub json: bool,
}

/// Runs the pipeline mode into `root` and prints its report; exit 1 unless both drains finished
/// every cell and agree on every output.
pub(crate) fn run(a: &PipelineSimArgs, root: &Path) -> Result<u8, CliError> {
    let cfg = PipelineSimConfig {
        units: a.units,
        workers: a.workers,
        bump: a.bump,
        changed: a.changed,
        seed: a.seed,
        ..PipelineSimConfig::new(root.join("pipeline"))
    };
    let r = simulate_pipeline(&cfg)?;
    if a.json {
        print_json(&report_json(&r));
    } else {
        print_table(&r);
    }
    let cells = r.units * r.stages.len() as u64;
    let ok = r.outputs_equal && r.with_cutoff.done == cells && r.without_cutoff.done == cells;
    Ok(if ok { exit::OK } else { exit::FAILURE })
}

fn report_json(r: &PipelineSimReport) -> serde_json::Value {
    json!({
        "mode": "pipeline",
        "units": r.units,
        "stages": r.stages,
        "bumped_units": r.bumped,
        "changed_units": r.changed,
        "cells_run_with_cutoff": r.with_cutoff.total_runs(),
        "cells_run_without_cutoff": r.without_cutoff.total_runs(),
        "runs_per_stage_with_cutoff": r.with_cutoff.runs,
        "runs_per_stage_without_cutoff": r.without_cutoff.runs,
        "cut_off_per_stage": r.with_cutoff.cut_off,
        "cells_cut_off_counted": r.with_cutoff.cut_off_counted,
        "cells_done_with_cutoff": r.with_cutoff.done,
        "cells_done_without_cutoff": r.without_cutoff.done,
        "outputs_equal": r.outputs_equal,
        "elapsed_ms": r.elapsed.as_secs_f64() * 1000.0,
    })
}

fn print_table(r: &PipelineSimReport) {
    outln!(
        "pipeline {} over {} units; {} units bumped to source version 2, {} of them with a changed first-stage output",
        r.stages.join(" -> "),
        r.units,
        r.bumped,
        r.changed
    );
    outln!(
        "{:<16}{:>18}{:>18}{:>10}",
        "stage",
        "runs (cutoff)",
        "runs (no cutoff)",
        "cut off"
    );
    for (i, s) in r.stages.iter().enumerate() {
        outln!(
            "{s:<16}{:>18}{:>18}{:>10}",
            r.with_cutoff.runs[i],
            r.without_cutoff.runs[i],
            r.with_cutoff.cut_off[i]
        );
    }
    outln!(
        "{:<16}{:>18}{:>18}{:>10}",
        "total",
        r.with_cutoff.total_runs(),
        r.without_cutoff.total_runs(),
        r.with_cutoff.cut_off.iter().sum::<u64>()
    );
    outln!(
        "outputs equal in both stores: {}; elapsed {:.2} s",
        if r.outputs_equal { "yes" } else { "NO" },
        r.elapsed.as_secs_f64()
    );
}
