"""The `Run` aggregate: one per run, positions 1..n, built on eventsourcing's `Aggregate`.

Each recorded fact is an eventsourcing domain event carrying the ledger envelope (kind, schema
version, event id, timestamp, prev, hash and the JSON payload). The aggregate keeps what an
append needs: position, head hash and status. It does not know storage or agents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.domain import Aggregate

from agentledger.ledger._hashing import GENESIS

if TYPE_CHECKING:
    from agentledger.ledger._records import RecordedEvent

__all__ = ["Run"]


class Run(Aggregate):
    """A recorded run. Its version is the position of its last event."""

    class Started(Aggregate.Created):
        """Position 1: the RunStarted envelope."""

        kind: str
        schema_version: int
        event_id: str
        recorded_at: str
        prev: str
        hash: str
        payload: dict[str, Any]
        payload_jcs: bytes

    class Recorded(Aggregate.Event):
        """Positions 2..n: any other envelope."""

        kind: str
        schema_version: int
        event_id: str
        recorded_at: str
        prev: str
        hash: str
        payload: dict[str, Any]
        payload_jcs: bytes

        def apply(self, aggregate: Aggregate) -> None:
            """Advance the head to this event."""
            assert isinstance(aggregate, Run)
            aggregate.head_hash = self.hash
            if self.kind == "RunCompleted":
                aggregate.status = "completed"
            elif self.kind == "RunFailed":
                aggregate.status = "failed"

    def __init__(  # noqa: PLR0917 - eventsourcing passes the created event's fields by name
        self,
        kind: str,
        schema_version: int,
        event_id: str,
        recorded_at: str,
        prev: str,
        hash: str,  # noqa: A002 - the envelope's field name
        payload: dict[str, Any],
        payload_jcs: bytes,
    ) -> None:
        del kind, schema_version, event_id, recorded_at, prev, payload, payload_jcs
        self.head_hash = hash
        self.status = "running"

    @property
    def run_id(self) -> str:
        """The run id as text (formatted once: every append asks for it)."""
        text: str | None = self.__dict__.get("_run_id")
        if text is None:
            text = self.__dict__["_run_id"] = str(self.id)
        return text

    @property
    def position(self) -> int:
        """Position of the last recorded event."""
        return int(self.version)

    @classmethod
    def start(cls, run_id: str, **envelope: Any) -> Run:
        """Create the aggregate with its RunStarted envelope at position 1."""
        return cls._create(cls.Started, id=UUID(run_id), **envelope)

    @classmethod
    def started_by(cls, first: RecordedEvent, payload_jcs: bytes) -> Run:
        """The aggregate of a run whose recorded RunStarted is ``first`` (canonical payload)."""
        return cls.start(
            first.run_id,
            kind=first.kind,
            schema_version=first.version,
            event_id=first.event_id,
            recorded_at=first.timestamp,
            prev=first.prev,
            hash=first.hash,
            payload=first.payload,
            payload_jcs=payload_jcs,
        )

    def advance(self, position: int, head_hash: str, status: str) -> None:
        """Move the head after the ledger committed events up to `position` directly.

        The ledger's append path writes stored events in the mapper's format itself (measured
        faster than constructing a domain event per append); this keeps the aggregate in step.
        """
        self.version = position
        self.head_hash = head_hash
        self.status = status

    def record(self, **envelope: Any) -> None:
        """Append the next envelope (position = version + 1)."""
        self.trigger_event(self.Recorded, **envelope)


def genesis_prev() -> str:
    """The `prev` of position 1."""
    return GENESIS
