//! An external merge sort of a listing, so that a full reconcile can take a listing in any order
//! in bounded memory.
//!
//! [`SortedListing::sort`] reads every row of a [`ListingSource`], keeps up to
//! [`SortConfig::run_rows`] rows (and about [`SortConfig::run_bytes`] bytes of keys) in memory,
//! sorts each such run by (unit bytes, line) and spills it to an anonymous temporary file in
//! [`SortConfig::dir`] (unlinked from the start, so nothing is left behind even after a crash).
//! It then yields the rows in key order by a k-way merge of the runs through a binary heap, one
//! buffered reader per run. A listing that fits in one run is never written to disk.
//!
//! Rows keep their original line numbers, and rows of the same unit come out in line order, so
//! [`reconcile_full`](super::reconcile_full) still names both lines of a unit listed with two
//! versions. Parse errors of the input surface from [`SortedListing::sort`], before any row is
//! yielded.
//!
//! Spill format, per row: unit length (u32 LE), unit bytes, version (u64 LE), line (u64 LE).

use super::listing::{ListingError, ListingSource, Row};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Where and in what pieces [`SortedListing`] sorts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortConfig {
    /// The directory for the temporary run files.
    pub dir: PathBuf,
    /// At most this many rows are held in memory (one run); must be at least 1.
    pub run_rows: usize,
    /// A run is also spilled once its unit keys take this many bytes.
    pub run_bytes: usize,
}

impl SortConfig {
    /// Runs of up to 1,000,000 rows or 64 MiB of keys, spilled to `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        SortConfig {
            dir: dir.into(),
            run_rows: 1_000_000,
            run_bytes: 64 << 20,
        }
    }
}

/// A row of an in-memory run: the unit is `units[start..start + len]`.
#[derive(Clone, Copy)]
struct RunRow {
    start: usize,
    len: usize,
    version: u64,
    line: u64,
}

/// The rows of the current run, units packed in one buffer.
#[derive(Default)]
struct Run {
    units: String,
    rows: Vec<RunRow>,
}

impl Run {
    fn unit(&self, r: &RunRow) -> &str {
        &self.units[r.start..r.start + r.len]
    }

    fn push(&mut self, row: &Row<'_>) {
        let start = self.units.len();
        self.units.push_str(row.unit);
        self.rows.push(RunRow {
            start,
            len: row.unit.len(),
            version: row.version,
            line: row.line,
        });
    }

    /// Sorts by (unit bytes, line): a unit's rows stay in listing order.
    fn sort(&mut self) {
        let units = &self.units;
        self.rows.sort_unstable_by(|a, b| {
            units[a.start..a.start + a.len]
                .cmp(&units[b.start..b.start + b.len])
                .then(a.line.cmp(&b.line))
        });
    }

    fn clear(&mut self) {
        self.units.clear();
        self.rows.clear();
    }
}

/// A spilled run being read back.
struct RunReader {
    reader: BufReader<File>,
}

impl RunReader {
    /// Reads the next row's unit into `unit` and returns (version, line); `None` at the end.
    fn next_into(&mut self, unit: &mut String) -> std::io::Result<Option<(u64, u64)>> {
        let mut len = [0u8; 4];
        match self.reader.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = u32::from_le_bytes(len) as usize;
        if len == 0 || len > crate::MAX_KEY_LEN {
            return Err(corrupt("a unit length out of range"));
        }
        let mut bytes = std::mem::take(unit).into_bytes();
        bytes.clear();
        bytes.resize(len, 0);
        self.reader.read_exact(&mut bytes)?;
        *unit = String::from_utf8(bytes).map_err(|_| corrupt("a unit that is not UTF-8"))?;
        let mut nums = [0u8; 16];
        self.reader.read_exact(&mut nums)?;
        let mut v = [0u8; 8];
        v.copy_from_slice(&nums[..8]);
        let mut l = [0u8; 8];
        l.copy_from_slice(&nums[8..]);
        Ok(Some((u64::from_le_bytes(v), u64::from_le_bytes(l))))
    }
}

fn corrupt(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("a temporary sort run holds {what} (the file was changed underneath)"),
    )
}

/// The smallest row of a spilled run, waiting in the merge heap.
struct Head {
    unit: String,
    version: u64,
    line: u64,
    run: usize,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head {}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Head {
    /// Reversed, so that the max-heap pops the smallest (unit, line) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .unit
            .as_bytes()
            .cmp(self.unit.as_bytes())
            .then(other.line.cmp(&self.line))
    }
}

enum State {
    /// Everything fit in one run: yield it from memory.
    Memory { run: Run, next: usize },
    /// A k-way merge of spilled runs.
    Merge {
        runs: Vec<RunReader>,
        heap: BinaryHeap<Head>,
        /// The row yielded last; its run is read again on the next call.
        current: Option<Head>,
    },
}

/// A listing in key order, made from a listing in any order by an external merge sort (see the
/// module docs). Memory is bounded by one run plus one read buffer per spilled run.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use oncelake::reconcile::{ListingSource, Pairs, SortConfig, SortedListing};
/// let dir = tempfile::tempdir()?;
/// let config = SortConfig { run_rows: 2, ..SortConfig::new(dir.path()) };
/// let mut sorted = SortedListing::sort(Pairs::new([("c", 1), ("a", 2), ("b", 3)]), &config)?;
/// assert_eq!(sorted.spilled_runs(), 2);
/// let mut out = Vec::new();
/// while let Some(row) = sorted.next_row()? {
///     out.push((row.unit.to_string(), row.line));
/// }
/// assert_eq!(out, [("a".into(), 2), ("b".into(), 3), ("c".into(), 1)]);
/// # Ok(()) }
/// ```
pub struct SortedListing {
    state: State,
    spilled: usize,
    rows: u64,
    was_sorted: bool,
    dir: PathBuf,
}

/// The merge of the spilled runs: a heap holding the first row of each.
fn merge(mut runs: Vec<RunReader>, config: &SortConfig) -> Result<State, ListingError> {
    let mut heap = BinaryHeap::with_capacity(runs.len());
    for (i, r) in runs.iter_mut().enumerate() {
        let mut unit = String::new();
        if let Some((version, line)) = r
            .next_into(&mut unit)
            .map_err(|e| io_error(e, &config.dir, 0))?
        {
            heap.push(Head {
                unit,
                version,
                line,
                run: i,
            });
        }
    }
    Ok(State::Merge {
        runs,
        heap,
        current: None,
    })
}

impl SortedListing {
    /// Reads all of `listing` and prepares its rows in key order. Errors of the input (with their
    /// line) and of the temporary files come out here, before any row is yielded. A unit listed
    /// with two versions is refused here when the listing fits in one run; otherwise it reaches
    /// the reader of the sorted rows (whose duplicates are adjacent).
    pub fn sort(
        mut listing: impl ListingSource,
        config: &SortConfig,
    ) -> Result<Self, ListingError> {
        let run_rows = config.run_rows.max(1);
        let mut run = Run::default();
        let mut spilled = Vec::new();
        let mut rows = 0u64;
        let mut was_sorted = true;
        // The last unit of the previous spilled run, to tell whether the input was in order.
        let mut tail = String::new();
        while let Some(row) = listing.next_row()? {
            rows += 1;
            if was_sorted {
                let prev = match run.rows.last() {
                    Some(r) => run.unit(r),
                    None => tail.as_str(),
                };
                was_sorted = prev.as_bytes() <= row.unit.as_bytes();
            }
            // Spill a full run only when another row comes, so that a listing of exactly one
            // run is never written to disk.
            if run.rows.len() >= run_rows || run.units.len() >= config.run_bytes {
                if let Some(last) = run.rows.last() {
                    tail.clear();
                    tail.push_str(run.unit(last));
                }
                run.sort();
                spilled.push(spill(&run, config).map_err(|e| io_error(e, &config.dir, rows))?);
                run.clear();
            }
            run.push(&row);
        }
        let state = if spilled.is_empty() {
            run.sort();
            check_duplicates(&run)?;
            State::Memory { run, next: 0 }
        } else {
            if !run.rows.is_empty() {
                run.sort();
                spilled.push(spill(&run, config).map_err(|e| io_error(e, &config.dir, rows))?);
            }
            drop(run);
            merge(spilled, config)?
        };
        let spilled = match &state {
            State::Memory { .. } => 0,
            State::Merge { runs, .. } => runs.len(),
        };
        Ok(SortedListing {
            state,
            spilled,
            rows,
            was_sorted,
            dir: config.dir.clone(),
        })
    }

    /// How many runs went to temporary files (0: sorted in memory).
    pub fn spilled_runs(&self) -> usize {
        self.spilled
    }

    /// How many rows the input had.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Whether the input was already in key order (so sorting it changed nothing).
    pub fn was_sorted(&self) -> bool {
        self.was_sorted
    }
}

fn io_error(e: std::io::Error, dir: &Path, line: u64) -> ListingError {
    ListingError::Io {
        line,
        source: std::io::Error::new(
            e.kind(),
            format!(
                "sorting the listing through temporary files in {}: {e}; free space there or choose another directory (`SortConfig::new`)",
                dir.display()
            ),
        ),
    }
}

/// Writes a sorted run to an anonymous temporary file and rewinds it for reading.
fn spill(run: &Run, config: &SortConfig) -> std::io::Result<RunReader> {
    let file = tempfile::tempfile_in(&config.dir)?;
    let mut w = BufWriter::with_capacity(1 << 16, file);
    for r in &run.rows {
        let unit = run.unit(r);
        // invariant: listing units are valid keys, at most MAX_KEY_LEN bytes, so they fit in u32.
        w.write_all(&(unit.len() as u32).to_le_bytes())?;
        w.write_all(unit.as_bytes())?;
        w.write_all(&r.version.to_le_bytes())?;
        w.write_all(&r.line.to_le_bytes())?;
    }
    let mut file = w.into_inner().map_err(|e| e.into_error())?;
    file.seek(SeekFrom::Start(0))?;
    Ok(RunReader {
        reader: BufReader::with_capacity(1 << 16, file),
    })
}

/// A sorted in-memory run with a unit listed twice with two versions is refused now, before
/// anything is yielded (the rows of a unit are adjacent and in line order).
fn check_duplicates(run: &Run) -> Result<(), ListingError> {
    for pair in run.rows.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.version != b.version && run.unit(a) == run.unit(b) {
            return Err(ListingError::Duplicate {
                unit: run.unit(a).to_string(),
                first_line: a.line,
                first_version: a.version,
                line: b.line,
                version: b.version,
            });
        }
    }
    Ok(())
}

impl ListingSource for SortedListing {
    fn next_row(&mut self) -> Result<Option<Row<'_>>, ListingError> {
        match &mut self.state {
            State::Memory { run, next } => {
                let Some(r) = run.rows.get(*next) else {
                    return Ok(None);
                };
                *next += 1;
                Ok(Some(Row {
                    unit: run.unit(r),
                    version: r.version,
                    line: r.line,
                }))
            }
            State::Merge {
                runs,
                heap,
                current,
            } => {
                if let Some(mut head) = current.take() {
                    // Refill from the run the last row came from, reusing its buffer.
                    let line = head.line;
                    let next = runs[head.run]
                        .next_into(&mut head.unit)
                        .map_err(|e| io_error(e, &self.dir, line))?;
                    if let Some((version, line)) = next {
                        head.version = version;
                        head.line = line;
                        heap.push(head);
                    }
                }
                match heap.pop() {
                    None => Ok(None),
                    Some(head) => {
                        let head = current.insert(head);
                        Ok(Some(Row {
                            unit: &head.unit,
                            version: head.version,
                            line: head.line,
                        }))
                    }
                }
            }
        }
    }
}
