"""Plain value types shared by the storage backends and the facade.

`RecordedEvent` is one stored envelope as read back; `RunInfo` is a row of the runs index;
`RunIndexUpdate` is what a save changes in that index, `RunTotals` the usage sums it keeps (tokens,
cost, latency); `BlobRow` is one content-addressed blob as stored. Must not know any database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from agentledger.ledger._canonical import loads, loads_noting_floats
from agentledger.ledger._chain import node_parent
from agentledger.ledger._codec import pack_blob, unpack_state
from agentledger.ledger.errors import CorruptEventError

if TYPE_CHECKING:
    from agentledger.ledger.events import LedgerEvent

__all__ = [
    "EVENT_PAGE_SIZE",
    "IMPORT_BATCH",
    "VERIFY_PAGE",
    "BlobRow",
    "RecordedEvent",
    "RunIndexUpdate",
    "RunInfo",
    "RunQuery",
    "RunTotals",
    "encode_blob",
]

EVENT_PAGE_SIZE = 1000
"""How many events `Ledger.iter_events` (and the readers built on it) read per query."""
VERIFY_PAGE = 1_000
"""Events read per query by `Ledger.verify` (its ``page_size``)."""
IMPORT_BATCH = 500
"""Events an import commits per transaction (`_export`): `verify` accepts an index start time
stamped by any event of a run's first batch."""


@dataclass(frozen=True, slots=True)
class BlobRow:
    """A blob as stored: its ref, logical size, encoding (see `_codec`), bytes and parent column.

    ``parent`` is a conversation node's parent column (see `_chain`): the parent's 32-byte
    digest, empty bytes for a root, None (NULL) for anything else or unknown.
    """

    ref: str
    size: int
    encoding: str
    data: bytes
    parent: bytes | None = None


def encode_blob(ref: str, canonical: bytes) -> BlobRow:
    """Prepare a blob for storage, packing it when that saves space, with its parent column."""
    encoding, data = pack_blob(canonical)
    return BlobRow(ref, len(canonical), encoding, data, node_parent(canonical))


@dataclass(frozen=True, slots=True)
class RunTotals:
    """A run's usage sums, as the runs index keeps them.

    Over its ModelCalled events: the input and output tokens, the cost (None when no call
    reported one) and the model latency; over its ToolReturned events the tool latency (in
    milliseconds).

    The index adds each save's totals to the row's in the save's transaction, so float sums
    may differ from a sum in one pass by rounding; `close_to` compares them with that slack.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    model_latency_ms: float = 0.0
    tool_latency_ms: float = 0.0

    @classmethod
    def of(cls, events: Iterable[tuple[str, Mapping[str, Any]]]) -> RunTotals:
        """The totals over stored ``(kind, payload)`` pairs (any schema version)."""
        inputs = outputs = 0
        costs: list[float] = []
        model_ms: list[float] = []
        tool_ms: list[float] = []
        for kind, payload in events:
            if kind == "ModelCalled":
                usage = payload.get("usage") or {}
                inputs += _int(usage.get("input_tokens"))
                outputs += _int(usage.get("output_tokens"))
                cost = payload.get("cost_usd")
                if isinstance(cost, int | float) and not isinstance(cost, bool):
                    costs.append(float(cost))
                model_ms.append(_float(payload.get("latency_ms")))
            elif kind == "ToolReturned":
                if "latency_ms" in payload:
                    tool_ms.append(_float(payload.get("latency_ms")))
                else:  # version 1 recorded seconds
                    tool_ms.append(_float(payload.get("latency_s")) * 1000.0)
        return cls(
            inputs,
            outputs,
            math.fsum(costs) if costs else None,
            math.fsum(model_ms),
            math.fsum(tool_ms),
        )

    def plus(self, other: RunTotals) -> RunTotals:
        """Both totals added (as the index adds a save's to a row's)."""
        cost = (
            self.cost_usd
            if other.cost_usd is None
            else other.cost_usd
            if self.cost_usd is None
            else self.cost_usd + other.cost_usd
        )
        return RunTotals(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            cost,
            self.model_latency_ms + other.model_latency_ms,
            self.tool_latency_ms + other.tool_latency_ms,
        )

    def mismatches(self, other: RunTotals) -> list[tuple[str, Any, Any]]:
        """The fields (name, this value, the other's) that differ beyond rounding."""
        found: list[tuple[str, Any, Any]] = []
        for name in ("input_tokens", "output_tokens"):
            if getattr(self, name) != getattr(other, name):
                found.append((name, getattr(self, name), getattr(other, name)))
        for name in ("cost_usd", "model_latency_ms", "tool_latency_ms"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if (mine is None) != (theirs is None) or (
                mine is not None and not math.isclose(mine, theirs, rel_tol=1e-9, abs_tol=1e-9)
            ):
                found.append((name, mine, theirs))
        return found


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


@dataclass(frozen=True, slots=True)
class RunIndexUpdate:
    """How one save moves a run's row in the runs index."""

    run_id: str
    last_position: int
    head_hash: str
    status: str
    updated_at: str
    started: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()
    entry: bool = False
    """The run was started here by `Ledger.record_function` (its RunStarted names an entry point
    this ledger recorded, not one an import brought in)."""
    totals: RunTotals = RunTotals()
    """The usage the saved events add to the run's totals."""


@dataclass(frozen=True)
class RunQuery:
    """A filter for `Ledger.runs`: status, agent, tag, start time window, and a limit."""

    status: str | None = None
    agent: str | None = None
    tag: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int | None = None


@dataclass(frozen=True)
class RunInfo:
    """A run as the runs index lists it."""

    run_id: str
    agent: str
    status: str
    started_at: str
    ended_at: str | None
    event_count: int
    head_hash: str
    input_preview: str
    tags: tuple[str, ...] = ()
    parent_run_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    model_latency_ms: float | None = None
    tool_latency_ms: float | None = None
    """The usage totals (`RunTotals`); None in an index that predates them (a database opened
    read-only before a writer added them), except `cost_usd`, None also when no call reported
    a cost."""

    @property
    def totals(self) -> RunTotals | None:
        """The row's usage totals, or None when the index does not keep them."""
        if self.input_tokens is None:
            return None
        return RunTotals(
            self.input_tokens,
            self.output_tokens or 0,
            self.cost_usd,
            self.model_latency_ms or 0.0,
            self.tool_latency_ms or 0.0,
        )


@dataclass(frozen=True)
class RecordedEvent:
    """One event as recorded: its envelope fields and its payload exactly as stored.

    `payload` is the stored (hashed) form; `event` is the payload brought to the current schema
    version and parsed into its catalogue class.
    """

    run_id: str
    position: int
    kind: str
    version: int
    timestamp: str
    event_id: str
    prev: str
    hash: str
    payload: dict[str, Any] = field(repr=False)

    @cached_property
    def event(self) -> LedgerEvent:
        """The payload as its catalogue class, upcast to the current version."""
        from agentledger.ledger.events import event_type, upcast  # the models are built on use

        cls = event_type(self.kind)
        return cls.model_validate(upcast(self.kind, self.version, self.payload))

    def envelope(self) -> dict[str, Any]:
        """The hashed envelope plus its hash: the form `export` writes."""
        return {
            "run_id": self.run_id,
            "position": self.position,
            "kind": self.kind,
            "version": self.version,
            "timestamp": self.timestamp,
            "event_id": self.event_id,
            "prev": self.prev,
            "payload": self.payload,
            "hash": self.hash,
        }

    @classmethod
    def from_state(cls, run_id: str, position: int, kind: str, state: bytes) -> RecordedEvent:
        """Decode the stored state bytes written by the mapper.

        Raises `CorruptEventError` (naming run and position) when they are not an envelope.
        """
        try:
            canonical = unpack_state(state)
            body = loads(canonical)
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptEventError(run_id, position, f"{type(e).__name__}: {e}") from None
        return cls._from_body(run_id, position, kind, canonical, body)

    @classmethod
    def from_state_noting_floats(
        cls, run_id: str, position: int, kind: str, state: bytes
    ) -> tuple[RecordedEvent, bool]:
        """`from_state`, and whether every float in the envelope is plain.

        (See `loads_noting_floats`: what verification hands `canonical_json_of_parsed`.)
        """
        try:
            canonical = unpack_state(state)
            body, plain_floats = loads_noting_floats(canonical)
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptEventError(run_id, position, f"{type(e).__name__}: {e}") from None
        return cls._from_body(run_id, position, kind, canonical, body), plain_floats

    @classmethod
    def _from_body(
        cls, run_id: str, position: int, kind: str, canonical: bytes, body: Any
    ) -> RecordedEvent:
        """The record of a stored state (`canonical`, parsed as `body`), checked as an envelope."""
        try:
            # What the frozen dataclass's __init__ does (one setattr a field), at a quarter of
            # its cost, once per event read: verify reads every event.
            record = object.__new__(cls)
            record.__dict__.update(
                run_id=run_id,
                position=position,
                kind=kind,
                version=body["v"],
                timestamp=body["ts"],
                event_id=body["id"],
                prev=body["prev"],
                hash=body["hash"],
                payload=body["payload"],
            )
        except (ValueError, KeyError, TypeError) as e:
            detail = f"{type(e).__name__}: {e}"
            raise CorruptEventError(run_id, position, detail) from None
        if not isinstance(record.payload, dict) or not isinstance(record.hash, str):
            raise CorruptEventError(run_id, position, "the envelope's fields have wrong types")
        if not canonical.startswith(b'{"hash":"' + record.hash.encode() + b'"'):
            # JSON keeps the last of repeated keys; the transparency log reads the first hash.
            detail = "the stored state does not begin with the hash it holds (a repeated key?)"
            raise CorruptEventError(run_id, position, detail)
        return record

    @classmethod
    def unreadable(cls, run_id: str, position: int, kind: str) -> RecordedEvent:
        """A stand-in for a stored event that cannot be decoded (verify reports it)."""
        return cls(run_id, position, kind, 0, "", "", "", "", {})
