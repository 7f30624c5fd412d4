//! `oncelake-bench commit --via-server` runs the workload it is given on both sides: by default a
//! fresh store with sequential keys, with `--preload N --keys random` SPEC P1's (a preloaded
//! store, half new units and half new versions of preloaded ones) — through the server too.

use crate::support;

fn bench_lines(extra: &[&str]) -> Vec<serde_json::Value> {
    let scratch = tempfile::tempdir().unwrap();
    let mut args = vec![
        "commit",
        "--via-server",
        "--clients",
        "1,4",
        "--commits",
        "120",
        "--seconds",
        "20s",
        "--json",
        "--dir",
        scratch.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = support::oncelake_bench_served()
        .args(&args)
        .output()
        .unwrap();
    let lines = support::json_lines(&out);
    assert_eq!(lines.len(), 2, "{lines:?}");
    // Scratch stores are removed.
    support::nothing_left_in(scratch.path());
    lines
}

#[test]
fn the_default_is_a_fresh_store_with_sequential_keys() {
    for l in bench_lines(&[]) {
        assert_eq!(l["preload"], 0, "{l}");
        assert_eq!(l["keys"], "sequential", "{l}");
        assert_eq!(l["via_server_units"], 120, "{l}");
    }
}

#[test]
fn preload_and_random_keys_are_honoured_through_the_server() {
    // Every commit must be applied (a random key's update carries a newer version than the
    // preloaded one; a stale or duplicate answer fails the bench).
    for l in bench_lines(&["--preload", "3000", "--keys", "random"]) {
        assert_eq!(l["preload"], 3000, "{l}");
        assert_eq!(l["keys"], "random", "{l}");
        assert_eq!(l["via_server_units"], 120, "{l}");
    }
}

/// The server side's store holds the preload and gets the same keys as the in-process side.
#[test]
fn the_served_store_holds_the_preload_and_updates_rise() {
    use oncelake_bench::bench_commit::{
        preload_oncelake_store, unit_key, KeySource, Keys, Workload,
    };
    let scratch = tempfile::tempdir().unwrap();
    let w = Workload {
        preload: 500,
        keys: Keys::Random,
        tuning: Default::default(),
    };
    let source = KeySource::new(w);
    let keys = |t: usize, n: usize| oncelake_bench::via_server::keys_of(&source, t, n);
    let seen = std::sync::Mutex::new(Vec::new());
    let prepare = |p: &std::path::Path| {
        preload_oncelake_store(p, w)?;
        let s = oncelake::Store::open(p).map_err(|e| e.to_string())?;
        let found = (0..w.preload)
            .filter(|&i| s.lookup(&unit_key(Keys::Random, i)).unwrap().is_some())
            .count();
        seen.lock().unwrap().push(found);
        Ok(())
    };
    let served = oncelake_bench::via_server::Workload {
        prepare: &prepare,
        keys: &keys,
    };
    let r = oncelake_bench::via_server::commits_via_server_with(
        support::oncelake(),
        scratch.path(),
        4,
        200,
        std::time::Duration::from_secs(20),
        &served,
    )
    .unwrap();
    assert_eq!(r.units, 200);
    assert_eq!(*seen.lock().unwrap(), vec![500]);
}

/// `--rounds N` runs both sides N times per client count and quotes the median of the rounds'
/// own ratios; the units are those of every round.
#[test]
fn rounds_quote_the_median_of_the_rounds_ratios() {
    for l in bench_lines(&["--rounds", "3"]) {
        assert_eq!(l["rounds"], 3, "{l}");
        assert_eq!(l["via_server_units"], 3 * 120, "{l}");
        let mut ratios: Vec<f64> = l["round_ratios"]
            .as_array()
            .expect("round_ratios")
            .iter()
            .map(|r| r.as_f64().expect("a ratio"))
            .collect();
        assert_eq!(ratios.len(), 3, "{l}");
        assert!(ratios.iter().all(|r| *r > 0.0), "{l}");
        ratios.sort_by(f64::total_cmp);
        assert_eq!(l["ratio"].as_f64(), Some(ratios[1]), "{l}");
    }
}

#[test]
fn rounds_must_be_positive_and_go_with_via_server() {
    let zero = support::oncelake_bench()
        .args(["commit", "--via-server", "--rounds", "0"])
        .output()
        .unwrap();
    assert_eq!(zero.status.code(), Some(2), "{zero:?}");
    assert!(
        String::from_utf8_lossy(&zero.stderr).contains("--rounds"),
        "{zero:?}"
    );
    let alone = support::oncelake_bench()
        .args(["commit", "--rounds", "2"])
        .output()
        .unwrap();
    assert_eq!(alone.status.code(), Some(2), "{alone:?}");
}
