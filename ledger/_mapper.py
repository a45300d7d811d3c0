"""Maps the `Run` aggregate's domain events to eventsourcing `StoredEvent`s and back.

The stored topic is the event kind; the stored state is the canonical JSON of
``{"hash", "id", "payload", "prev", "ts", "v"}``, written by concatenation so the payload is
serialised once (for its hash and its storage), and packed by `_codec.pack_state`. Must not know
databases.
"""

from __future__ import annotations

import functools
import json
from typing import Any
from uuid import UUID

from eventsourcing.persistence import JSONTranscoder, Mapper, StoredEvent
from eventsourcing.utils import get_topic

from agentledger.ledger._codec import pack_state, unpack_state
from agentledger.ledger._hashing import hash_envelope_with_payload_bytes
from agentledger.ledger._ports import parse_timestamp

__all__ = ["EnvelopeMapper", "seal", "state_bytes"]


@functools.cache
def _run_events() -> tuple[type[Any], type[Any], str]:
    """`Run.Started`, `Run.Recorded` and the aggregate's topic.

    Imported on first decode: only `Ledger.load` rebuilds the aggregate, and reading runs and
    events never does.
    """
    from agentledger.ledger._run import Run

    return Run.Started, Run.Recorded, get_topic(Run)


def state_bytes(
    *, hash_: str, event_id: str, payload_jcs: bytes, prev: str, ts: str, version: int
) -> bytes:
    """The stored state of one event: its canonical JSON (RFC 8785 key order), packed."""
    return pack_state(
        f'{{"hash":"{hash_}","id":{json.dumps(event_id)},"payload":'.encode()
        + payload_jcs
        + f',"prev":"{prev}","ts":"{ts}","v":{version}}}'.encode()
    )


def seal(
    *,
    run_id: str,
    position: int,
    kind: str,
    version: int,
    timestamp: str,
    event_id: str,
    prev: str,
    payload_jcs: bytes,
) -> tuple[str, bytes]:
    """An envelope's hash on the run's chain and its stored state, from the payload's JCS bytes."""
    digest = hash_envelope_with_payload_bytes(
        run_id=run_id,
        position=position,
        kind=kind,
        version=version,
        timestamp=timestamp,
        event_id=event_id,
        prev=prev,
        payload_jcs=payload_jcs,
    )
    state = state_bytes(
        hash_=digest,
        event_id=event_id,
        payload_jcs=payload_jcs,
        prev=prev,
        ts=timestamp,
        version=version,
    )
    return digest, state


class EnvelopeMapper(Mapper[UUID]):
    """eventsourcing mapper for `Run` events carrying ledger envelopes."""

    def __init__(self) -> None:
        super().__init__(transcoder=JSONTranscoder())

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        """Encode a `Run.Started` or `Run.Recorded` event."""
        e = domain_event
        return StoredEvent(
            originator_id=e.originator_id,
            originator_version=e.originator_version,
            topic=e.kind,
            state=state_bytes(
                hash_=e.hash,
                event_id=e.event_id,
                payload_jcs=e.payload_jcs,
                prev=e.prev,
                ts=e.recorded_at,
                version=e.schema_version,
            ),
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """Decode a stored event into the aggregate's event class."""
        body = json.loads(unpack_state(stored_event.state))
        started = stored_event.topic == "RunStarted"
        started_class, recorded_class, topic = _run_events()
        cls = started_class if started else recorded_class
        fields: dict[str, Any] = {
            "originator_id": UUID(str(stored_event.originator_id)),
            "originator_version": stored_event.originator_version,
            "timestamp": parse_timestamp(body["ts"]),
            "kind": stored_event.topic,
            "schema_version": body["v"],
            "event_id": body["id"],
            "recorded_at": body["ts"],
            "prev": body["prev"],
            "hash": body["hash"],
            "payload": body["payload"],
            "payload_jcs": b"",
        }
        if started:
            fields["originator_topic"] = topic
        event = object.__new__(cls)
        object.__setattr__(event, "__dict__", fields)
        return event
