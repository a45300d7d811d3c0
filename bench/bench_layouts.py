"""Storage layouts for the 200-call conversation of ledger target (c), for information only.

Records the conversation once through the ledger, then rewrites its exact event rows and blobs
into candidate layouts with raw sqlite3 (same PRAGMAs) and measures each file after
``wal_checkpoint(TRUNCATE)`` against the conversation's distinct content. It answers one question
for a storage-format v2: how close to ``<= 2x`` can a layout that keeps one row per blob get?

1. the ledger's layout as it is (the calibration row: it should match bench_ledger's (c));
2. blobs in a rowid table keyed by a 32-byte binary ref (UNIQUE index), packed one by one;
3. as 2, each message node packed with its ancestors' content as a raw Zstandard dictionary
   (the last 64 KB of the conversation before it), so packing sees across messages;
4. as 3, with events storing neither ``hash`` nor ``prev`` (both can be recomputed).

bench_ledger's (c) info row gives the other bound: all blobs packed together as one stream.
Run: ``python -m bench --only layouts``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import zstandard

from agentledger.ledger import DICTIONARY_V1
from agentledger.ledger._codec import pack_state, unpack_blob, unpack_state
from bench._ideal import write_transaction
from bench._workload import make_conversation, unique_content_bytes
from bench.bench_ledger import (
    INSERT,
    Row,
    capture_pass,
    checkpointed_size,
    fresh_dir,
    raw_connect,
    record_conversation,
)

WINDOW = 64 * 1024
LEVEL = 3
BINARY_BLOBS = (
    "CREATE TABLE agentledger_blobs (id INTEGER PRIMARY KEY, ref BLOB NOT NULL UNIQUE, "
    "size INTEGER NOT NULL, encoding TEXT NOT NULL, data BLOB NOT NULL)"
)

BlobRow = tuple[Any, int, str, bytes]


def _chain_packer(canonical: dict[str, bytes]) -> Callable[[str], bytes]:
    """Pack a blob with the content of its ancestor message nodes as a raw dictionary."""

    def pack(ref: str) -> bytes:
        node = json.loads(canonical[ref])
        parent = node.get("parent_ref") if isinstance(node, dict) else None
        ancestors: list[bytes] = []
        size = 0
        while parent is not None and size < WINDOW:
            ancestors.append(canonical[parent])
            size += len(canonical[parent])
            parent = json.loads(canonical[parent]).get("parent_ref")
        content = (DICTIONARY_V1 + b"".join(reversed(ancestors)))[-WINDOW:]
        dictionary = zstandard.ZstdCompressionDict(
            content, dict_type=zstandard.DICT_TYPE_RAWCONTENT
        )
        packer = zstandard.ZstdCompressor(
            level=LEVEL, dict_data=dictionary, write_checksum=False, write_dict_id=False
        )
        return packer.compress(canonical[ref])

    return pack


def _without_hash_and_prev(row: Row) -> Row:
    body = json.loads(unpack_state(row[3]))
    del body["hash"], body["prev"]
    state = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (row[0], row[1], row[2], pack_state(state.encode()))


def _file_size(
    schema: Sequence[str], pragmas: dict[str, Any], blobs: list[BlobRow], rows: Sequence[Row]
) -> int:
    with fresh_dir() as directory:
        db = directory / "layout.db"
        conn = raw_connect(db, pragmas)
        for statement in schema:
            conn.execute(statement)
        write_transaction(conn, INSERT, blobs, rows, [])
        conn.close()
        size, _ = checkpointed_size(db)
    return size


def run(quick: bool = False) -> list[dict[str, Any]]:
    """The four layouts' file sizes against the conversation's distinct content."""
    del quick  # one 200-call conversation either way: it takes about a second
    conversation = make_conversation()
    unique = unique_content_bytes(conversation)
    _, schema, rows, sets, result = capture_pass(
        lambda ledger: record_conversation(ledger, conversation)
    )
    stored = [blob for write in sets for blob in write.blobs]
    canonical = {ref: unpack_blob(encoding, data) for ref, _, encoding, data in stored}
    binary_schema = [BINARY_BLOBS if "agentledger_blobs (" in s else s for s in schema]
    per_blob = [(bytes.fromhex(ref[7:]), size, enc, data) for ref, size, enc, data in stored]
    chain = _chain_packer(canonical)
    chained = [(bytes.fromhex(ref[7:]), size, "chain", chain(ref)) for ref, size, _, _ in stored]
    slim = [_without_hash_and_prev(row) for row in rows]
    layouts = [
        ("as stored now (calibration)", schema, list(stored), rows),
        ("binary 32-byte blob keys, rowid blob table", binary_schema, per_blob, rows),
        ("+ message nodes packed with their ancestors as dictionary", binary_schema, chained, rows),
        ("+ events without stored hash and prev", binary_schema, chained, slim),
    ]
    out = []
    for name, layout_schema, blobs, events in layouts:
        size = _file_size(layout_schema, result.pragmas, blobs, events)
        packed = sum(len(blob[3]) for blob in blobs)
        out.append(
            {
                "name": f"[c] layout: {name}",
                "value": size,
                "baseline": unique,
                "ratio": round(size / unique, 3),
                "target": None,
                "unit": "B",
                "higher_is_better": False,
                "note": (
                    f"{len(blobs)} blobs holding {packed:,} B, {len(events)} events; "
                    f"one row per blob (information for a storage-format v2)"
                ),
            }
        )
    return out


def main(argv: list[str]) -> int:
    """``python -m bench.bench_layouts``."""
    from bench._harness import main as harness_main

    return harness_main(["--only", "layouts", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
