"""An idealised ledger: the least work the design mandates, as a ceiling for targets (a) and (b).

It replays the ledger's own captured transactions from their logical content and does only what
no implementation of DESIGN.md can skip: the canonical JSON of every payload and blob (here
``orjson`` with sorted keys, the ledger's own fast path for values without special floats),
SHA-256 of every envelope on the run's chain and of every blob, and the stored state and
packing, all through the ledger's own functions (`seal`, `blob_ref`, `pack_blob`), and the
same statements in the same transactions (events, blobs, runs index). No pydantic, no
JSON-native checks, no run aggregate, no recorder objects: a correct ledger must do more, so its
figure is an upper bound for any ledger of this design written in Python on this machine.

`logical_sets` rebuilds the input from the captured write sets; `ideal_pass` times the writer and
returns its event rows, which the caller checks are byte-for-byte the ledger's own, so the ceiling
is measured against the same baseline as the ledger.
"""

from __future__ import annotations

import gc
import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson

from agentledger.ledger._codec import pack_blob, unpack_blob, unpack_state
from agentledger.ledger._hashing import GENESIS, blob_ref
from agentledger.ledger._mapper import seal

__all__ = ["LogicalSet", "ideal_pass", "logical_sets", "write_transaction"]

_SORTED = orjson.OPT_SORT_KEYS

Row = tuple[str, int, str, bytes]
# (run id hex, run id, position, kind, payload, timestamp, event id, schema version)
LogicalEvent = tuple[str, str, int, str, Any, str, str, int]


@dataclass
class LogicalSet:
    """One ledger transaction's logical content: events, blob values and runs-index statements."""

    events: list[LogicalEvent]
    blobs: list[Any]
    runs: list[tuple[str, tuple[Any, ...], list[str]]]


def logical_sets(sets: Sequence[Any]) -> list[LogicalSet]:
    """The logical content of captured write sets (`bench_ledger.WriteSet`), untimed."""
    out: list[LogicalSet] = []
    for write in sets:
        events: list[LogicalEvent] = []
        for run_hex, position, kind, state in write.events:
            body = json.loads(unpack_state(state))
            run_id = str(UUID(run_hex))
            payload, ts, event_id, version = body["payload"], body["ts"], body["id"], body["v"]
            events.append((run_hex, run_id, position, kind, payload, ts, event_id, version))
        blobs = [json.loads(unpack_blob(encoding, data)) for _, _, encoding, data in write.blobs]
        out.append(LogicalSet(events, blobs, write.runs))
    return out


def write_transaction(
    conn: sqlite3.Connection,
    insert_events: str,
    blob_rows: Sequence[tuple[str, int, str, bytes]],
    event_rows: Sequence[Row],
    runs: Sequence[tuple[str, tuple[Any, ...], list[str]]],
) -> None:
    """One ledger transaction's statements, as ledger/_backends.py issues them, in one commit."""
    conn.execute("BEGIN")
    if blob_rows:
        conn.executemany(
            "INSERT OR IGNORE INTO agentledger_blobs (ref, size, encoding, data) "
            "VALUES (?, ?, ?, ?)",
            blob_rows,
        )
    conn.executemany(insert_events, event_rows)
    for action, values, tags in runs:
        if action == "insert":
            conn.execute(f"INSERT INTO agentledger_runs VALUES ({','.join('?' * 15)})", values)
            conn.executemany(
                "INSERT OR IGNORE INTO agentledger_run_tags (tag, run_id) VALUES (?, ?)",
                [(tag, values[0]) for tag in tags],
            )
        else:
            conn.execute(
                "UPDATE agentledger_runs SET last_position = ?, head_hash = ?, status = ?, "
                "ended_at = ?, updated_at = ?, input_tokens = input_tokens + ?, "
                "output_tokens = output_tokens + ?, cost_usd = CASE WHEN cost_usd IS NULL "
                "THEN ? ELSE cost_usd + COALESCE(?, 0.0) END, "
                "model_latency_ms = model_latency_ms + ?, tool_latency_ms = tool_latency_ms + ? "
                "WHERE run_id = ?",
                values,
            )
    conn.execute("COMMIT")


def ideal_pass(
    conn: sqlite3.Connection, insert_events: str, sets: Sequence[LogicalSet]
) -> tuple[float, list[Row]]:
    """Seconds for the idealised ledger to hash, pack and write `sets` on `conn`; its event rows.

    `conn` is a fresh autocommit connection on a database holding the ledger's schema.
    """
    heads: dict[str, str] = {}
    written: list[Row] = []
    gc.collect()
    started = time.perf_counter()
    for write in sets:
        blob_rows = []
        for value in write.blobs:
            canonical = orjson.dumps(value, option=_SORTED)
            encoding, data = pack_blob(canonical)
            blob_rows.append((blob_ref(canonical), len(canonical), encoding, data))
        event_rows: list[Row] = []
        for run_hex, run_id, position, kind, payload, ts, event_id, version in write.events:
            prev = heads.get(run_hex, GENESIS)
            payload_jcs = orjson.dumps(payload, option=_SORTED)
            digest, state = seal(
                run_id=run_id,
                position=position,
                kind=kind,
                version=version,
                timestamp=ts,
                event_id=event_id,
                prev=prev,
                payload_jcs=payload_jcs,
            )
            event_rows.append((run_hex, position, kind, state))
            heads[run_hex] = digest
        write_transaction(conn, insert_events, blob_rows, event_rows, write.runs)
        written.extend(event_rows)
    return time.perf_counter() - started, written
