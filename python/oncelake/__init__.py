"""oncelake: exactly-once results per logical unit of work.

A thin binding of the oncelake storage engine. Open a :class:`Store`, then either commit outputs
(``put``, ``commit``) and let the commit rules collapse retries, or claim units and run each at
most once with ``Store.run_once`` as a context manager. Outcomes are values (:class:`Committed`,
:class:`Duplicate`); rejections are exceptions (see :mod:`oncelake.errors`).
"""

from ._native import Cell, Pipeline, Run, Snapshot, Staged, Store, __version__
from ._types import (
    Committed,
    Duplicate,
    Entry,
    Lease,
    LogEntry,
    Lookup,
    Plan,
    PlannedUnit,
    Record,
)
from .errors import (
    Aborted,
    AlreadyDone,
    Busy,
    Conflict,
    Corrupt,
    Fenced,
    InvalidInput,
    Locked,
    NothingToDo,
    OncelakeError,
    Rejected,
    Stale,
    StoreError,
)

__all__ = [
    "Aborted",
    "AlreadyDone",
    "Busy",
    "Cell",
    "Committed",
    "Conflict",
    "Corrupt",
    "Duplicate",
    "Entry",
    "Fenced",
    "InvalidInput",
    "Lease",
    "Locked",
    "LogEntry",
    "Lookup",
    "NothingToDo",
    "OncelakeError",
    "Pipeline",
    "Plan",
    "PlannedUnit",
    "Record",
    "Rejected",
    "Run",
    "Snapshot",
    "Stale",
    "Staged",
    "Store",
    "StoreError",
    "__version__",
]
