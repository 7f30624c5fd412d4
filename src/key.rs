//! Unit keys: the names of logical units of work.

use crate::error::{Error, Result};

/// The longest unit key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// Checks a unit key against the rules of SPEC §2: UTF-8 (guaranteed by `&str`), 1..=1024 bytes,
/// no control characters.
///
/// ```
/// assert!(oncelake::validate_key("orders/customer=42/date=2026-11-29").is_ok());
/// assert!(oncelake::validate_key("").is_err());
/// assert!(oncelake::validate_key("bad\nkey").is_err());
/// ```
pub fn validate_key(key: &str) -> Result<()> {
    let reason = if key.is_empty() {
        "it is empty"
    } else if key.len() > MAX_KEY_LEN {
        "it is longer than 1024 bytes"
    } else if key.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(Error::InvalidKey {
        key: crate::text::shorten(key, 80),
        reason,
    })
}

/// Key prefixes of the engine's internal units (the pipeline engine's source versions, cells and
/// definition). Only the engine writes them: a user commit of such a key is refused (see
/// [`validate_user_key`]), and listings for people hide them unless asked for.
pub const INTERNAL_PREFIXES: &[&str] = &[".pipeline/"];

/// Whether `key` names an internal unit (one of [`INTERNAL_PREFIXES`]).
///
/// ```
/// assert!(oncelake::is_internal_key(".pipeline/source/orders/day=1"));
/// assert!(!oncelake::is_internal_key("orders/.pipeline/day=1"));
/// ```
pub fn is_internal_key(key: &str) -> bool {
    INTERNAL_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// [`validate_key`], and refuses the keys of internal units: the rule at the boundary of every
/// user write (a batch not built by the engine itself), so that no caller can forge or overwrite
/// a pipeline cell, source version or definition through the ordinary commit path.
///
/// ```
/// assert!(oncelake::validate_user_key("orders/day=1").is_ok());
/// assert!(oncelake::validate_user_key(".pipeline/cell/a/u/1-0123456789abcdef").is_err());
/// ```
pub fn validate_user_key(key: &str) -> Result<()> {
    validate_key(key)?;
    if is_internal_key(key) {
        return Err(Error::InvalidKey {
            key: crate::text::shorten(key, 80),
            reason: "keys under `.pipeline/` are reserved for the pipeline engine's own units; \
                     record source versions and cell outputs through `oncelake::pipeline`",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rules() {
        assert!(validate_key("a").is_ok());
        assert!(validate_key(&"k".repeat(1024)).is_ok());
        assert!(validate_key(&"k".repeat(1025)).is_err());
        assert!(validate_key("").is_err());
        assert!(validate_key("a\u{7f}b").is_err());
        assert!(validate_key("tab\there").is_err());
        assert!(validate_key("ünïcödé/ok").is_ok());
        let long = "é".repeat(600);
        let msg = validate_key(&long).unwrap_err().to_string();
        assert!(msg.contains("longer than 1024"), "{msg}");
    }

    #[test]
    fn internal_keys_are_refused_for_users_only() {
        for k in [
            ".pipeline/source/u",
            ".pipeline/cell/s/u/1-0123456789abcdef",
            ".pipeline/definition",
        ] {
            assert!(validate_key(k).is_ok(), "{k}");
            let msg = validate_user_key(k).unwrap_err().to_string();
            assert!(msg.contains("reserved for the pipeline engine"), "{msg}");
        }
        for k in ["pipeline/u", ".pipelines/u", "a/.pipeline/u", ".pipeline"] {
            assert!(validate_user_key(k).is_ok(), "{k}");
        }
    }
}
