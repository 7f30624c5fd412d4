//! Durations as command-line flags write them (`30s`, `5m`, `7d`): one parser for `oncelake`
//! (every command, and the progress period `ONCELAKE_PROGRESS_INTERVAL`) and `oncelake-bench`,
//! both of which link this crate.

use std::time::Duration;

/// Parses `30s`, `5m`, `1h`, `7d`, `250ms`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
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
    if secs > MAX_DURATION_SECS {
        return Err(format!(
            "{s:?} is too long; the longest duration accepted is 36500d (100 years)"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?} is not a valid duration: {e}"))
}

/// The longest duration any flag accepts: 100 years. Longer means "never" in practice, and keeps
/// every duration far from the limits of the millisecond clock arithmetic behind leases and GC.
const MAX_DURATION_SECS: f64 = 36_500.0 * 86_400.0;

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
        // Out of range is an error, never a panic (Duration::from_secs_f64 panics).
        for huge in [
            "99999999999999999999999",
            "99999999999999999999d",
            "36501d",
            "18446744073709551616s",
        ] {
            let e = parse_duration(huge).unwrap_err();
            assert!(e.contains("too long") || e.contains("not"), "{huge}: {e}");
        }
        assert_eq!(
            parse_duration("36500d").unwrap(),
            Duration::from_secs(36_500 * 86_400)
        );
    }
}
