"""Reading a run's world-state deltas from the ledger, page by page, checked.

Owns the range rules for positions (0 is "before the first event", the last is the run's last
stored event, never the runs index's count) and the extraction of each DeltaApplied's merge
patch from its stored payload, raising `InvalidDeltaError` for a patch that is not an object.
Reads through the `Ledger` facade (``Ledger.events`` with ``after``/``upto`` bounds, and its
recorder for a run's last position), in pages so a long run never sits in memory as a list of
events. Must not fold, cache or write anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

from agentledger.ledger import Erased, Ledger, RecordedEvent
from agentledger.ledger.events import DeltaApplied
from agentledger.projections._json import JSONValue
from agentledger.projections.errors import InvalidDeltaError, PositionOutOfRangeError

__all__ = ["PAGE_SIZE", "RunSpan", "delta_patches", "last_position", "run_span"]

PAGE_SIZE = 1000
"""Events read per query: bounds memory on long runs at a negligible cost in round trips."""

_DELTA = DeltaApplied.kind
_DELTA_VERSION = DeltaApplied.class_version


class RunSpan:
    """A run's canonical id, its last position, and the position a fold stops at."""

    __slots__ = ("at", "last", "run_id")

    def __init__(self, run_id: str, last: int, at: int) -> None:
        self.run_id = run_id
        self.last = last
        self.at = at


def run_span(ledger: Ledger, run_id: str, at: int | None) -> RunSpan:
    """Check `at` against the run (``None`` means its last position).

    Raises the ledger's `UnknownRunError` for a run it does not hold, and
    `PositionOutOfRangeError` for a position below 0 or past the run's last event.
    """
    rid, last = last_position(ledger, run_id)
    if at is None:
        return RunSpan(rid, last, last)
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= last:
        raise PositionOutOfRangeError(rid, at, last)
    return RunSpan(rid, last, at)


def last_position(ledger: Ledger, run_id: str) -> tuple[str, int]:
    """The run's canonical id and the position of its last stored event, read from the events.

    The runs index also counts a run's events, but it is derived data that an edit of the
    database could change; a fold must end where the events end. Raises the ledger's
    `UnknownRunError` for a run that has neither events nor an index row.
    """
    try:
        uuid = UUID(str(run_id))
    except ValueError:
        ledger.run(run_id)  # raises UnknownRunError, naming the id as given
        raise
    stored = ledger.recorder.select_events(uuid, desc=True, limit=1)
    if stored:
        return str(uuid), int(stored[0].originator_version)
    return ledger.run(str(uuid)).run_id, 0


def delta_patches(
    ledger: Ledger, run_id: str, *, after: int, upto: int
) -> Iterator[tuple[int, dict[str, JSONValue]]]:
    """Yield ``(position, patch)`` for each DeltaApplied with ``after < position <= upto``.

    Each patch is the freshly decoded stored payload's, so the caller may keep it; a patch that
    is not a JSON object raises `InvalidDeltaError` naming the run and position. A data
    subject's delta keeps its patch in a sealed blob (``patch_ref``), read a page at a time;
    once the subject is erased that patch is `ERASED` (the text ``[erased]``), which a fold
    applies as RFC 7386 applies any non-object patch: the state becomes ``"[erased]"``.
    """
    for page in _pages(ledger, run_id, after=after, upto=upto):
        deltas = [r for r in page if r.kind == _DELTA]
        refs = [
            r.payload["patch_ref"] for r in deltas if isinstance(r.payload.get("patch_ref"), str)
        ]
        sealed = ledger.blobs(refs) if refs else {}
        for record in deltas:
            ref = record.payload.get("patch_ref")
            if isinstance(ref, str):
                yield record.position, _sealed_patch(record, ref, sealed)
            else:
                yield record.position, _patch_of(record)


def _sealed_patch(record: RecordedEvent, ref: str, sealed: dict[str, Any]) -> Any:
    if ref not in sealed:
        raise InvalidDeltaError(record.run_id, record.position, f"its patch blob {ref} is missing")
    patch = sealed[ref]
    if isinstance(patch, Erased):
        return patch
    if not isinstance(patch, dict):
        raise InvalidDeltaError(
            record.run_id,
            record.position,
            f"the patch must be a JSON object at top level, not {_json_type(patch)}",
        )
    return patch


def _pages(ledger: Ledger, run_id: str, *, after: int, upto: int) -> Iterator[list[RecordedEvent]]:
    start = after
    while start < upto:
        stop = min(start + PAGE_SIZE, upto)
        yield ledger.events(run_id, after=start, upto=stop)
        start = stop


def _patch_of(record: RecordedEvent) -> dict[str, JSONValue]:
    if record.version == _DELTA_VERSION:
        patch = record.payload.get("patch", _MISSING)
    else:
        try:
            patch = record.event.model_dump(mode="json").get("patch", _MISSING)
        except ValueError as e:  # pydantic's ValidationError, or an upcaster refusing
            raise InvalidDeltaError(record.run_id, record.position, str(e)) from None
    if patch is _MISSING:
        raise InvalidDeltaError(record.run_id, record.position, "the payload has no patch")
    if not isinstance(patch, dict):
        raise InvalidDeltaError(
            record.run_id,
            record.position,
            f"the patch must be a JSON object at top level, not {_json_type(patch)}",
        )
    return patch


_MISSING: object = object()


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__
