//! Cells: one (unit, stage) pair. How a cell is named in the manifest, the failure record it may
//! carry, and the states [`crate::pipeline::Pipeline::explain`] reports.
//!
//! # Where cell state lives
//!
//! - **completed**: a manifest entry under the cell key
//!   `.pipeline/cell/<stage>/<unit>/<code version>-<lineage>`, committed at the unit's source
//!   version through the ordinary commit path, so the commit rules (duplicate, conflict, stale,
//!   fenced) apply to cells unchanged. The lineage hashes the code versions of the stage and of
//!   everything upstream of it, so a changed code version gives this stage and everything
//!   downstream *new* cell keys: they are pending again, nothing else is.
//! - **running**: a claim (lease with fencing token) on the cell key.
//! - **failed**: an extension record ([`TAG_CELL_FAILED`]) in the log, kept by cell key in the
//!   extensions table: source version, attempts, last error.
//! - **source version**: a manifest entry under `.pipeline/source/<unit>`.
//!
//! Stage names never contain `/` and the suffix never does, so the encoding is unambiguous even
//! for units that contain `/`.

use crate::error::{Error, Result};
use crate::key::MAX_KEY_LEN;
use crate::object::ObjectId;
use crate::schema::codec::{put_str, Reader};

/// Prefix of every cell key in the manifest.
pub const CELL_PREFIX: &str = ".pipeline/cell/";
/// Prefix of the entries that hold units' current source versions.
pub const SOURCE_PREFIX: &str = ".pipeline/source/";
/// Log extension tag of a cell failure.
pub const TAG_CELL_FAILED: u16 = 0x5001;
/// Log extension tag of a recorded (changed) pipeline definition.
pub const TAG_DEFINITION: u16 = 0x5002;
/// The extensions-table key of the recorded definition.
pub(crate) const DEFINITION_KEY: &str = ".pipeline/definition";
/// The longest unit key a pipeline runs over: what is left of [`MAX_KEY_LEN`] after the cell
/// key's prefix, the longest stage name and the suffix.
pub const MAX_PIPELINE_UNIT_LEN: usize = MAX_KEY_LEN - CELL_PREFIX.len() - 64 - 2 - (20 + 1 + 16);
/// Longer error messages are cut to this many bytes in failure records.
pub const MAX_ERROR_LEN: usize = 4096;

/// A cell key, decoded.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CellKey {
    /// The stage.
    pub stage: String,
    /// The unit.
    pub unit: String,
    /// The stage's code version the cell was computed with.
    pub code_version: u64,
    /// The stage's lineage (see [`crate::pipeline::PipelineDef::lineage`]).
    pub lineage: String,
}

impl CellKey {
    /// The manifest key.
    pub fn encode(&self) -> String {
        format!(
            "{CELL_PREFIX}{}/{}/{}-{}",
            self.stage, self.unit, self.code_version, self.lineage
        )
    }

    /// Decodes a manifest key; `None` if it is not a well-formed cell key.
    pub fn parse(key: &str) -> Option<CellKey> {
        let rest = key.strip_prefix(CELL_PREFIX)?;
        let (stage, rest) = rest.split_once('/')?;
        let (unit, suffix) = rest.rsplit_once('/')?;
        let (cv, lineage) = suffix.split_once('-')?;
        if stage.is_empty()
            || unit.is_empty()
            || cv.is_empty()
            || !cv.bytes().all(|b| b.is_ascii_digit())
            || lineage.len() != 16
            || !lineage.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return None;
        }
        Some(CellKey {
            stage: stage.to_string(),
            unit: unit.to_string(),
            code_version: cv.parse().ok()?,
            lineage: lineage.to_string(),
        })
    }
}

/// The manifest key holding `unit`'s current source version.
pub fn source_key(unit: &str) -> String {
    format!("{SOURCE_PREFIX}{unit}")
}

/// Why a pipeline refuses a unit key under `.pipeline/` (the reason of its
/// [`Error::InvalidKey`]).
pub const RESERVED_UNIT_REASON: &str = "it is under `.pipeline/`, where the pipeline engine \
     keeps its own units; a pipeline runs over your units (e.g. orders/day=1)";

/// Checks that `unit` can be run through a pipeline (unit key rules, not an internal unit, and
/// short enough for its cell keys). A pipeline's units are the user's: one under `.pipeline/`
/// would nest the engine's keys in each other (`.pipeline/source/.pipeline/...`).
pub fn validate_pipeline_unit(unit: &str) -> Result<()> {
    crate::key::validate_key(unit)?;
    if crate::key::is_internal_key(unit) {
        return Err(Error::InvalidKey {
            key: crate::text::shorten(unit, 80),
            reason: RESERVED_UNIT_REASON,
        });
    }
    if unit.len() > MAX_PIPELINE_UNIT_LEN {
        return Err(Error::InvalidRequest(format!(
            "unit key of {} bytes is too long for a pipeline: cell keys add a prefix and suffix, \
             so pipeline units are at most {MAX_PIPELINE_UNIT_LEN} bytes",
            unit.len()
        )));
    }
    Ok(())
}

/// A cell's recorded failure: the content of a [`TAG_CELL_FAILED`] log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The cell key.
    pub cell: String,
    /// The source version the failed run was for.
    pub source_version: u64,
    /// Failed runs of this cell at this source version, this one included.
    pub attempts: u32,
    /// The fencing token of the run's lease, if it held one.
    pub token: Option<u64>,
    /// Who ran it.
    pub worker: String,
    /// The error the stage returned.
    pub error: String,
}

impl Failure {
    /// The record payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(48 + self.cell.len() + self.error.len());
        v.push(1);
        put_str(&mut v, &self.cell);
        v.extend_from_slice(&self.source_version.to_le_bytes());
        v.extend_from_slice(&self.attempts.to_le_bytes());
        match self.token {
            Some(t) => {
                v.push(1);
                v.extend_from_slice(&t.to_le_bytes());
            }
            None => v.push(0),
        }
        put_str(&mut v, &self.worker);
        put_str(&mut v, &self.error);
        v
    }

    /// Decodes a payload; malformed input is an error, never a panic.
    pub fn decode(b: &[u8]) -> Result<Failure> {
        let mut r = record_reader(b, "cell failure")?;
        let cell = r.string()?;
        let source_version = r.u64()?;
        let attempts = r.u32()?;
        let token = match r.u8()? {
            0 => None,
            1 => Some(r.u64()?),
            t => return Err(bad(format!("token flag {t} is neither 0 nor 1"))),
        };
        let worker = r.string()?;
        let error = r.string()?;
        r.finish()?;
        Ok(Failure {
            cell,
            source_version,
            attempts,
            token,
            worker,
            error,
        })
    }
}

/// A recorded pipeline definition: the content of a [`TAG_DEFINITION`] log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefinitionRecord {
    /// The definition, in the file format.
    pub text: String,
    /// What changed since the previous one and which stages that invalidates.
    pub reason: String,
}

impl DefinitionRecord {
    /// The record payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(9 + self.text.len() + self.reason.len());
        v.push(1);
        put_str(&mut v, &self.text);
        put_str(&mut v, &self.reason);
        v
    }

    /// Decodes a payload; malformed input is an error, never a panic.
    pub fn decode(b: &[u8]) -> Result<DefinitionRecord> {
        let mut r = record_reader(b, "definition")?;
        let text = r.string()?;
        let reason = r.string()?;
        r.finish()?;
        Ok(DefinitionRecord { text, reason })
    }
}

/// Why a cell's earlier completion no longer counts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "reason", rename_all = "snake_case"))]
pub enum StaleReason {
    /// It was completed for an older source version of the unit.
    NewerSource {
        /// The version it was completed for.
        completed: u64,
        /// The unit's current version.
        current: u64,
    },
    /// It was completed with another code version of this stage.
    CodeChanged {
        /// The code version it was completed with.
        from: u64,
        /// The stage's code version now.
        to: u64,
    },
    /// Same code version, but an upstream stage's code changed, so its inputs are re-run.
    UpstreamRerun,
}

impl std::fmt::Display for StaleReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaleReason::NewerSource { completed, current } => write!(
                f,
                "newer source version: completed for {completed}, the unit is now at {current}"
            ),
            StaleReason::CodeChanged { from, to } => {
                write!(f, "code version changed from {from} to {to}")
            }
            StaleReason::UpstreamRerun => {
                write!(
                    f,
                    "upstream re-run: an upstream stage's code version changed"
                )
            }
        }
    }
}

/// How the latest change of a unit's source reached a done cell (SPEC R24): the cell re-ran, or
/// the wave of re-runs stopped above it because none of its inputs changed (early cutoff).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "wave", rename_all = "snake_case"))]
pub enum Wave {
    /// It re-ran: completed for the unit's current source version after an earlier completion of
    /// the same cell (same code versions) for `previous_version`. When `object` equals
    /// `previous_object` its output is unchanged and the wave stops here: the cells downstream of
    /// it that depend on nothing else that changed are cut off.
    Reran {
        /// The source version of its previous completion.
        previous_version: u64,
        /// That completion's output.
        previous_object: ObjectId,
        /// The output it has now.
        object: ObjectId,
    },
    /// Cut off: it did not re-run. Its completion for an older source version counts as done at
    /// the current one because every input it read then (the source bytes, or each upstream
    /// cell's output) is the input it would read now.
    CutOff {
        /// The source version its completion (still counting) was computed for.
        completed: u64,
        /// The unit's current source version.
        current: u64,
        /// Each unchanged input: the upstream stage (`None`: the unit's source) and the hash of
        /// its output, the same then and now.
        unchanged: Vec<(Option<String>, ObjectId)>,
    },
}

impl Wave {
    /// True for a cut-off cell.
    pub fn is_cut_off(&self) -> bool {
        matches!(self, Wave::CutOff { .. })
    }
}

/// A hash, short, for people (the JSON forms carry it whole).
fn short(id: &ObjectId) -> String {
    id.to_hex()[..16].to_string()
}

impl std::fmt::Display for Wave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wave::Reran {
                previous_version,
                previous_object,
                object,
            } if previous_object == object => write!(
                f,
                "re-ran: unchanged output (hash {}, as for source version {previous_version}); \
                 the wave stops here",
                short(object)
            ),
            Wave::Reran {
                previous_version,
                previous_object,
                object,
            } => write!(
                f,
                "re-ran: output changed (hash {} for source version {previous_version}, now {})",
                short(previous_object),
                short(object)
            ),
            Wave::CutOff {
                completed,
                current,
                unchanged,
            } => {
                write!(
                    f,
                    "cut off at source version {current}, not re-run: unchanged output of "
                )?;
                for (i, (stage, id)) in unchanged.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    match stage {
                        Some(s) => write!(f, "{sep}{s} (hash {})", short(id))?,
                        None => write!(f, "{sep}the source (hash {})", short(id))?,
                    }
                }
                write!(
                    f,
                    "; its completion for source version {completed} still counts"
                )
            }
        }
    }
}

/// A cell's state, as [`crate::pipeline::Pipeline::explain`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "state", rename_all = "snake_case"))]
pub enum CellState {
    /// Completed for the unit's current source version with the stage's current lineage.
    Done {
        /// The source version.
        source_version: u64,
        /// The code version.
        code_version: u64,
        /// The commit that completed it.
        seq: u64,
        /// The output object.
        object: ObjectId,
    },
    /// A worker holds a live lease on it.
    Running {
        /// Who.
        worker: String,
        /// The lease's fencing token.
        token: u64,
        /// The source version the worker is computing.
        source_version: u64,
        /// When the lease may be taken over, ms since the Unix epoch.
        expires_at_ms: u64,
    },
    /// Every upstream cell is done; it may run now.
    Ready {
        /// Earlier failed runs at this source version (0 on a first run).
        attempts: u32,
        /// The last of their errors.
        last_error: Option<String>,
    },
    /// An upstream cell is not done yet.
    Blocked {
        /// The first upstream stage (in the order listed) whose cell is not done.
        upstream: String,
        /// That cell's state, in a word (ready, running, blocked, failed).
        // The long path keeps serde from borrowing the word from the input (it reads back as
        // one of the engine's own words, `state_word`).
        #[cfg_attr(feature = "serde", serde(deserialize_with = "state_word"))]
        upstream_state: &'static std::primitive::str,
    },
    /// It failed `max_attempts` times at this source version and is not retried until the source
    /// version or a code version changes.
    Failed {
        /// Failed runs.
        attempts: u32,
        /// The last error.
        last_error: String,
    },
}

impl CellState {
    /// The state in a word: done, running, ready, blocked, failed.
    pub fn name(&self) -> &'static str {
        match self {
            CellState::Done { .. } => "done",
            CellState::Running { .. } => "running",
            CellState::Ready { .. } => "ready",
            CellState::Blocked { .. } => "blocked",
            CellState::Failed { .. } => "failed",
        }
    }
}

/// A state's word read back as the engine's own `&'static str` (the five of [`CellState::name`]).
#[cfg(feature = "serde")]
fn state_word<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    const WORDS: [&str; 5] = ["done", "running", "ready", "blocked", "failed"];
    let word = <String as serde::Deserialize>::deserialize(d)?;
    WORDS
        .into_iter()
        .find(|w| *w == word)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown cell state {word:?}")))
}

/// One cell of a unit, explained.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CellView {
    /// The stage.
    pub stage: String,
    /// The cell key under the stage's current lineage.
    pub key: String,
    /// Its state.
    pub state: CellState,
    /// Set when the cell was completed before but that completion no longer counts.
    pub stale: Option<StaleReason>,
    /// For a done cell: whether it re-ran for the current source version or was cut off
    /// (`None`: neither, e.g. its first completion). [`crate::pipeline::Pipeline::status`] and
    /// [`crate::pipeline::Pipeline::cells`] leave `Reran` out (it costs a history read per cell).
    #[cfg_attr(feature = "serde", serde(default))]
    pub wave: Option<Wave>,
}

impl std::fmt::Display for CellView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.stage)?;
        match &self.state {
            CellState::Done {
                source_version,
                code_version,
                seq,
                ..
            } => write!(
                f,
                "done at source version {source_version}, code version {code_version}, seq {seq}"
            )?,
            CellState::Running {
                worker,
                token,
                expires_at_ms,
                source_version,
            } => write!(
                f,
                "running by {worker} (token {token}, source version {source_version}) until {expires_at_ms} ms"
            )?,
            CellState::Ready {
                attempts: 0,
                ..
            } => write!(f, "ready: every upstream cell is done")?,
            CellState::Ready {
                attempts,
                last_error,
            } => write!(
                f,
                "ready to retry after {attempts} failed attempt(s), last error: {}",
                last_error.as_deref().unwrap_or("")
            )?,
            CellState::Blocked {
                upstream,
                upstream_state,
            } => write!(f, "blocked on {upstream} ({upstream_state})")?,
            CellState::Failed {
                attempts,
                last_error,
            } => write!(
                f,
                "failed after {attempts} attempt(s), last error: {last_error}"
            )?,
        }
        if let Some(s) = &self.stale {
            write!(f, "; stale: {s}")?;
        }
        if let Some(w) = &self.wave {
            write!(f, "; {w}")?;
        }
        Ok(())
    }
}

fn bad(detail: String) -> Error {
    Error::BadRecord(detail)
}

/// A reader of the payload `b` of a `what` record, past its format byte (1, the only format).
fn record_reader<'b>(b: &'b [u8], what: &str) -> Result<Reader<'b>> {
    let mut r = Reader::new(b, "pipeline record");
    let format = r.u8()?;
    if format != 1 {
        return Err(bad(format!("{what} format {format} is not supported")));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::prefix as truncate;

    #[test]
    fn cell_keys_round_trip_and_are_unambiguous() {
        let k = CellKey {
            stage: "store_b".into(),
            unit: "orders/customer=4/2/x".into(),
            code_version: 12,
            lineage: "0123456789abcdef".into(),
        };
        let s = k.encode();
        assert_eq!(
            s,
            ".pipeline/cell/store_b/orders/customer=4/2/x/12-0123456789abcdef"
        );
        assert_eq!(CellKey::parse(&s), Some(k));
        for bad in [
            ".pipeline/cell/a//1-0123456789abcdef",
            ".pipeline/cell/a/u/x-0123456789abcdef",
            ".pipeline/cell/a/u/1-0123",
            ".pipeline/cell//u/1-0123456789abcdef",
            ".pipeline/source/u",
            "u",
        ] {
            assert_eq!(CellKey::parse(bad), None, "{bad}");
        }
        let long = "u".repeat(MAX_PIPELINE_UNIT_LEN);
        let k = CellKey {
            stage: "s".repeat(64),
            unit: long.clone(),
            code_version: u64::MAX,
            lineage: "0123456789abcdef".into(),
        };
        assert!(crate::key::validate_key(&k.encode()).is_ok());
        assert!(validate_pipeline_unit(&long).is_ok());
        assert!(validate_pipeline_unit(&format!("{long}u")).is_err());
        assert!(matches!(
            validate_pipeline_unit(".pipeline/source/u"),
            Err(Error::InvalidKey {
                reason: RESERVED_UNIT_REASON,
                ..
            })
        ));
    }

    #[test]
    fn failures_round_trip_and_reject_garbage() {
        let f = Failure {
            cell: "c".into(),
            source_version: 3,
            attempts: 2,
            token: Some(9),
            worker: "w".into(),
            error: "boom ✗".into(),
        };
        let b = f.encode();
        assert_eq!(Failure::decode(&b).unwrap(), f);
        for n in 0..b.len() {
            assert!(Failure::decode(&b[..n]).is_err());
        }
        assert_eq!(truncate("ééé", 3), "é");
    }
}
