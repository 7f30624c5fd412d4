//! Source listings: `(unit, version)` rows read from a CSV or JSON-lines file, or given by the API.
//!
//! The parsers are small, strict and allocation-free per row once warm (they write the unit into a
//! reused buffer), so a full reconcile streams a listing of any length in constant memory. They
//! do not use serde: the library stays lean, and a hand-written parser is easy to fuzz
//! ([`parse_line`] is the fuzzing entry point).
//!
//! Formats:
//! - **CSV**: `unit,version` per line. The version is the text after the *last* comma, so unit keys
//!   may contain commas without quoting; a unit may also be written as a CSV quoted field
//!   (`"a,b ""quoted"" key",7`). An optional header line `unit,version` is allowed on line 1 only.
//! - **JSON lines**: one object per line with exactly the fields `unit` (a string) and `version`
//!   (a non-negative integer that fits in 64 bits), in either order: `{"unit": "a", "version": 7}`.
//!   String escapes (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\uXXXX` with surrogate pairs)
//!   are decoded; anything else is refused.
//!
//! Every unit key is checked against the key rules (SPEC §2). Empty lines are skipped; a UTF-8 byte
//! order mark on line 1 and a `\r` before each `\n` are tolerated.

use crate::key::{is_internal_key, validate_user_key};
use std::io::BufRead;
use std::path::Path;

/// The syntax of a listing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListingFormat {
    /// `unit,version` lines, optional `unit,version` header.
    Csv,
    /// `{"unit": "...", "version": N}` lines.
    JsonLines,
}

impl ListingFormat {
    /// The format a file name implies: `.csv` → CSV; `.jsonl`, `.ndjson`, `.json` → JSON lines.
    pub fn from_path(path: &Path) -> Option<ListingFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "csv" => Some(ListingFormat::Csv),
            "jsonl" | "ndjson" | "json" => Some(ListingFormat::JsonLines),
            _ => None,
        }
    }

    /// Guesses the format from the first line of a listing: `{` starts JSON lines, anything else
    /// is CSV.
    pub fn sniff(first_line: &[u8]) -> ListingFormat {
        let first = first_line
            .strip_prefix(b"\xEF\xBB\xBF".as_slice())
            .unwrap_or(first_line)
            .iter()
            .find(|b| !b.is_ascii_whitespace());
        match first {
            Some(b'{') => ListingFormat::JsonLines,
            _ => ListingFormat::Csv,
        }
    }

    /// `csv` or `jsonl`.
    pub fn name(self) -> &'static str {
        match self {
            ListingFormat::Csv => "csv",
            ListingFormat::JsonLines => "jsonl",
        }
    }

    fn example(self) -> &'static str {
        match self {
            ListingFormat::Csv => {
                "write each line as `unit,version`, e.g. `orders/date=2026-11-29,7`"
            }
            ListingFormat::JsonLines => {
                "write each line as {\"unit\": \"orders/date=2026-11-29\", \"version\": 7}"
            }
        }
    }
}

/// Why a listing was refused. Every variant names the line (1-based; for listings given through
/// the API, the position of the pair) and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListingError {
    /// The line does not have the shape of its format.
    #[error("line {line}: {reason}; {hint}")]
    Malformed {
        /// The line.
        line: u64,
        /// What is wrong with it.
        reason: String,
        /// How a good line looks.
        hint: &'static str,
    },
    /// The version is not a non-negative integer that fits in 64 bits.
    #[error("line {line}: version {text:?} is not a whole number from 0 to 18446744073709551615; a source version is an unsigned 64-bit integer (larger is newer)")]
    BadVersion {
        /// The line.
        line: u64,
        /// The version as written (shortened).
        text: String,
    },
    /// The unit key breaks the key rules.
    #[error("line {line}: invalid unit key {key:?}: {reason} (a unit key is UTF-8, 1..=1024 bytes, without control characters, not under `.pipeline/`); fix or drop that line")]
    InvalidKey {
        /// The line.
        line: u64,
        /// The key as written (shortened).
        key: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The same unit is listed twice with different versions, so its current version is unknown.
    #[error("unit {unit:?} is listed twice with different versions: {first_version} on line {first_line} and {version} on line {line}; keep only the current version of each unit")]
    Duplicate {
        /// The unit.
        unit: String,
        /// Where it was first listed.
        first_line: u64,
        /// The version listed there.
        first_version: u64,
        /// Where it was listed again.
        line: u64,
        /// The version listed there.
        version: u64,
    },
    /// A full listing is not in key order, so it cannot be merged in one pass.
    #[error("line {line}: unit {unit:?} comes after {previous:?} (line {previous_line}), but this one-pass merge needs a listing sorted by unit in byte order; use reconcile_full_unsorted, which sorts it first in bounded memory, sort it (e.g. `LC_ALL=C sort -t, -k1,1` for CSV without a header), or reconcile it as changes only (reconcile_changes), which needs no order but does not report units unknown to the source")]
    Unsorted {
        /// The line out of order.
        line: u64,
        /// Its unit.
        unit: String,
        /// The line before it.
        previous_line: u64,
        /// The unit on that line.
        previous: String,
    },
    /// The listing could not be read.
    #[error("reading the listing at line {line}: {source}")]
    Io {
        /// The line being read.
        line: u64,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl ListingError {
    /// The line the error is about (for a duplicate: the second occurrence).
    pub fn line(&self) -> u64 {
        match self {
            ListingError::Malformed { line, .. }
            | ListingError::BadVersion { line, .. }
            | ListingError::InvalidKey { line, .. }
            | ListingError::Duplicate { line, .. }
            | ListingError::Unsorted { line, .. }
            | ListingError::Io { line, .. } => *line,
        }
    }

    /// A stable name of the error's kind: `malformed`, `bad_version`, `invalid_key`,
    /// `duplicate`, `unsorted` or `io` (what a server answers for a refused listing).
    pub fn kind(&self) -> &'static str {
        match self {
            ListingError::Malformed { .. } => "malformed",
            ListingError::BadVersion { .. } => "bad_version",
            ListingError::InvalidKey { .. } => "invalid_key",
            ListingError::Duplicate { .. } => "duplicate",
            ListingError::Unsorted { .. } => "unsorted",
            ListingError::Io { .. } => "io",
        }
    }
}

/// One row of a listing. The unit borrows from the source until its next row is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row<'a> {
    /// The unit key (valid by the key rules).
    pub unit: &'a str,
    /// The source's current version of the unit.
    pub version: u64,
    /// Where the row came from (1-based line, or position for API listings).
    pub line: u64,
}

/// A stream of listing rows. Implemented by [`ListingReader`] (files) and [`Pairs`] (the API);
/// it is a lending iterator so that rows need no allocation.
pub trait ListingSource {
    /// The next row, `None` at the end.
    fn next_row(&mut self) -> Result<Option<Row<'_>>, ListingError>;
}

impl<S: ListingSource + ?Sized> ListingSource for &mut S {
    fn next_row(&mut self) -> Result<Option<Row<'_>>, ListingError> {
        (**self).next_row()
    }
}

/// Parses one line of a listing into `(unit, version)`. The line must not contain its newline.
/// Errors report line 1; [`ListingReader`] reports the real line. This is the fuzzing entry point:
/// it never panics, whatever the input.
///
/// ```
/// use oncelake::reconcile::{parse_line, ListingFormat};
/// assert_eq!(parse_line(ListingFormat::Csv, "a/b,7").unwrap(), ("a/b".to_string(), 7));
/// assert_eq!(
///     parse_line(ListingFormat::JsonLines, r#"{"version": 3, "unit": "x\u00e9"}"#).unwrap(),
///     ("xé".to_string(), 3)
/// );
/// assert!(parse_line(ListingFormat::Csv, "a/b,-1").is_err());
/// ```
pub fn parse_line(format: ListingFormat, line: &str) -> Result<(String, u64), ListingError> {
    let mut unit = String::new();
    let version = parse_into(format, line, &mut unit, 1)?;
    Ok((unit, version))
}

/// The same as [`parse_line`] (a second name for fuzz targets and callers that say "listing").
pub fn parse_listing_line(
    format: ListingFormat,
    line: &str,
) -> Result<(String, u64), ListingError> {
    parse_line(format, line)
}

/// Parses `text` (one line, no newline) into `unit` (cleared first) and returns the version.
pub(crate) fn parse_into(
    format: ListingFormat,
    text: &str,
    unit: &mut String,
    line: u64,
) -> Result<u64, ListingError> {
    unit.clear();
    let version = match format {
        ListingFormat::Csv => parse_csv(text, unit, line)?,
        ListingFormat::JsonLines => parse_json(text, unit, line)?,
    };
    check_key(unit, line)?;
    Ok(version)
}

fn check_key(unit: &str, line: u64) -> Result<(), ListingError> {
    // Fast path for the common printable-ASCII key; anything else gets the full rules.
    // (A fold without early exit, so that it vectorises.)
    if !unit.is_empty()
        && unit.len() <= crate::MAX_KEY_LEN
        && unit
            .bytes()
            .fold(true, |ok, b| ok & (0x20..0x7f).contains(&b))
        && !is_internal_key(unit)
    {
        return Ok(());
    }
    // A source lists user units; `.pipeline/...` belongs to the engine (and is left out of the
    // manifest side of the merge).
    validate_user_key(unit).map_err(|e| match e {
        crate::Error::InvalidKey { key, reason } => ListingError::InvalidKey { line, key, reason },
        other => ListingError::Malformed {
            line,
            reason: other.to_string(),
            hint: "fix or drop that line",
        },
    })
}

fn malformed(format: ListingFormat, line: u64, reason: impl Into<String>) -> ListingError {
    ListingError::Malformed {
        line,
        reason: reason.into(),
        hint: format.example(),
    }
}

/// A decimal u64 with only ASCII digits (no sign, no spaces inside).
fn parse_version(text: &str, line: u64) -> Result<u64, ListingError> {
    let bad = || ListingError::BadVersion {
        line,
        text: crate::text::shorten(text, 40),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse::<u64>().map_err(|_| bad())
}

fn parse_csv(text: &str, unit: &mut String, line: u64) -> Result<u64, ListingError> {
    let f = ListingFormat::Csv;
    let version_text = if let Some(rest) = text.strip_prefix('"') {
        // A quoted field: `""` is a literal quote; the field ends at a lone quote.
        let mut chars = rest.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            if c == '"' {
                if rest[i + 1..].starts_with('"') {
                    unit.push('"');
                    chars.next();
                } else {
                    end = Some(i + 1);
                    break;
                }
            } else {
                unit.push(c);
            }
        }
        let end = end.ok_or_else(|| malformed(f, line, "the quoted unit has no closing quote"))?;
        rest[end..].strip_prefix(',').ok_or_else(|| {
            malformed(
                f,
                line,
                "expected a comma and the version after the quoted unit",
            )
        })?
    } else {
        let (u, v) = text.rsplit_once(',').ok_or_else(|| {
            malformed(
                f,
                line,
                format!(
                    "{:?} has no comma between unit and version",
                    crate::text::shorten(text, 40)
                ),
            )
        })?;
        unit.push_str(u);
        v
    };
    parse_version(version_text.trim_matches(' '), line)
}

/// A strict reader of one JSON object with the fields `unit` and `version`.
struct Json<'a> {
    s: &'a [u8],
    i: usize,
    line: u64,
}

impl<'a> Json<'a> {
    fn err(&self, reason: impl Into<String>) -> ListingError {
        malformed(ListingFormat::JsonLines, self.line, reason)
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\r' | b'\n') {
            self.i += 1;
        }
    }

    fn expect(&mut self, b: u8, what: &str) -> Result<(), ListingError> {
        self.ws();
        if self.s.get(self.i) == Some(&b) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(format!("expected {what} at byte {}", self.i + 1)))
        }
    }

    fn hex4(&mut self) -> Result<u32, ListingError> {
        let digits = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("a \\u escape needs four hex digits"))?;
        let mut n = 0u32;
        for &d in digits {
            let v = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.err("a \\u escape needs four hex digits"))?;
            n = n * 16 + v;
        }
        self.i += 4;
        Ok(n)
    }

    /// A string, decoded into `out`. The opening quote is at `self.i`.
    fn string(&mut self, out: &mut String) -> Result<(), ListingError> {
        self.expect(b'"', "a string")?;
        loop {
            // Copy the run of plain bytes at once: the input is valid UTF-8 and the run stops at
            // an ASCII byte, so it ends on a character boundary.
            let start = self.i;
            while self.i < self.s.len() && !matches!(self.s[self.i], b'"' | b'\\' | 0..=0x1f) {
                self.i += 1;
            }
            let run = std::str::from_utf8(&self.s[start..self.i])
                .map_err(|_| self.err("the string is not valid UTF-8"))?;
            out.push_str(run);
            match self.s.get(self.i) {
                None => return Err(self.err("the string has no closing quote")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.i += 1;
                    let e = *self
                        .s
                        .get(self.i)
                        .ok_or_else(|| self.err("the string ends inside an escape"))?;
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&hi) {
                                if self.s.get(self.i..self.i + 2) != Some(b"\\u".as_slice()) {
                                    return Err(self.err(
                                        "a high surrogate must be followed by a \\u low surrogate",
                                    ));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err(
                                        "a high surrogate must be followed by a low surrogate",
                                    ));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            let c = char::from_u32(c).ok_or_else(|| {
                                self.err("a \\u escape names no character (lone surrogate)")
                            })?;
                            out.push(c);
                        }
                        _ => return Err(self.err(format!("unknown escape \\{}", e as char))),
                    }
                }
                Some(_) => {
                    return Err(self.err("a control character must be escaped inside a string"))
                }
            }
        }
    }

    /// A JSON number that must be a non-negative integer.
    fn version(&mut self) -> Result<u64, ListingError> {
        self.ws();
        let start = self.i;
        while self.i < self.s.len()
            && matches!(
                self.s[self.i],
                b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
            )
        {
            self.i += 1;
        }
        // invariant: only ASCII bytes were consumed, so this is valid UTF-8.
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        if text.is_empty() {
            return Err(self.err("\"version\" must be a number, e.g. \"version\": 7"));
        }
        if text.len() > 1 && text.starts_with('0') {
            return Err(ListingError::BadVersion {
                line: self.line,
                text: crate::text::shorten(text, 40),
            });
        }
        parse_version(text, self.line)
    }
}

fn parse_json(text: &str, unit: &mut String, line: u64) -> Result<u64, ListingError> {
    let mut p = Json {
        s: text.as_bytes(),
        i: 0,
        line,
    };
    p.expect(b'{', "`{` (a JSON object)")?;
    let (mut have_unit, mut version) = (false, None);
    let mut name = String::new();
    loop {
        name.clear();
        p.ws();
        p.string(&mut name)?;
        p.expect(b':', "`:` after a field name")?;
        match name.as_str() {
            "unit" if !have_unit => {
                p.ws();
                if p.s.get(p.i) != Some(&b'"') {
                    return Err(p.err("\"unit\" must be a string"));
                }
                p.string(unit)?;
                have_unit = true;
            }
            "version" if version.is_none() => version = Some(p.version()?),
            "unit" | "version" => return Err(p.err(format!("field {name:?} appears twice"))),
            other => {
                return Err(p.err(format!(
                    "unexpected field {:?}; only \"unit\" and \"version\" are allowed",
                    crate::text::shorten(other, 40)
                )))
            }
        }
        p.ws();
        match p.s.get(p.i) {
            Some(b',') => p.i += 1,
            Some(b'}') => {
                p.i += 1;
                break;
            }
            _ => return Err(p.err(format!("expected `,` or `}}` at byte {}", p.i + 1))),
        }
    }
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("unexpected text after the object (one object per line)"));
    }
    match (have_unit, version) {
        (true, Some(v)) => Ok(v),
        (false, _) => Err(p.err("the field \"unit\" is missing")),
        (true, None) => Err(p.err("the field \"version\" is missing")),
    }
}

/// Reads a listing file line by line, in constant memory.
pub struct ListingReader<R> {
    reader: R,
    format: ListingFormat,
    buf: Vec<u8>,
    unit: String,
    line: u64,
}

impl<R: BufRead> ListingReader<R> {
    /// A reader of `format` lines from `reader`.
    pub fn new(reader: R, format: ListingFormat) -> Self {
        ListingReader {
            reader,
            format,
            buf: Vec::with_capacity(256),
            unit: String::with_capacity(256),
            line: 0,
        }
    }

    /// The number of lines read so far.
    pub fn lines_read(&self) -> u64 {
        self.line
    }
}

impl<R: BufRead> ListingSource for ListingReader<R> {
    fn next_row(&mut self) -> Result<Option<Row<'_>>, ListingError> {
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|source| ListingError::Io {
                    line: self.line + 1,
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            let mut bytes = self.buf.as_slice();
            bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            if self.line == 1 {
                bytes = bytes
                    .strip_prefix(b"\xEF\xBB\xBF".as_slice())
                    .unwrap_or(bytes);
            }
            if bytes.is_empty() {
                continue;
            }
            let text = std::str::from_utf8(bytes).map_err(|e| {
                malformed(
                    self.format,
                    self.line,
                    format!("not valid UTF-8 (at byte {})", e.valid_up_to() + 1),
                )
            })?;
            if self.line == 1
                && self.format == ListingFormat::Csv
                && text.trim().eq_ignore_ascii_case("unit,version")
            {
                continue;
            }
            let version = parse_into(self.format, text, &mut self.unit, self.line)?;
            return Ok(Some(Row {
                unit: &self.unit,
                version,
                line: self.line,
            }));
        }
    }
}

/// A listing given through the API: an iterator of `(unit, version)` pairs. Keys are checked
/// against the key rules; the "line" of a pair is its 1-based position.
pub struct Pairs<I, S> {
    iter: I,
    current: Option<S>,
    pos: u64,
}

impl<I, S> Pairs<I, S>
where
    I: Iterator<Item = (S, u64)>,
    S: AsRef<str>,
{
    /// Wraps `pairs` (anything iterable over `(unit, version)` with `unit: AsRef<str>`).
    pub fn new(pairs: impl IntoIterator<IntoIter = I>) -> Self {
        Pairs {
            iter: pairs.into_iter(),
            current: None,
            pos: 0,
        }
    }
}

impl<I, S> ListingSource for Pairs<I, S>
where
    I: Iterator<Item = (S, u64)>,
    S: AsRef<str>,
{
    fn next_row(&mut self) -> Result<Option<Row<'_>>, ListingError> {
        let Some((unit, version)) = self.iter.next() else {
            return Ok(None);
        };
        self.pos += 1;
        check_key(unit.as_ref(), self.pos)?;
        let unit: &S = self.current.insert(unit);
        Ok(Some(Row {
            unit: S::as_ref(unit),
            version,
            line: self.pos,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ListingFormat::{Csv, JsonLines};

    #[test]
    fn csv_lines() {
        assert_eq!(parse_line(Csv, "a,1").unwrap(), ("a".into(), 1));
        assert_eq!(parse_line(Csv, "a,b,c,2").unwrap(), ("a,b,c".into(), 2));
        assert_eq!(parse_line(Csv, "a, 3 ").unwrap(), ("a".into(), 3));
        assert_eq!(
            parse_line(Csv, r#""x,""y"",z",4"#).unwrap(),
            (r#"x,"y",z"#.into(), 4)
        );
        assert_eq!(
            parse_line(Csv, "k,18446744073709551615").unwrap().1,
            u64::MAX
        );
        for bad in [
            "nocomma",
            "a,",
            "a,-1",
            "a,+1",
            "a,1.5",
            "a,18446744073709551616",
            ",1",
            "\"open,1",
            "\"q\"x,1",
            "a\u{1}b,1",
        ] {
            assert!(parse_line(Csv, bad).is_err(), "{bad:?} should be refused");
        }
        let e = parse_line(Csv, "a,abc").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("\"abc\""), "{e}");
    }

    #[test]
    fn json_lines() {
        let ok = |s: &str| parse_line(JsonLines, s).unwrap();
        assert_eq!(ok(r#"{"unit":"a","version":1}"#), ("a".into(), 1));
        assert_eq!(ok(r#" { "version" : 0 , "unit" : "b" } "#), ("b".into(), 0));
        assert_eq!(
            ok(r#"{"unit":"q\"\\\/x\u00e9\ud83d\ude00","version":2}"#),
            ("q\"\\/xé😀".into(), 2)
        );
        for bad in [
            "",
            "{}",
            r#"{"unit":"a"}"#,
            r#"{"version":1}"#,
            r#"{"unit":"a","version":1,"extra":2}"#,
            r#"{"unit":"a","unit":"b","version":1}"#,
            r#"{"unit":"a","version":-1}"#,
            r#"{"unit":"a","version":1.0}"#,
            r#"{"unit":"a","version":1e3}"#,
            r#"{"unit":"a","version":01}"#,
            r#"{"unit":"a","version":"1"}"#,
            r#"{"unit":1,"version":1}"#,
            r#"{"unit":"a","version":1} x"#,
            r#"{"unit":"a","version":1,}"#,
            r#"{"unit":"a\nb","version":1}"#,
            r#"{"unit":"a\ud800","version":1}"#,
            r#"{"unit":"a\x","version":1}"#,
            r#"{"unit":"a"#,
            "{\"unit\":\"a\tb\",\"version\":1}",
            r#"[1]"#,
        ] {
            assert!(
                parse_line(JsonLines, bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn reader_skips_header_bom_blank_lines_and_names_lines() {
        let text = "\u{feff}unit,version\r\na,1\r\n\nb,2\nc,x\n";
        let mut r = ListingReader::new(text.as_bytes(), Csv);
        let row = r.next_row().unwrap().unwrap();
        assert_eq!((row.unit, row.version, row.line), ("a", 1, 2));
        let row = r.next_row().unwrap().unwrap();
        assert_eq!((row.unit, row.version, row.line), ("b", 2, 4));
        let e = r.next_row().unwrap_err();
        assert_eq!(e.line(), 5);
        // A header anywhere but line 1 is a bad line.
        let mut r = ListingReader::new("a,1\nunit,version\n".as_bytes(), Csv);
        r.next_row().unwrap();
        assert_eq!(r.next_row().unwrap_err().line(), 2);
    }

    #[test]
    fn formats_by_name_and_sniffing() {
        assert_eq!(ListingFormat::from_path(Path::new("x.CSV")), Some(Csv));
        assert_eq!(
            ListingFormat::from_path(Path::new("x.jsonl")),
            Some(JsonLines)
        );
        assert_eq!(ListingFormat::from_path(Path::new("x.txt")), None);
        assert_eq!(ListingFormat::sniff(b"  {\"unit\""), JsonLines);
        assert_eq!(ListingFormat::sniff(b"\xEF\xBB\xBF{"), JsonLines);
        assert_eq!(ListingFormat::sniff(b"a,1"), Csv);
    }
}
