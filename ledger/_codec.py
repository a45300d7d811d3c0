"""Stored forms of event state and blobs: canonical JSON, packed with a fixed preset dictionary.

What is hashed is always the logical content (DESIGN.md); this module only decides the bytes on
disk. Stored state is either

- the envelope's canonical JSON as it is (it starts with ``{``: every row written before
  packing existed), or
- ``0x01`` followed by raw DEFLATE (RFC 1951) of that JSON with `DICTIONARY_V1` as the preset
  dictionary.

Blobs name their form in their ``encoding`` column: ``raw``, ``zlib`` (RFC 1950) or ``deflate-d1``
(raw DEFLATE with `DICTIONARY_V1`). So anyone with zlib and this dictionary can read a database
without agentledger: ``zlib.decompressobj(-15, zdict=DICTIONARY_V1).decompress(data[1:])``.

The dictionary holds the envelope's and the catalogue's key names and the shape of a message
node. An event's JSON is mostly those keys, which per-row compression alone cannot exploit in a
few hundred bytes: a ModelCalled state shrinks from about 690 to about 260 bytes with it, 440
without (bench/bench_ledger.py, c). `DICTIONARY_V1` is frozen: its SHA-256 is pinned by a test,
and a different dictionary needs a new marker and encoding name. Must not know databases.
"""

from __future__ import annotations

import zlib

__all__ = [
    "DICTIONARY_V1",
    "PACKED_STATE_V1",
    "pack_blob",
    "pack_state",
    "unpack_blob",
    "unpack_state",
]

PACKED_STATE_V1 = b"\x01"
_LEVEL = 6
_MEM_LEVEL = 4  # a 2 Ki-entry hash table: plenty for rows of a few KiB, and far cheaper to set up
_PACK_BLOBS_OVER = 96

# Rarely used keys first and the commonest last: DEFLATE reaches the end of the dictionary with
# the shortest distances. Frozen (see the module docstring).
DICTIONARY_V1 = (
    b'"about_position":"labels":["author":"note":"reason":"outcome":"answered"'
    b'"evidence_ids":["answer_ref":"sha256:"answer":"question":"guardrail":"limit":"observed":'
    b'"action":"block""decision":"allow""reasons":["redactions":["risk_tags":["relation":"fork"'
    b'"parent_position":"parent_run_id":"overrides":{"code_version":"settings":{"prompts":['
    b'"models":{"config":{"input_ref":"sha256:"agent":"tags":["event_count":"head_hash":"'
    b'"retryable":false"status_code":"backoff_s":"number":"attempts":["cost_usd":'
    b'"error":{"message":"traceback":"Traceback (most recent call last):\\n  File \\"'
    b'"error_type":"error_message":"served_from":"recorded""code":"effectful":false'
    b'"risk":"low""tool_version":"arguments_ref":"sha256:"arguments":{"data_ref":"sha256:'
    b'"data":{"ok":true,"type":"tool":"patch":{"source":"plan":{"steps":[{"id":"'
    b'"parent_step_id":"args":{"status":"ok""output":"name":"version":"text_ref":"sha256:'
    b'"hash":"sha256:"tools_ref":"sha256:"prompt":{"kind":"count":"input":"'
    b'{"message":null,"parent_ref":null}{"message":{"content":"'
    b'","role":"system"},"parent_ref":"sha256:","role":"tool"},"parent_ref":"sha256:'
    b'","role":"user"},"parent_ref":"sha256:","role":"assistant"},"parent_ref":"sha256:'
    b'"caused_by":"step_id":"step-'
    b'"payload":{"actor":"","call_id":"call-","finish_reason":"stop","latency_ms":'
    b'"message_count":,"messages_ref":"sha256:","model":"","params":{"max_tokens":'
    b',"temperature":,"top_p":},"provider":"","response_ref":"sha256:"'
    b',"usage":{"input_tokens":,"output_tokens":,"total_tokens":}},"prev":"'
    b'{"hash":"","id":"","ts":"20","v":1}'
)


def _deflate(data: bytes) -> bytes:
    # The window only needs to reach back over the dictionary and the data.
    wbits = min(15, max(9, (len(DICTIONARY_V1) + len(data) - 1).bit_length()))
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -wbits, _MEM_LEVEL, 0, DICTIONARY_V1)
    return packer.compress(data) + packer.flush()


def _inflate(data: bytes) -> bytes:
    unpacker = zlib.decompressobj(-15, zdict=DICTIONARY_V1)
    out = unpacker.decompress(data)
    if not unpacker.eof or unpacker.unused_data:
        msg = "the packed data is cut short" if not unpacker.eof else "bytes follow the packed data"
        raise ValueError(msg)
    return out


def pack_state(canonical: bytes) -> bytes:
    """The stored form of an event's canonical JSON state."""
    return PACKED_STATE_V1 + _deflate(canonical)


def unpack_state(stored: bytes) -> bytes:
    """An event's canonical JSON state from its stored form (either form).

    Raises ValueError naming what is wrong when the bytes are in neither form.
    """
    head = stored[:1]
    if head == b"{":
        return bytes(stored)
    if head == PACKED_STATE_V1:
        try:
            return _inflate(stored[1:])
        except zlib.error as e:
            msg = f"the packed state does not inflate: {e}"
            raise ValueError(msg) from None
    msg = f"unknown stored-state form (first byte {bytes(head)!r})"
    raise ValueError(msg)


def pack_blob(canonical: bytes) -> tuple[str, bytes]:
    """A blob's (encoding, stored bytes): packed with the dictionary when that saves space."""
    if len(canonical) > _PACK_BLOBS_OVER:
        packed = _deflate(canonical)
        if len(packed) < len(canonical):
            return "deflate-d1", packed
    return "raw", canonical


def unpack_blob(encoding: str, data: bytes) -> bytes:
    """A blob's canonical bytes from its stored form; ValueError for an unknown encoding."""
    if encoding == "raw":
        return bytes(data)
    if encoding == "deflate-d1":
        return _inflate(data)
    if encoding == "zlib":
        return zlib.decompress(data)
    msg = f"unknown blob encoding {encoding!r}"
    raise ValueError(msg)
