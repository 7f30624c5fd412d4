"""Plain values returned by the oncelake package (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass(frozen=True)
class _Revision:
    """The fields an entry and a log entry share: which revision of a unit, held by which object."""

    unit: str
    source_version: int
    revision: int
    object: str
    """BLAKE3 content hash, hex."""
    size: int
    crc32: str
    """CRC32 of the bytes, 8 hex digits."""


@dataclass(frozen=True)
class Entry(_Revision):
    """One committed output of a unit: what it was derived from and which object holds it."""

    seq: int
    """The commit that made the entry visible."""
    committed_at_ms: int


@dataclass(frozen=True)
class _Put:
    """The fields both outcomes of a put share (in the order the outcomes have always had)."""

    unit: str
    source_version: int
    object: str
    size: int
    crc32: str
    seq: int
    """The commit that made the output (or the identical one) visible."""


@dataclass(frozen=True)
class Committed(_Put):
    """The unit's output is now visible (first writer, newer version, or a correction)."""

    revision: int
    superseded_version: Optional[int]
    outcome: str = "committed"


@dataclass(frozen=True)
class Duplicate(_Put):
    """Identical output was already committed; nothing changed (an idempotent retry)."""

    outcome: str = "duplicate"


@dataclass(frozen=True)
class Lease:
    """A granted claim: the right to work on ``unit`` at ``source_version`` until ``expires_at_ms``."""

    unit: str
    worker: str
    token: int
    """The fencing token: pass it to ``put(..., token=)``."""
    source_version: int
    expires_at_ms: int
    took_over: bool = False


@dataclass(frozen=True)
class Lookup:
    """The dedup fast path's answer: the unit's current version, object and seq."""

    source_version: int
    object: str
    seq: int


@dataclass(frozen=True)
class LogEntry(_Revision):
    """One entry made visible by a commit record."""

    token: Optional[int]


@dataclass(frozen=True)
class Record:
    """A commit-log record: ``kind`` is commit, claim_granted, claim_released or extension."""

    seq: int
    time_ms: int
    kind: str
    entries: List[LogEntry] = field(default_factory=list)
    """The entries of a commit record."""
    unit: Optional[str] = None
    worker: Optional[str] = None
    token: Optional[int] = None
    source_version: Optional[int] = None
    expires_at_ms: Optional[int] = None
    tag: Optional[int] = None
    """The tag of an extension record (pipelines)."""


@dataclass(frozen=True)
class PlannedUnit:
    """One unit of a reconcile plan. ``action``: missing, behind, up_to_date or unknown."""

    unit: str
    action: str
    source_version: Optional[int]
    manifest_version: Optional[int]


@dataclass(frozen=True)
class Plan:
    """What must be (re)processed: the planned units and the counts of the pass."""

    units: List[PlannedUnit]
    summary: Dict[str, int]

    def to_process(self) -> List[PlannedUnit]:
        """The units that need work: missing and behind."""
        return [u for u in self.units if u.action in ("missing", "behind")]


@dataclass(frozen=True)
class FailRecorded:
    """A pipeline cell's failed run is in the log (``Pipeline.fail``)."""

    unit: str
    stage: str
    source_version: int
    cell: str
    """The cell's key."""
    seq: int
    attempts: int
    """Failed runs at this source version so far."""
    gave_up: bool
    """True when that reaches the stage's ``max_attempts``: the cell is not retried."""
    outcome: str = "recorded"


@dataclass(frozen=True)
class GcReport:
    """What a garbage collection removed (or, in a dry run, would remove)."""

    dry_run: bool
    staging_files: int
    staging_bytes: int
    staging_files_young: int
    """Unrecognised staging files left because they are younger than the grace period."""
    objects: int
    """Unreferenced objects removed."""
    object_bytes: int
    history_rows_pruned: int
    history_from: int
    """The oldest seq still readable as of (``snapshot(at=)``)."""
    objects_referenced: int
    objects_pinned: int
    """Unreferenced objects left because a writer holds them staged for a commit."""
    stray_files: int


@dataclass(frozen=True)
class UnitRef:
    """An entry that references an object: ``current`` or a kept history entry."""

    unit: str
    seq: int
    current: bool


@dataclass(frozen=True)
class ObjectProblem:
    """A referenced object that is missing or damaged, and the entries that reference it."""

    object: str
    path: str
    detail: str
    units: List[UnitRef]


@dataclass(frozen=True)
class StrayFile:
    """A file in ``objects/`` that is not an object the engine wrote (a problem; GC leaves it)."""

    path: str
    bytes: int


@dataclass(frozen=True)
class ReclaimableFile:
    """Space GC reclaims: an unreferenced object or a staging file no live writer uses."""

    path: str
    bytes: int
    kind: str
    """``object`` or ``staging``."""
    owner_gone: Optional[bool] = None
    """Staging files: whether the writer is gone (the next GC removes it at once)."""


@dataclass(frozen=True)
class Reclaimable:
    """Space that normal operation leaves for GC: not lost or damaged data."""

    objects: int
    object_bytes: int
    staging_files: int
    staging_bytes: int
    files: List[ReclaimableFile]


@dataclass(frozen=True)
class InvariantViolation:
    """A whole-store invariant that does not hold: ``rule`` is its label (I1..I9)."""

    rule: str
    name: str
    seen: str


@dataclass(frozen=True)
class VerifyReport:
    """What ``Store.verify`` found. ``ok`` is false exactly when the CLI's ``verify`` exits 7."""

    ok: bool
    problems: int
    deep: bool
    seq: int
    """The seq the check saw."""
    entries_checked: int
    objects_checked: int
    bytes_checked: int
    log_records: int
    missing: List[ObjectProblem]
    corrupt: List[ObjectProblem]
    strays: List[StrayFile]
    reclaimable: Reclaimable
    log_problems: List[str]
    history_problems: List[str]
    invariants: List[InvariantViolation]
    affected_units: List[str]
    """Every unit that references a missing or corrupt object."""
