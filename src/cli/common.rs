//! Helpers every command uses: opening a store, parsing durations, printing JSON lines.

use super::CliError;
use oncelake::{Options, Store};
use std::path::Path;
use std::time::Duration;

/// Opens an existing store (or creates one if `create`), waiting up to `wait` for its lock.
pub(crate) fn open_store(path: &Path, wait: Duration, create: bool) -> Result<Store, CliError> {
    if !create && !path.join(oncelake::MARKER_FILE).exists() {
        return Err(CliError::Usage(format!(
            "{} is not an oncelake store; create one with `oncelake init {}`",
            path.display(),
            path.display()
        )));
    }
    let options = Options {
        lock_wait: wait,
        ..Options::default()
    };
    match Store::open_with(path, options.clone()) {
        // A store on read-only media (or in a directory this user cannot write): open it
        // read-only, so reads work and writes are refused with a clear error.
        Err(oncelake::Error::Io { source, .. }) if !create && cannot_write(&source) => {
            Ok(Store::open_with(
                path,
                Options {
                    read_only: true,
                    ..options
                },
            )?)
        }
        other => Ok(other?),
    }
}

fn cannot_write(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
    )
}

/// Parses `30s`, `5m`, `1h`, `7d`, `250ms`, or a bare number of seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration; write it like 30s, 5m, 1h or 7d"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit {unit:?}; use ms, s, m, h or d (e.g. 30s, 7d)"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s:?} is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Prints one JSON object per line.
pub(crate) fn print_json(v: &serde_json::Value) {
    println!("{v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(parse_duration("12").unwrap(), Duration::from_secs(12));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-3s").is_err());
    }
}
