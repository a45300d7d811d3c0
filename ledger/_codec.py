"""Stored forms of event state and blobs: canonical JSON, packed with a fixed preset dictionary.

What is hashed is always the logical content (DESIGN.md); this module only decides the bytes on
disk. Stored state is either

- the envelope's canonical JSON as it is (it starts with ``{``: every row written before
  packing existed), or
- ``0x01`` followed by one Zstandard frame (RFC 8878) of that JSON, compressed with
  `DICTIONARY_V1` as a raw-content dictionary (rows written before the transparency log), or
- ``0x02``, the event's 32-byte hash raw, then one Zstandard frame (same dictionary) of the JSON
  with its leading ``{"hash":"<64 hex>",`` replaced by ``{``. The JSON starts with its hash
  (RFC 8785 orders "hash" first), so this is the same content: the hash is kept in the clear so
  that the transparency log reads an event's hash without unpacking it (`stored_hash`), and 32
  raw bytes are smaller than 64 hex digits after packing.

Blobs name their form in their ``encoding`` column: ``raw``, ``zlib`` (RFC 1950, older rows) or
``zstd-d1`` (a Zstandard frame with `DICTIONARY_V1`). Anyone with a Zstandard library and the
dictionary reads a database without agentledger (``zstd -d -D dictionary`` on the command line;
``compression.zstd`` in Python 3.14's standard library).

The dictionary holds the envelope's and the catalogue's key names and the shape of a message
node: an event's JSON is mostly those, which per-row compression alone cannot exploit in a few
hundred bytes. Zstandard (package ``zstandard``) rather than zlib: with the dictionary digested
once, it packed a 900-byte state about 4x faster than DEFLATE for about 8% more bytes, and
unpacked it 2.5x faster (bench/bench_ledger.py, c, measures the bytes it saves). `DICTIONARY_V1` is
frozen: its SHA-256 is pinned by a test, and a different dictionary needs a new marker and
encoding name. Must not know databases.
"""

from __future__ import annotations

import threading
import zlib

import zstandard

__all__ = [
    "BLOB_ENCODING_V1",
    "DICTIONARY_V1",
    "PACKED_STATE_V1",
    "PACKED_STATE_V2",
    "pack_blob",
    "pack_state",
    "stored_hash",
    "unpack_blob",
    "unpack_state",
]

PACKED_STATE_V1 = b"\x01"
PACKED_STATE_V2 = b"\x02"
_HASH_HEAD = b'{"hash":"'
_HASH_END = len(_HASH_HEAD) + 64
BLOB_ENCODING_V1 = "zstd-d1"
_LEVEL = 1  # higher levels cost more than they save on rows of a few hundred bytes
_PACK_BLOBS_OVER = 96

# Rarely used keys first and the commonest last, nearest the data (shortest match offsets).
# Frozen (see the module docstring).
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


_DICT = zstandard.ZstdCompressionDict(DICTIONARY_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
_DICT.precompute_compress(level=_LEVEL)


class _Codecs(threading.local):
    """One compressor and decompressor per thread (zstandard's are not thread-safe)."""

    def __init__(self) -> None:
        self.packer = zstandard.ZstdCompressor(
            level=_LEVEL, dict_data=_DICT, write_checksum=False, write_dict_id=False
        )
        self.unpacker = zstandard.ZstdDecompressor(dict_data=_DICT)


_codecs = _Codecs()


def _pack(data: bytes) -> bytes:
    return _codecs.packer.compress(data)


def _unpack(data: bytes | memoryview) -> bytes:
    unpacker = _codecs.unpacker.decompressobj()
    try:
        out = unpacker.decompress(data)
    except zstandard.ZstdError as e:
        msg = f"the packed data does not decompress: {e}"
        raise ValueError(msg) from None
    if not unpacker.eof:
        msg = "the packed data is cut short"
        raise ValueError(msg)
    if unpacker.unused_data:
        msg = "bytes follow the packed data"
        raise ValueError(msg)
    return bytes(out)


def pack_state(canonical: bytes) -> bytes:
    """The stored form of an event's canonical JSON state (``0x02`` when it starts with a hash).

    Only a hash followed by more of the envelope takes the ``0x02`` form: `unpack_state`
    refuses a rest that is empty (``{}``) or starts with a second ``"hash"``, so such bytes
    (no envelope the ledger writes) are kept in the general form, which round-trips anything.
    """
    rest = canonical[_HASH_END + 2 : _HASH_END + 3]
    if (
        canonical.startswith(_HASH_HEAD)
        and canonical[_HASH_END : _HASH_END + 2] == b'",'
        and rest != b"}"
        and not canonical.startswith(b'"hash"', _HASH_END + 2)
    ):
        hex_digest = canonical[len(_HASH_HEAD) : _HASH_END]
        try:
            digest = bytes.fromhex(hex_digest.decode("ascii"))
        except ValueError:
            digest = b""
        if len(digest) == 32 and digest.hex().encode() == hex_digest:
            return PACKED_STATE_V2 + digest + _pack(b"{" + canonical[_HASH_END + 2 :])
    return PACKED_STATE_V1 + _pack(canonical)


def unpack_state(stored: bytes) -> bytes:
    """An event's canonical JSON state from its stored form (either form).

    Raises ValueError naming what is wrong when the bytes are in neither form.
    """
    head = stored[:1]
    if head == b"{":
        return bytes(stored)
    if head == PACKED_STATE_V1:
        return _unpack(stored[1:])
    if head == PACKED_STATE_V2:
        if len(stored) < 34:
            msg = "the packed state is cut short"
            raise ValueError(msg)
        rest = _unpack(memoryview(stored)[33:])
        if rest[:1] != b"{" or rest == b"{}" or rest.startswith(b'{"hash"'):
            msg = "the packed state does not continue an envelope after its hash"
            raise ValueError(msg)
        # one copy of the (large) rest, not three
        return b"".join(
            (_HASH_HEAD, bytes(stored[1:33]).hex().encode(), b'",', memoryview(rest)[1:])
        )
    msg = f"unknown stored-state form (first byte {bytes(head)!r})"
    raise ValueError(msg)


def stored_hash(stored: bytes) -> bytes:
    """The 32-byte hash an event's stored state records, unpacking it only in the older forms.

    This is the hash as stored, not recomputed from content: the transparency log commits to
    it, and verification recomputes it. Raises ValueError when the state is in no known form or
    records no hash.
    """
    if stored[:1] == PACKED_STATE_V2 and len(stored) >= 33:
        return bytes(stored[1:33])
    canonical = unpack_state(stored)
    hex_digest = canonical[len(_HASH_HEAD) : _HASH_END]
    if not canonical.startswith(_HASH_HEAD):
        msg = "the stored state records no hash"
        raise ValueError(msg)
    try:
        digest = bytes.fromhex(hex_digest.decode("ascii"))
    except ValueError:
        digest = b""
    if len(digest) != 32:
        msg = "the stored state's hash is not 64 hex digits"
        raise ValueError(msg)
    return digest


def pack_blob(canonical: bytes) -> tuple[str, bytes]:
    """A blob's (encoding, stored bytes): packed with the dictionary when that saves space."""
    if len(canonical) > _PACK_BLOBS_OVER:
        packed = _pack(canonical)
        if len(packed) < len(canonical):
            return BLOB_ENCODING_V1, packed
    return "raw", canonical


def unpack_blob(encoding: str, data: bytes) -> bytes:
    """A blob's canonical bytes from its stored form.

    Raises ValueError naming what is wrong for an unknown encoding or bytes that do not unpack.
    """
    if encoding == "raw":
        return bytes(data)
    if encoding == BLOB_ENCODING_V1:
        return _unpack(data)
    if encoding == "zlib":
        try:
            return zlib.decompress(data)
        except zlib.error as e:
            msg = f"the zlib data does not decompress: {e}"
            raise ValueError(msg) from None
    msg = f"unknown blob encoding {encoding!r}"
    raise ValueError(msg)
