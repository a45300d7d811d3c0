"""World state and time travel: a run's state after any position, and its whole history.

Owns the public reads `world_state` (the left fold from ``{}`` of a run's DeltaApplied patches
up to a position, optionally from a snapshot), `fold_world_state` (the same, saying which
snapshot the fold started from, so an audit answer can say it rests on derived data) and
`state_history` (each delta's position with the state after it, produced lazily). Every state
handed out is a fresh tree the caller may mutate. Must not write events; snapshots are only a
cache (see `_snapshots`), so every result here is the same with or without them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from agentledger.ledger import Ledger
from agentledger.projections._deltas import RunSpan, delta_patches, run_span
from agentledger.projections._json import JSONValue, json_copy
from agentledger.projections._merge import apply_patch
from agentledger.projections._snapshots import (
    DEFAULT_EVERY,
    Snapshot,
    SnapshotStore,
    check_every,
    fold_run,
)

__all__ = ["FoldedState", "WorldState", "fold_world_state", "state_history", "world_state"]

WorldState = dict[str, JSONValue]
"""A run's world state: always a JSON object, since every delta is an object patch."""


@dataclass(frozen=True)
class FoldedState:
    """A world state and where it came from.

    `snapshot` is the snapshot the fold started from, or None when it folded every delta from
    the run's first event. A snapshot is derived data: its event hash was checked against the
    stored event at its position, but its state was not re-folded (``verify --deep`` does).
    """

    state: WorldState
    snapshot: Snapshot | None


def world_state(
    ledger: Ledger,
    run_id: str,
    at: int | None = None,
    *,
    snapshots: bool | SnapshotStore = False,
    every: int | None = DEFAULT_EVERY,
) -> WorldState:
    """The world state of `run_id` after position `at` (default: its last event).

    It is the left fold, from ``{}``, of the run's DeltaApplied patches at positions up to `at`
    (RFC 7386 merge patches); ``at=0`` gives ``{}``. With ``snapshots=True`` (or a
    `SnapshotStore`) the fold starts from the newest valid snapshot at or before `at` and folds
    only the events after it, writing any snapshot that falls due (one per `every` deltas) as
    it goes; ``every=None`` reads snapshots without writing any. The result is the same either
    way.

    Raises the ledger's `UnknownRunError` for an unknown run, `PositionOutOfRangeError` for `at`
    below 0 or past the run's last position, `InvalidDeltaError` for a recorded delta that is
    not a JSON object, and `SnapshotIntervalError` for an `every` below 1.
    """
    return fold_world_state(ledger, run_id, at, snapshots=snapshots, every=every).state


def fold_world_state(
    ledger: Ledger,
    run_id: str,
    at: int | None = None,
    *,
    snapshots: bool | SnapshotStore = False,
    every: int | None = DEFAULT_EVERY,
) -> FoldedState:
    """`world_state`, with the snapshot the fold started from (see `FoldedState`)."""
    if every is not None:
        check_every(every)
    span = run_span(ledger, run_id, at)
    store = _store(ledger, snapshots)
    if store is None or ledger.read_only:
        every = None  # a read-only ledger's snapshots are read, never written
    state, start = fold_run(ledger, span, store=store, every=every)
    return FoldedState(state, start)


def state_history(ledger: Ledger, run_id: str) -> Iterator[tuple[int, WorldState]]:
    """Yield ``(position, state)`` after each DeltaApplied of `run_id`, in order, lazily.

    Events are read a page at a time, and each state is a fresh copy: mutating one changes no
    other. The run is checked at once (an unknown run raises here, not at the first ``next``);
    the history covers the events recorded when it was called.
    """
    return _history(ledger, run_span(ledger, run_id, None))


def _history(ledger: Ledger, span: RunSpan) -> Iterator[tuple[int, WorldState]]:
    state: JSONValue = {}
    for position, patch in delta_patches(ledger, span.run_id, after=0, upto=span.last):
        state = apply_patch(state, patch)
        yield position, cast("WorldState", json_copy(state))


def _store(ledger: Ledger, snapshots: bool | SnapshotStore) -> SnapshotStore | None:
    if isinstance(snapshots, SnapshotStore):
        return snapshots
    return SnapshotStore(ledger) if snapshots else None
