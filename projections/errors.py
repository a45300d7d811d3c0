"""Errors raised by the projections layer.

The tree::

    ProjectionError
    ├── PatchCompositionError       no single merge patch has the effect of a then b (path)
    ├── UnrepresentableDiffError    the target holds a null inside an object, which no merge
    │                               patch can write (path); also a ValueError
    ├── PositionOutOfRangeError     a position outside a run's 0..last (run_id, position,
    │                               last); also a ValueError
    ├── InvalidDeltaError           a recorded DeltaApplied whose patch is not a JSON object
    │                               (run_id, position, reason)
    ├── SnapshotIntervalError       a snapshot interval that is not a positive integer (every);
    │                               also a ValueError
    ├── SnapshotStoreError          the snapshot table cannot be read or written (url, reason)
    └── ReadModelOptionError        a read-model query or option it cannot serve (option,
                                    reason); also a ValueError

Paths are tuples of object keys from the document root; messages render them as RFC 6901 JSON
Pointers (``("steps", "s1")`` → ``/steps/s1``). This module must not import anything of the
project but `_json`.
"""

from __future__ import annotations

from agentledger.projections._json import json_pointer

__all__ = [
    "InvalidDeltaError",
    "PatchCompositionError",
    "PositionOutOfRangeError",
    "ProjectionError",
    "ReadModelOptionError",
    "SnapshotIntervalError",
    "SnapshotStoreError",
    "UnrepresentableDiffError",
]


def _where(path: tuple[str, ...]) -> str:
    return json_pointer(path) if path else "'' (the document root)"


class ProjectionError(Exception):
    """Base of every error the projections layer raises."""


class PatchCompositionError(ProjectionError):
    """Merge patch `a` then `b` has no single-patch equivalent, because of the value at `path`.

    `a` deletes or replaces the value at `path` with a non-object, and `b` then writes an object
    there. Applied one after the other, the object `b` writes is all that remains at `path`; a
    single patch holding an object at `path` would instead merge into whatever the document
    held there, keeping keys the patch does not name. No finite patch can name them all.
    """

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        super().__init__(
            f"cannot compose merge patches at {_where(path)}: the first patch deletes or "
            "replaces this value with a non-object and the second writes an object here; "
            "no single merge patch does both for every document, so apply them in turn"
        )

    def __reduce__(self) -> tuple[type[PatchCompositionError], tuple[tuple[str, ...]]]:
        return (type(self), (self.path,))


class UnrepresentableDiffError(ProjectionError, ValueError):
    """No merge patch takes the source to the target: the target has a null at `path`.

    A merge patch reads ``null`` as "delete this key", so it cannot write a null member into an
    object. (A null inside a list, or a null document, is fine: those are written whole.)
    """

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        super().__init__(
            f"no merge patch can produce the target: it holds null at {_where(path)}, and a "
            "merge patch reads null as 'delete this key'"
        )

    def __reduce__(self) -> tuple[type[UnrepresentableDiffError], tuple[tuple[str, ...]]]:
        return (type(self), (self.path,))


class PositionOutOfRangeError(ProjectionError, ValueError):
    """A position outside the run: positions run from 0 (before the first event) to `last`."""

    def __init__(self, run_id: str, position: int, last: int) -> None:
        self.run_id = run_id
        self.position = position
        self.last = last
        super().__init__(
            f"position {position} is out of range for run {run_id}: "
            f"give a position from 0 to {last} (its last event)"
        )

    def __reduce__(self) -> tuple[type[PositionOutOfRangeError], tuple[str, int, int]]:
        return (type(self), (self.run_id, self.position, self.last))


class InvalidDeltaError(ProjectionError):
    """A recorded DeltaApplied whose patch is not a JSON object, so no world state follows.

    The recording API refuses such deltas; one can only come from a hand-made import or a store
    written around the ledger. `verify` checks hashes, not this, so the fold names it.
    """

    def __init__(self, run_id: str, position: int, reason: str) -> None:
        self.run_id = run_id
        self.position = position
        self.reason = reason
        super().__init__(f"run {run_id}, position {position}: invalid DeltaApplied: {reason}")

    def __reduce__(self) -> tuple[type[InvalidDeltaError], tuple[str, int, str]]:
        return (type(self), (self.run_id, self.position, self.reason))


class SnapshotIntervalError(ProjectionError, ValueError):
    """A snapshot interval (`every`) that is not a positive number of deltas."""

    def __init__(self, every: object) -> None:
        self.every = every
        super().__init__(f"snapshot interval must be a positive number of deltas, not {every!r}")

    def __reduce__(self) -> tuple[type[SnapshotIntervalError], tuple[object]]:
        return (type(self), (self.every,))


class SnapshotStoreError(ProjectionError):
    """The snapshot table in the ledger's database cannot be read or written.

    Folds never raise it: they log the failure and fold from the events instead.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"snapshot store at {url} failed: {reason}")

    def __reduce__(self) -> tuple[type[SnapshotStoreError], tuple[str, str]]:
        return (type(self), (self.url, self.reason))


class ReadModelOptionError(ProjectionError, ValueError):
    """A read-model query or projector option that cannot be served, e.g. ``prompt=("x", "")``."""

    def __init__(self, option: str, reason: str) -> None:
        self.option = option
        self.reason = reason
        super().__init__(f"read model: bad {option}: {reason}")

    def __reduce__(self) -> tuple[type[ReadModelOptionError], tuple[str, str]]:
        return (type(self), (self.option, self.reason))
