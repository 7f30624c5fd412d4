//! How commands print: the [`Output`] mode every printer takes, JSON lines, and times for people.
//!
//! Each command prints through one printer function taking the engine's result types (for
//! example [`super::store_cmds::print_ls`]), so that the same output comes out whichever path
//! produced the result (in-process or through a server). The field names of the JSON lines are
//! the contract of docs/cli.md: one name per concept in every command, the same fields whatever
//! the outcome (`null` where a field does not apply).

use std::sync::atomic::{AtomicBool, Ordering};

/// How a command prints its results.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Output {
    /// One JSON object per line on standard output (errors as a JSON object on standard error).
    pub json: bool,
}

impl Output {
    /// The mode of a command with a `--json` flag.
    pub(crate) fn new(json: bool) -> Self {
        Output { json }
    }
}

/// Set once by `main` when the command line asked for `--json`, so that an error (even one from
/// argument parsing) is written as a JSON object.
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

pub(crate) fn set_json_errors(on: bool) {
    JSON_ERRORS.store(on, Ordering::Relaxed);
}

pub(crate) fn json_errors() -> bool {
    JSON_ERRORS.load(Ordering::Relaxed)
}

/// Prints one JSON object per line.
pub(crate) fn print_json(v: &serde_json::Value) -> bool {
    super::write_out(format_args!("{v}"), true)
}

/// A time in milliseconds since the Unix epoch as an RFC 3339 date in UTC, to the millisecond
/// (`2026-11-29T08:15:00.123Z`): what people read; JSON keeps the milliseconds.
pub(crate) fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `100000` as `100,000`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Another worker's lease in an answer: under --json its fields in `v` (`outcome`, `holder`,
/// `expires_at_ms`), for people `says` on standard error (`claim` found the unit held,
/// `pipeline fail` the cell claimed).
pub(crate) fn held_by_another(
    out: &Output,
    v: &mut serde_json::Value,
    outcome: &str,
    (holder, expires_at_ms): (&str, u64),
    says: std::fmt::Arguments<'_>,
) {
    v["outcome"] = outcome.into();
    v["holder"] = holder.into();
    v["expires_at_ms"] = expires_at_ms.into();
    if !out.json {
        errln!("{says}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_026_500_123), "2026-11-30T08:15:00.123Z");
        assert_eq!(rfc3339(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }
}
