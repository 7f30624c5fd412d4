//! Text for messages: cutting text and stored records at a character boundary (never inside a UTF-8
//! sequence, so the result is still a `str`), and the message a panic carries.

/// The longest prefix of `s` of at most `max` bytes that ends at a character boundary.
pub(crate) fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` for display in a message: unchanged up to `max` bytes, else cut to fit `max` bytes with
/// a trailing `...`.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    format!("{}...", prefix(s, max.saturating_sub(3)))
}

/// The message a panic's payload carries (`panic!` with a literal or a formatted string), for
/// the failed state or the error it leaves; "no message" for any other payload.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_land_on_character_boundaries() {
        assert_eq!(prefix("abc", 5), "abc");
        assert_eq!(prefix("abcdef", 4), "abcd");
        assert_eq!(prefix("aé", 2), "a", "é is two bytes");
        assert_eq!(shorten("short", 80), "short");
        let long = "é".repeat(50);
        let s = shorten(&long, 80);
        assert!(
            s.len() <= 80 && s.ends_with("...") && s.starts_with("éé"),
            "{s}"
        );
        assert_eq!(
            shorten(&"x".repeat(81), 80),
            format!("{}...", "x".repeat(77))
        );
    }
}

/// A path on the wire as its text (`Path::display`), so that a name that is not UTF-8 (a stray
/// file someone put in the store) is still reported, not an error of the whole answer.
#[cfg(feature = "serde")]
pub(crate) mod path_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::path::{Path, PathBuf};

    pub(crate) fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&p.display())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(PathBuf::from(String::deserialize(d)?))
    }

    /// The same for a list of paths.
    pub(crate) mod list {
        use serde::ser::SerializeSeq;
        use serde::{Deserialize, Deserializer, Serializer};
        use std::path::PathBuf;

        pub(crate) fn serialize<S: Serializer>(ps: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(ps.len()))?;
            for p in ps {
                seq.serialize_element(&p.display().to_string())?;
            }
            seq.end()
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Vec<PathBuf>, D::Error> {
            Ok(Vec::<String>::deserialize(d)?
                .into_iter()
                .map(PathBuf::from)
                .collect())
        }
    }
}
