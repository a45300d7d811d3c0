"""The stored forms of event state and blobs (ledger/_codec.py).

Packing must round-trip every byte string, stay readable by any Zstandard library with the
published dictionary (an auditor needs nothing of ours), keep reading rows written before packing
existed, and refuse bytes in no known form with an error that says what is wrong.
"""

from __future__ import annotations

import hashlib
import sqlite3
import zlib
from pathlib import Path

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from agentledger.ledger import DICTIONARY_V1, Ledger, canonical_json, unpack_blob, unpack_state
from agentledger.ledger._codec import _pack, pack_blob, pack_state, stored_hash

# The dictionary is part of the on-disk format: rows packed with it must unpack forever.
DICTIONARY_V1_SHA256 = "fc4e95c426ba7e792002205c38b21214ec0112807715faabd74a27c2ec57ac91"

ENVELOPE = canonical_json(
    {
        "hash": hashlib.sha256(b"an event").hexdigest(),
        "id": "0f" * 16,
        "payload": {
            "actor": "openai:gpt-4o-mini",
            "call_id": "call-3",
            "messages_ref": "sha256:" + "cd" * 32,
            "usage": {"input_tokens": 812, "output_tokens": 40, "total_tokens": 852},
        },
        "prev": "ef" * 32,
        "ts": "2026-11-23T10:00:00.000000Z",
        "v": 1,
    }
)


def test_the_dictionary_is_frozen() -> None:
    """Changing DICTIONARY_V1 would make every packed row unreadable: it needs a new marker."""
    assert hashlib.sha256(DICTIONARY_V1).hexdigest() == DICTIONARY_V1_SHA256


@given(st.binary(max_size=5000))
def test_any_state_round_trips(data: bytes) -> None:
    """Whatever bytes are packed come back unchanged (0x01 unless they start with a hash)."""
    packed = pack_state(data)
    assert packed[:1] == b"\x01"
    assert unpack_state(packed) == data


@given(st.binary(min_size=32, max_size=32), st.binary(max_size=2000))
def test_a_state_that_starts_with_its_hash_keeps_the_hash_in_the_clear(
    digest: bytes, rest: bytes
) -> None:
    """``0x02`` + the raw 32-byte hash + the packed rest; it round-trips byte for byte.

    (A rest that is no more of an envelope, ``}`` or a second ``"hash"``, which the ``0x02``
    form refuses when read, is kept in the general form, and round-trips too.)
    """
    data = b'{"hash":"' + digest.hex().encode() + b'",' + rest
    packed = pack_state(data)
    assert stored_hash(packed) == digest
    assert unpack_state(packed) == data
    if rest[:1] == b"}" or rest.startswith(b'"hash"'):
        assert packed[:1] == b"\x01"
    else:
        assert packed[:1] == b"\x02"
        assert packed[1:33] == digest


def test_a_hash_with_nothing_after_it_is_packed_in_the_general_form() -> None:
    """The examples the ``0x02`` form would not read back: they take the ``0x01`` form."""
    head = b'{"hash":"' + b"ab" * 32 + b'",'
    for data in (head + b"}", head + b'"hash":"x"}'):
        packed = pack_state(data)
        assert packed[:1] == b"\x01"
        assert unpack_state(packed) == data


def test_an_uppercase_or_short_hash_is_packed_in_the_general_form() -> None:
    """Only a lowercase 64-digit hash is kept raw: the general form loses nothing otherwise."""
    for head in (b'{"hash":"' + b"AB" * 32 + b'",', b'{"hash":"abc",'):
        packed = pack_state(head + b'"v":1}')
        assert packed[:1] == b"\x01"
        assert unpack_state(packed) == head + b'"v":1}'


def test_the_stored_hash_is_read_from_every_form() -> None:
    """Plain JSON, 0x01 and 0x02 rows all give the hash they record."""
    digest = hashlib.sha256(b"an event").digest()
    assert stored_hash(pack_state(ENVELOPE)) == digest
    assert stored_hash(ENVELOPE) == digest
    assert stored_hash(b"\x01" + _pack(ENVELOPE)) == digest
    with pytest.raises(ValueError, match="records no hash"):
        stored_hash(pack_state(b'{"v":1}'))


@given(st.binary(max_size=5000))
def test_any_blob_round_trips(data: bytes) -> None:
    """Blobs round-trip in whichever form `pack_blob` picks, and it never stores more bytes."""
    encoding, stored = pack_blob(data)
    assert encoding in {"raw", "zstd-d1"}
    assert len(stored) <= len(data)
    assert unpack_blob(encoding, stored) == data


def test_an_auditor_unpacks_with_zstandard_and_the_dictionary() -> None:
    """The format is a Zstandard frame with a raw-content dictionary: any decoder reads it."""
    dictionary = zstandard.ZstdCompressionDict(
        DICTIONARY_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT
    )
    unpacker = zstandard.ZstdDecompressor(dict_data=dictionary)
    packed = pack_state(ENVELOPE)
    assert packed[:1] == b"\x02"
    rest = unpacker.decompress(packed[33:])
    assert b'{"hash":"' + packed[1:33].hex().encode() + b'",' + rest[1:] == ENVELOPE
    encoding, stored = pack_blob(ENVELOPE)
    assert encoding == "zstd-d1"
    assert unpacker.decompress(stored) == ENVELOPE


def test_packing_shrinks_an_envelope_well_below_plain_zlib() -> None:
    """The dictionary is what makes packing a few hundred bytes worthwhile."""
    assert len(pack_state(ENVELOPE)) < 0.8 * len(zlib.compress(ENVELOPE, 9))


def test_rows_written_before_packing_still_read() -> None:
    """Stored state that is plain canonical JSON, and ``zlib``/``raw`` blobs, read as is."""
    assert unpack_state(ENVELOPE) == ENVELOPE
    assert unpack_blob("zlib", zlib.compress(ENVELOPE)) == ENVELOPE
    assert unpack_blob("raw", ENVELOPE) == ENVELOPE


def test_small_blobs_are_stored_raw() -> None:
    """Below about a hundred bytes packing is not worth it."""
    assert pack_blob(b'"short"') == ("raw", b'"short"')


@pytest.mark.parametrize(
    ("stored", "words"),
    [
        (b"\x03" + pack_state(ENVELOPE)[1:], "unknown stored-state form"),
        (pack_state(ENVELOPE)[:30], "cut short"),
        (b"", "unknown stored-state form"),
        (pack_state(ENVELOPE)[:20], "cut short"),
        (pack_state(ENVELOPE) + b"junk", "bytes follow"),
        (b"\x01\xff\xff\xff", "does not decompress"),
    ],
)
def test_state_in_no_known_form_is_refused_by_name(stored: bytes, words: str) -> None:
    """unpack_state says what is wrong instead of returning garbage."""
    with pytest.raises(ValueError, match=words):
        unpack_state(stored)


def test_an_unknown_blob_encoding_is_refused_by_name() -> None:
    """A blob row with an encoding this version does not know is an error naming it."""
    with pytest.raises(ValueError, match="unknown blob encoding 'brotli'"):
        unpack_blob("brotli", b"...")


def test_a_recorded_run_is_stored_packed(tmp_path: Path) -> None:
    """What the ledger writes is in the packed forms, and reads back as recorded."""
    url = f"sqlite:///{tmp_path}/codec.db"
    with Ledger.open(url) as ledger:
        with ledger.record_run("codec", input="pack me") as run:
            run.model_call(
                provider="p",
                model="m",
                messages=[{"role": "user", "content": "hello " * 40}],
                response={"role": "assistant", "content": "hi " * 40},
            )
        events = ledger.events(run.run_id)
    with sqlite3.connect(f"{tmp_path}/codec.db") as conn:
        states = [bytes(s) for (s,) in conn.execute("SELECT state FROM agentledger_events")]
        encodings = {e for (e,) in conn.execute("SELECT encoding FROM agentledger_blobs")}
    conn.close()
    assert all(s[:1] == b"\x02" for s in states)
    assert "zstd-d1" in encodings
    assert [e.kind for e in events] == ["RunStarted", "ModelCalled", "RunCompleted"]
