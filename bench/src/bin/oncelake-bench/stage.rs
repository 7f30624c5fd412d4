//! `oncelake-bench stage` (SPEC P4): staging and committing objects against raw write + fsync of
//! the same bytes, alternating round by round in the same run.

use super::scratch::Probe;
use super::{print_json, BenchError};
use oncelake_bench::bench_stage::{Measurement, Plan, StageBench, System};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct StageBenchArgs {
    /// Writer threads (both systems).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Object sizes, comma separated: bytes, or with a KiB / MiB suffix.
    #[arg(long, value_delimiter = ',', default_value = "1MiB,64KiB", value_parser = parse_size)]
    pub sizes: Vec<usize>,
    /// Rounds per size; each round runs raw, then oncelake.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bytes each run writes at most (the run stops earlier at --seconds); with a KiB / MiB /
    /// GiB suffix.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub bytes: usize,
    /// Time limit of each run (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = super::parse_duration)]
    pub seconds: Duration,
    /// Directory for the scratch files, created if missing (default: the system's temporary
    /// directory). Put it on the disk you want to measure. Nothing is deleted until the bench
    /// ends, so it needs room for up to rounds × sizes × 2 × --bytes.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `1048576`, `64KiB`, `1MiB`, `1GiB` (also `K`, `M`, `G`, `KB`: binary units all).
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => {
            return Err(format!(
                "unknown size unit in {s:?}; use bytes, KiB, MiB or GiB"
            ))
        }
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size; write e.g. 1MiB or 65536"))?;
    n.checked_mul(1usize << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("size {s:?} is out of range; use 1 byte up to a few GiB"))
}

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
pub(super) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The median over the rounds of one size of oncelake / raw within the round: the two runs of a
/// round are back to back, so a disk that slows down for a while slows both.
fn median_round_ratio(results: &[(usize, Measurement)], size: usize) -> Option<f64> {
    let rate = |round: usize, system: System| {
        results
            .iter()
            .find(|(r, m)| *r == round && m.system == system && m.object_bytes == size)
            .map(|(_, m)| m.mib_per_sec())
    };
    let mut rounds: Vec<usize> = results.iter().map(|(r, _)| *r).collect();
    rounds.sort_unstable();
    rounds.dedup();
    median(
        rounds
            .into_iter()
            .filter_map(|r| ratio(rate(r, System::Raw), rate(r, System::Oncelake)))
            .collect(),
    )
}

/// Medians of one size: (raw, oncelake) MiB/s.
fn medians(results: &[(usize, Measurement)], size: usize) -> (Option<f64>, Option<f64>) {
    let of = |system: System| {
        median(
            results
                .iter()
                .filter(|(_, m)| m.system == system && m.object_bytes == size)
                .map(|(_, m)| m.mib_per_sec())
                .collect(),
        )
    };
    (of(System::Raw), of(System::Oncelake))
}

/// `oncelake-bench stage`.
pub(crate) fn run(a: StageBenchArgs) -> Result<u8, BenchError> {
    if a.threads == 0 || a.rounds == 0 || a.sizes.is_empty() {
        return Err(BenchError::Usage(
            "--threads, --rounds and --sizes need positive values, e.g. --threads 4 --rounds 3 \
             --sizes 1MiB,64KiB"
                .into(),
        ));
    }
    let scratch = super::scratch::scratch_dir(a.dir.clone())?;
    let probe = |when: &str| super::scratch::probe(&scratch, when);
    let mut probes = vec![probe("before")?];
    let mut bench = StageBench::new(&scratch).map_err(BenchError::Usage)?;
    let runs = a.sizes.len() * a.rounds * System::ALL.len();
    let bar = indicatif::ProgressBar::new(runs as u64);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    let mut results: Vec<(usize, Measurement)> = Vec::new();
    for &size in &a.sizes {
        let plan = Plan {
            threads: a.threads,
            object_bytes: size,
            max_bytes: a.bytes as u64,
            max_time: a.seconds,
        };
        for round in 1..=a.rounds {
            for system in System::ALL {
                bar.set_message(format!("{} {} B round {round}", system.name(), size));
                let m = bench.run(system, plan).map_err(|e| {
                    BenchError::Usage(format!("bench stage {}: {e}", system.name()))
                })?;
                bar.inc(1);
                results.push((round, m));
            }
        }
    }
    bar.finish_and_clear();
    drop(bench);
    probes.push(probe("after")?);
    if a.json {
        print_jsons(&a, &results, &probes);
    } else {
        print_table(&a, &results, &probes);
    }
    Ok(0)
}

fn print_jsons(a: &StageBenchArgs, results: &[(usize, Measurement)], probes: &[Probe]) {
    super::scratch::print_probes("stage", probes);
    for (round, m) in results {
        print_json(&json!({
            "bench": "stage",
            "system": m.system.name(),
            "threads": m.threads,
            "object_size": m.object_bytes,
            "round": round,
            "objects_written": m.objects,
            "bytes_written": m.bytes(),
            "seconds": m.elapsed.as_secs_f64(),
            "mib_per_s": m.mib_per_sec(),
            "p50_us": m.p50_us,
            "p99_us": m.p99_us,
            "commit_groups": m.groups,
        }));
    }
    for &size in &a.sizes {
        let (raw, ours) = medians(results, size);
        print_json(&json!({
            "bench": "stage",
            "threads": a.threads,
            "object_size": size,
            "rounds": a.rounds,
            "raw_mib_per_s": raw,
            "oncelake_mib_per_s": ours,
            "ratio_vs_raw": ratio(raw, ours),
            "round_ratio_median": median_round_ratio(results, size),
        }));
    }
}

fn ratio(raw: Option<f64>, ours: Option<f64>) -> Option<f64> {
    Some(ours? / raw?.max(1e-9))
}

fn print_table(a: &StageBenchArgs, results: &[(usize, Measurement)], probes: &[Probe]) {
    outln!(
        "stage + commit vs raw write + fdatasync, {} threads, raw then oncelake per round; \
         disk fdatasync(4 KiB) p50: {}",
        a.threads,
        super::scratch::probes_text(probes)
    );
    outln!(
        "{:<9} {:>12} {:>5} {:>8} {:>10} {:>9} {:>9} {:>7}",
        "system",
        "object bytes",
        "round",
        "objects",
        "MiB/s",
        "p50 µs",
        "p99 µs",
        "groups"
    );
    for (round, m) in results {
        outln!(
            "{:<9} {:>12} {:>5} {:>8} {:>10.1} {:>9} {:>9} {:>7}",
            m.system.name(),
            m.object_bytes,
            round,
            m.objects,
            m.mib_per_sec(),
            m.p50_us,
            m.p99_us,
            m.groups.map_or_else(|| "-".into(), |g| g.to_string())
        );
    }
    outln!();
    outln!(
        "{:>12} {:>14} {:>18} {:>12} {:>16}",
        "object bytes",
        "raw MiB/s",
        "oncelake MiB/s",
        "of raw",
        "of raw by round"
    );
    let fmt = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
    for &size in &a.sizes {
        let (raw, ours) = medians(results, size);
        let pct = |r: Option<f64>| r.map_or_else(|| "-".into(), |r| format!("{:.0}%", r * 100.0));
        outln!(
            "{:>12} {:>14} {:>18} {:>12} {:>16}",
            size,
            fmt(raw),
            fmt(ours),
            pct(ratio(raw, ours)),
            pct(median_round_ratio(results, size))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1 parsec").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
    }
}
