"""Plain values returned by the oncelake package (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass(frozen=True)
class Entry:
    """One committed output of a unit: what it was derived from and which object holds it."""

    unit: str
    source_version: int
    revision: int
    object: str
    """BLAKE3 content hash, hex."""
    size: int
    crc32: str
    """CRC32 of the bytes, 8 hex digits."""
    seq: int
    """The commit that made the entry visible."""
    committed_at_ms: int


@dataclass(frozen=True)
class Committed:
    """The unit's output is now visible (first writer, newer version, or a correction)."""

    unit: str
    source_version: int
    object: str
    size: int
    crc32: str
    seq: int
    revision: int
    superseded_version: Optional[int]
    outcome: str = "committed"


@dataclass(frozen=True)
class Duplicate:
    """Identical output was already committed; nothing changed (an idempotent retry)."""

    unit: str
    source_version: int
    object: str
    size: int
    crc32: str
    seq: int
    """The commit that made the identical entry visible."""
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
class LogEntry:
    """One entry made visible by a commit record."""

    unit: str
    source_version: int
    revision: int
    object: str
    size: int
    crc32: str
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
