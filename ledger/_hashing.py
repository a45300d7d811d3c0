r"""The per-run hash chain: envelope hashing and blob hashing.

``hash_n = SHA-256("agentledger/event/v1\\n" || JCS(envelope_n without "hash"))`` where the
envelope holds run_id, position, kind, version (the payload's schema version), timestamp,
event_id, prev (hash_{n-1}; 64 zeros for the first) and the payload. A blob's ref is
``sha256:`` + SHA-256 of its content's JCS bytes. Must not know storage.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agentledger.ledger._canonical import canonical_json

__all__ = [
    "EVENT_DOMAIN",
    "GENESIS",
    "blob_ref",
    "envelope_bytes",
    "envelope_hash",
    "hash_envelope_with_payload_bytes",
]

EVENT_DOMAIN = b"agentledger/event/v1\n"
GENESIS = "0" * 64
_BLOB_PREFIX = "sha256:"


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


def blob_ref(content_jcs: bytes) -> str:
    """Return the content address of a blob from its canonical bytes."""
    return _BLOB_PREFIX + hashlib.sha256(content_jcs).hexdigest()
