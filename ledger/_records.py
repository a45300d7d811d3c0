"""Plain value types shared by the storage backends and the facade.

`RecordedEvent` is one stored envelope as read back; `RunInfo` is a row of the runs index;
`RunIndexUpdate` is what a save changes in that index; `BlobRow` is one content-addressed blob as
stored. Must not know any database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agentledger.ledger._canonical import loads
from agentledger.ledger._codec import pack_blob, unpack_state
from agentledger.ledger.errors import CorruptEventError
from agentledger.ledger.events import LedgerEvent, event_type, upcast

__all__ = [
    "BlobRow",
    "RecordedEvent",
    "RunIndexUpdate",
    "RunInfo",
    "RunQuery",
    "encode_blob",
]


@dataclass(frozen=True, slots=True)
class BlobRow:
    """A blob as stored: its ref, logical size, encoding (see `_codec`) and bytes."""

    ref: str
    size: int
    encoding: str
    data: bytes


def encode_blob(ref: str, canonical: bytes) -> BlobRow:
    """Prepare a blob for storage, packing it when that saves space."""
    encoding, data = pack_blob(canonical)
    return BlobRow(ref, len(canonical), encoding, data)


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
            record = cls(
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
