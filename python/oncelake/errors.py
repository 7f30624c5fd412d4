"""The exceptions of the oncelake package.

Outcomes are values (:class:`oncelake.Committed`, :class:`oncelake.Duplicate`); everything that
stops a call is an exception. Every exception derives from :class:`OncelakeError` and carries the
same facts as the command line's JSON output, as attributes and as :attr:`OncelakeError.facts`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional


class OncelakeError(Exception):
    """Base class of every oncelake exception.

    ``kind`` is a stable snake_case name (the CLI's ``outcome``/``error`` word); ``facts`` holds
    the fields of the CLI's JSON for the same event.
    """

    kind: str = "error"

    def __init__(self, message: str, **facts: Any) -> None:
        super().__init__(message)
        self.message = message
        self.facts: Dict[str, Any] = dict(facts)
        for name, value in facts.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, {self.facts!r})"


class Rejected(OncelakeError):
    """The commit rules rejected a unit (SPEC R3); nothing was changed for it.

    Facts: ``unit``, ``source_version``, ``outcome``, ``object``, ``size``, ``crc32`` and the
    rejection's own fields. In an all-or-nothing batch, ``outcomes`` lists every unit's outcome.
    """

    kind = "rejected"


class Conflict(Rejected):
    """Same unit and version, different bytes: the first committed entry wins.

    Facts: ``winner_seq``, ``winner_object``. A deliberate replacement is ``Store.correct``.
    """

    kind = "conflict"


class Stale(Rejected):
    """The unit is already committed at a newer version. Facts: ``current_version``."""

    kind = "stale"


class Fenced(Rejected):
    """The fencing token is not the unit's live lease (taken over, released or ended).

    Facts: ``token``, ``newest_token``. Drop the output: another worker owns the unit.
    """

    kind = "fenced"


class Aborted(Rejected):
    """Acceptable by itself, but another unit of the all-or-nothing batch was rejected."""

    kind = "aborted"


class NothingToDo(OncelakeError):
    """Raised by ``claim`` and on entering ``run_once`` when the unit needs no work from you."""

    kind = "nothing_to_do"


class AlreadyDone(NothingToDo):
    """The unit is committed at the asked version or newer. Facts: ``unit`` and ``entry`` (for a
    pipeline cell ``Pipeline.claim`` gives ``stage`` and ``cell`` and no entry)."""

    kind = "already_done"


class Busy(NothingToDo):
    """Another worker holds a live lease on the unit (or another run of this process runs it).

    Facts: ``unit``, ``worker``, ``expires_at_ms`` (when the lease may be taken over).
    """

    kind = "busy"


class GaveUp(NothingToDo):
    """A pipeline cell used up its stage's ``max_attempts``; it runs again once its source or
    code version changes. Facts: ``unit``, ``stage``, ``cell``, ``attempts``."""

    kind = "gave_up"


class Locked(OncelakeError):
    """Another process has the store open. Facts: ``path``. Pass ``lock_wait=`` to wait."""

    kind = "locked"


class Corrupt(OncelakeError):
    """A store file or object is damaged; nothing was changed. Facts: ``path``, ``detail``."""

    kind = "corrupt"


class InvalidInput(OncelakeError, ValueError):
    """Bad input: a unit key, worker name, version, seq out of the kept history, a path that is
    not a store, a store of a newer format, a bad pipeline definition or listing."""

    kind = "invalid_input"


class StoreError(OncelakeError):
    """The engine could not do the work: I/O, a failed store (reopen it), a missing object, a
    store used in a child ``fork()``ed from the process that opened it (facts: ``path``,
    ``opened_by``, ``this``; open the store in the child once the parent closed it, or serve it)."""

    kind = "store_error"


def _make(kind: str, message: str, facts: Optional[Dict[str, Any]] = None) -> OncelakeError:
    """Builds the exception of ``kind`` (used by the native module)."""
    cls = _BY_KIND.get(kind, StoreError)
    return cls(message, **(facts or {}))


_BY_KIND = {
    cls.kind: cls
    for cls in (
        Conflict,
        Stale,
        Fenced,
        Aborted,
        AlreadyDone,
        Busy,
        GaveUp,
        Locked,
        Corrupt,
        InvalidInput,
        StoreError,
    )
}
