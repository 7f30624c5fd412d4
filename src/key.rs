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
}
