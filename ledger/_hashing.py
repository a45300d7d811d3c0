r"""The per-run hash chain: envelope hashing and blob hashing.

``hash_n = SHA-256("agentledger/event/v1\\n" || JCS(envelope_n without "hash"))`` where the
envelope holds run_id, position, kind, version (the payload's schema version), timestamp,
event_id, prev (hash_{n-1}; 64 zeros for the first) and the payload. A blob's ref is
``sha256:`` + SHA-256 of its content's JCS bytes. Must not know storage.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from agentledger.ledger._canonical import (
    MAX_SAFE_INTEGER,
    canonical_json,
    canonical_json_of_parsed,
)

__all__ = [
    "EVENT_DOMAIN",
    "GENESIS",
    "blob_ref",
    "envelope_bytes",
    "envelope_hash",
    "hash_envelope_with_payload_bytes",
    "parsed_event_hash",
]

EVENT_DOMAIN = b"agentledger/event/v1\n"
_EVENT_DOMAIN_TEXT = EVENT_DOMAIN.decode("ascii")
_sha256 = hashlib.sha256
GENESIS = "0" * 64
_BLOB_PREFIX = "sha256:"
_PLAIN = re.compile(r'[^"\\\x00-\x1f\ud800-\udfff]*')
"""Text that JSON writes as it is: no quote, backslash, control character or lone surrogate."""


def envelope_bytes(
    *,
    run_id: str,
    position: int,
    kind: str,
    version: int,
    timestamp: str,
    event_id: str,
    prev: str,
    payload_jcs: bytes,
) -> bytes:
    """Return the JCS bytes of an envelope without its hash, given the payload's JCS bytes.

    The keys are written in RFC 8785 order by hand so the payload is serialised only once. The
    other values are made by the ledger itself (hex ids and hashes, an identifier, a UUID, an
    RFC 3339 time), so they need no JSON escaping; `envelope_hash` is the general formula.
    """
    head = f'{{"event_id":"{event_id}","kind":"{kind}","payload":'.encode()
    tail = (
        f',"position":{position},"prev":"{prev}","run_id":"{run_id}",'
        f'"timestamp":"{timestamp}","version":{version}}}'
    ).encode()
    return head + payload_jcs + tail


def hash_envelope_with_payload_bytes(
    *,
    run_id: str,
    position: int,
    kind: str,
    version: int,
    timestamp: str,
    event_id: str,
    prev: str,
    payload_jcs: bytes,
) -> str:
    """Hash an envelope whose payload is already in canonical bytes."""
    data = envelope_bytes(
        run_id=run_id,
        position=position,
        kind=kind,
        version=version,
        timestamp=timestamp,
        event_id=event_id,
        prev=prev,
        payload_jcs=payload_jcs,
    )
    return hashlib.sha256(EVENT_DOMAIN + data).hexdigest()


def envelope_hash(envelope: dict[str, Any]) -> str:
    """Hash an envelope given as a dict (its "hash" key, if any, is left out).

    This is the auditor's formula, straight from the definition: any RFC 8785 implementation
    and SHA-256 reproduce it from an export.
    """
    body = {key: value for key, value in envelope.items() if key != "hash"}
    return hashlib.sha256(EVENT_DOMAIN + canonical_json(body)).hexdigest()


def parsed_event_hash(  # noqa: PLR0917 - the envelope's fields, in their order
    run_id: Any,
    position: Any,
    kind: Any,
    version: Any,
    timestamp: Any,
    event_id: Any,
    prev: Any,
    payload: Any,
    *,
    plain_floats: bool = False,
) -> tuple[str, bytes]:
    """`envelope_hash` of an envelope read back by `loads`, and its payload's canonical bytes.

    The same hash as the general formula, made faster: the payload is encoded without the
    JSON-native scan (`canonical_json_of_parsed`) and the other fields are written by hand
    (`envelope_bytes`) when they are what the ledger writes: ints, and strings that need no
    escaping. Anything else takes `envelope_hash`. Raises `InvalidPayloadError` as it does.
    `plain_floats` is what `loads_noting_floats` said of the payload (or of a value holding it).
    """
    payload_jcs = canonical_json_of_parsed(payload, plain_floats=plain_floats)
    if (
        type(position) is int
        and type(version) is int
        and -MAX_SAFE_INTEGER <= position <= MAX_SAFE_INTEGER
        and -MAX_SAFE_INTEGER <= version <= MAX_SAFE_INTEGER
        and type(run_id) is str
        and type(kind) is str
        and type(prev) is str
        and type(timestamp) is str
        and type(event_id) is str
        and _PLAIN.fullmatch(f"{run_id}{kind}{prev}{timestamp}{event_id}") is not None
    ):
        # `envelope_bytes`, fed to SHA-256 piece by piece (the payload is not copied again)
        digest = _sha256(
            f'{_EVENT_DOMAIN_TEXT}{{"event_id":"{event_id}","kind":"{kind}","payload":'.encode()
        )
        digest.update(payload_jcs)
        digest.update(
            f',"position":{position},"prev":"{prev}","run_id":"{run_id}",'
            f'"timestamp":"{timestamp}","version":{version}}}'.encode()
        )
        return digest.hexdigest(), payload_jcs
    envelope = {
        "run_id": run_id,
        "position": position,
        "kind": kind,
        "version": version,
        "timestamp": timestamp,
        "event_id": event_id,
        "prev": prev,
        "payload": payload,
    }
    return envelope_hash(envelope), payload_jcs


def blob_ref(content_jcs: bytes) -> str:
    """Return the content address of a blob from its canonical bytes."""
    return _BLOB_PREFIX + hashlib.sha256(content_jcs).hexdigest()
