//! The worked example's pipeline mode (`oncelake simulate --pipeline`, SPEC R24) against its
//! model: a 3-stage DAG drained after a source bump, with and without early cutoff.

/// The model of the pipeline mode: every bumped unit re-runs its first stage; only those whose
/// first-stage output changed re-run the stages below, the others are cut off there. Without the
/// cutoff, every cell of a bumped unit re-runs. Both end with the same outputs.
fn check_pipeline_report(r: &oncelake_sim::pipeline::PipelineSimReport, units: u64) {
    assert_eq!(r.units, units);
    assert_eq!(r.bumped, (units as f64 * 0.01).round() as u64);
    assert_eq!(r.changed, (r.bumped as f64 * 0.5).round() as u64);
    let unchanged = r.bumped - r.changed;
    assert_eq!(r.with_cutoff.runs, [r.bumped, r.changed, r.changed]);
    assert_eq!(r.with_cutoff.cut_off, [0, unchanged, unchanged]);
    assert_eq!(r.with_cutoff.cut_off_counted, 2 * unchanged);
    assert_eq!(r.without_cutoff.runs, [r.bumped; 3]);
    assert_eq!(r.without_cutoff.cut_off, [0, 0, 0]);
    assert_eq!(r.with_cutoff.done, 3 * units);
    assert_eq!(r.without_cutoff.done, 3 * units);
    assert!(
        r.outputs_equal,
        "the cutoff skipped only work whose result it had"
    );
}

#[test]
fn simulate_pipeline_mode_measures_runs_with_and_without_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = oncelake_sim::pipeline::PipelineSimConfig {
        units: 3_000,
        ..oncelake_sim::pipeline::PipelineSimConfig::new(dir.path().join("sim"))
    };
    let r = oncelake_sim::pipeline::simulate_pipeline(&cfg).unwrap();
    check_pipeline_report(&r, 3_000);
    assert!(r.with_cutoff.total_runs() < r.without_cutoff.total_runs());
}
