"""The transparency log's tables on each backend: integrated batches, tiles, checkpoints.

The log's leaves are the events' hashes in the ledger-wide notification order (SQLite's rowid,
the memory list's index, PostgreSQL's ``seq`` given after commit, see `_order_pg`), so
integrating needs no lock on the commit path: events are committed as before, and integration
reads what follows the last integrated notification id. Three tables:

- ``agentledger_log_batches``: one row per integration, ``(first_leaf, size, first_nid,
  last_nid, gaps)``; leaves ``first_leaf .. first_leaf + size - 1`` are the events with
  notification ids ``first_nid .. last_nid`` but the ``gaps`` (ids never used: a rollback
  left some in PostgreSQL ledgers before schema version 6). The primary key on
  ``first_leaf`` makes two integrators that race conflict, so one retries.
- ``agentledger_log_events``: per batch, which run and position each leaf was (one
  Zstandard frame, see `pack_events`), so that an event deleted after it was logged can still
  be named.
- ``agentledger_log_tiles``: the tree's node hashes in tiles of 256 (as Tessera and the C2SP
  ``tlog-tiles`` layout do): tile ``(level, index)`` holds the hashes of the nodes at tree height
  ``8 * level`` with indices ``256 * index ..``, concatenated. The rightmost tile of a level is
  rewritten as it fills; a node is never changed once written.
- ``agentledger_log_checkpoints``: the signed checkpoints this ledger issued (public text).

None of this is trusted by verification: a checkpoint's root is re-derived from the events, and
proofs read from tiles are checked against a signed root. The tables' SQLite DDL is created with
the ledger's own tables (`_backends.LOG_TABLES_SQLITE`, so that opening a ledger does not load
this module); their PostgreSQL DDL is in `_tlog_tables_pg`. Must not know events' meaning.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol
from uuid import UUID

import zstandard
from eventsourcing.persistence import IntegrityError

from agentledger.ledger.errors import TransparencyLogError

__all__ = [
    "Hashed",
    "Head",
    "LogBatch",
    "LogConflictError",
    "LogEntry",
    "LogTables",
    "MemoryLogTables",
    "Row",
    "SQLiteLogTables",
    "hashed_heads",
    "log_tables",
    "pack_events",
    "unpack_events",
]


class LogConflictError(Exception):
    """Another integrator appended the same leaves first (retry from the new state)."""


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One integration: leaves ``first_leaf ..`` are the events ``first_nid .. last_nid``."""

    first_leaf: int
    size: int
    first_nid: int
    last_nid: int
    gaps: tuple[int, ...] = ()

    @property
    def end(self) -> int:
        """The tree size after this batch."""
        return self.first_leaf + self.size


@dataclass(frozen=True, slots=True)
class LogEntry:
    """An event as the log sees it: notification id, run, position and its stored state head.

    `state` is the stored state's first 33 bytes when it is in the ``0x02`` form (marker and
    raw hash), else the whole stored state.
    """

    nid: int
    run_id: str
    position: int
    state: bytes


class LogTables(Protocol):
    """What the transparency log needs of a backend."""

    def entries(self, after_nid: int, limit: int) -> list[LogEntry]:
        """Events after notification id `after_nid`, in order, at most `limit`."""
        ...

    def heads(self, after_nid: int, limit: int) -> list[Head]:
        """What integration reads: (notification id, state head, run key, position) tuples.

        The run key is the run id as the table spells it (hex on SQLite).
        """
        ...

    def hashed(self, after_nid: int, limit: int) -> list[Hashed]:
        """What integration reads: `heads`, but with the raw hash in place of the state head.

        The hash is the stored state's bytes 2..33 when it is in the ``0x02`` form (and at
        least 33 bytes long), else None: such a row's hash is read from its whole state.
        """
        ...

    def batch_events(self, first_leaf: int) -> list[tuple[str, int]]:
        """(run id, position) of each leaf of the batch that starts at `first_leaf`."""
        ...

    def rows(self, after_nid: int, limit: int) -> list[Row]:
        """Whole rows after `after_nid`: (notification id, state, run key, position, kind)."""
        ...

    def count_rows(self) -> int:
        """How many rows the events table holds, whatever their ids."""
        ...

    def batches(self) -> list[LogBatch]:
        """Every integration batch, in leaf order."""
        ...

    def last_batch(self) -> LogBatch | None:
        """The latest integration batch."""
        ...

    def tiles(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """The stored tiles among `keys` ((level, index) pairs)."""
        ...

    def append(self, batch: LogBatch, tiles: dict[tuple[int, int], bytes], events: bytes) -> None:
        """Store a batch, its tiles and events in one transaction; `LogConflictError` if taken."""
        ...

    def nid_of(self, run_id: str, position: int) -> int | None:
        """The notification id of a run's event."""
        ...

    def add_checkpoint(self, size: int, root: bytes, note: str) -> None:
        """Keep a checkpoint this ledger issued (idempotent)."""
        ...

    def checkpoints(self) -> list[tuple[int, bytes, str]]:
        """Checkpoints this ledger issued: (size, root, signed note), by size."""
        ...


_ZSTD = zstandard.ZstdCompressor(level=1)
Head = tuple[int, bytes, str, int]
"""(notification id, state head, run key, position)."""
Hashed = tuple[int, bytes | None, str, int]
"""(notification id, raw hash of a ``0x02`` state or None, run key, position)."""
Row = tuple[int, bytes, str, int, str]
"""(notification id, whole stored state, run key, position, kind)."""
FIRST_ID = -(2**63)
"""Read "after" this to read every row: ids the ledger never assigns (zero, negative) included."""


def pack_events(rows: Sequence[Head | Hashed]) -> bytes:
    """The (run, position) of each leaf of a batch, packed as one Zstandard frame.

    `rows` are the batch's `LogTables.heads` (or `LogTables.hashed`), leaf by leaf. The frame
    holds the run keys' length (8 bytes), the run keys one a line, then the positions as
    little-endian int64.
    """
    runs = "\n".join(map(itemgetter(2), rows)).encode()
    positions = array("q", map(itemgetter(3), rows))
    if sys.byteorder != "little":
        positions.byteswap()
    return _ZSTD.compress(len(runs).to_bytes(8, "big") + runs + positions.tobytes())


def hashed_heads(heads: Sequence[Head]) -> list[Hashed]:
    """`LogTables.hashed` from `LogTables.heads`, for backends that read heads anyway."""
    return [(n, h[1:] if len(h) == 33 and h[:1] == b"\x02" else None, r, p) for n, h, r, p in heads]


def unpack_events(data: bytes) -> list[tuple[str, int]]:
    """The (run id, position) list `pack_events` packed; damage is a `TransparencyLogError`."""
    try:
        raw = zstandard.ZstdDecompressor().decompress(data)
        length = int.from_bytes(raw[:8], "big")
        runs = raw[8 : 8 + length].decode().split("\n")
        positions = array("q")
        positions.frombytes(raw[8 + length :])
        if sys.byteorder != "little":
            positions.byteswap()
        return [(str(UUID(run)), int(p)) for run, p in zip(runs, positions, strict=True)]
    except (zstandard.ZstdError, ValueError, UnicodeDecodeError) as e:
        raise TransparencyLogError(
            f"the log's record of which event each leaf was is damaged ({e})"
        ) from None


def _batch(row: Sequence[Any]) -> LogBatch:
    try:
        gaps = tuple(int(g) for g in json.loads(row[4]))
        return LogBatch(int(row[0]), int(row[1]), int(row[2]), int(row[3]), gaps)
    except (ValueError, TypeError) as e:
        detail = f"the log's batch starting at leaf {row[0]!r} is damaged ({e})"
        raise TransparencyLogError(detail) from None


def _gaps(batch: LogBatch) -> str:
    return json.dumps(list(batch.gaps))


class SQLiteLogTables:
    """The log's tables in the ledger's SQLite file."""

    def __init__(self, recorder: Any) -> None:
        self._datastore = recorder.datastore
        self._events = recorder.events_table_name

    def entries(self, after_nid: int, limit: int) -> list[LogEntry]:
        """Events after `after_nid`, in rowid (commit) order."""
        with self._datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT rowid, originator_id, originator_version, CASE WHEN "
                "substr(state, 1, 1) = x'02' THEN substr(state, 1, 33) ELSE state END "
                f"FROM {self._events} WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (after_nid, limit),
            )
            return [
                LogEntry(row[0], str(UUID(row[1])), row[2], bytes(row[3])) for row in c.fetchall()
            ]

    def heads(self, after_nid: int, limit: int) -> list[Head]:
        """Heads after `after_nid`, on a plain cursor (no row objects)."""
        with self._datastore.get_connection(commit=False) as connection:
            raw = getattr(connection, "raw", None)
            if raw is None:
                entries = self.entries(after_nid, limit)
                return [(e.nid, e.state, e.run_id, e.position) for e in entries]
            cursor = raw.cursor()
            cursor.row_factory = None
            cursor.execute(
                "SELECT rowid, CASE WHEN substr(state, 1, 1) = x'02' THEN substr(state, 1, 33) "
                f"ELSE state END, originator_id, originator_version FROM {self._events} "
                "WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (after_nid, limit),
            )
            rows: list[Head] = cursor.fetchall()
            cursor.close()
            return rows

    def hashed(self, after_nid: int, limit: int) -> list[Hashed]:
        """Hashes after `after_nid`, cut out of the ``0x02`` states by SQLite."""
        with self._datastore.get_connection(commit=False) as connection:
            raw = getattr(connection, "raw", None)
            if raw is None:
                return hashed_heads(self.heads(after_nid, limit))
            cursor = raw.cursor()
            cursor.row_factory = None
            cursor.execute(
                "SELECT rowid, CASE WHEN substr(state, 1, 1) = x'02' AND length(state) >= 33 "
                "THEN substr(state, 2, 32) END, originator_id, originator_version "
                f"FROM {self._events} WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (after_nid, limit),
            )
            rows: list[Hashed] = cursor.fetchall()
            cursor.close()
            return rows

    def rows(self, after_nid: int, limit: int) -> list[Row]:
        """Whole rows after `after_nid`, in rowid order."""
        with self._datastore.get_connection(commit=False) as connection:
            cursor = connection.raw.cursor()
            cursor.row_factory = None
            cursor.execute(
                "SELECT rowid, state, originator_id, originator_version, topic "
                f"FROM {self._events} WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (after_nid, limit),
            )
            rows = [(r[0], bytes(r[1] or b""), str(r[2]), r[3], str(r[4])) for r in cursor]
            cursor.close()
            return rows

    def count_rows(self) -> int:
        """Rows in the events table."""
        with self._datastore.transaction(commit=False) as c:
            c.execute(f"SELECT count(*) FROM {self._events}")
            return int(c.fetchone()[0])

    def batch_events(self, first_leaf: int) -> list[tuple[str, int]]:
        """(run id, position) of each leaf of a batch."""
        with self._datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT events FROM agentledger_log_events WHERE first_leaf = ?", (first_leaf,)
            )
            row = c.fetchone()
            return [] if row is None else unpack_events(bytes(row[0]))

    def batches(self) -> list[LogBatch]:
        """Every batch."""
        with self._datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT first_leaf, size, first_nid, last_nid, gaps FROM agentledger_log_batches "
                "ORDER BY first_leaf"
            )
            return [_batch(row) for row in c.fetchall()]

    def last_batch(self) -> LogBatch | None:
        """The latest batch."""
        with self._datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT first_leaf, size, first_nid, last_nid, gaps FROM agentledger_log_batches "
                "ORDER BY first_leaf DESC LIMIT 1"
            )
            row = c.fetchone()
            return None if row is None else _batch(row)

    def tiles(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """Stored tiles among `keys`."""
        found: dict[tuple[int, int], bytes] = {}
        with self._datastore.transaction(commit=False) as c:
            for level, idx in keys:
                c.execute(
                    "SELECT hashes FROM agentledger_log_tiles WHERE level = ? AND idx = ?",
                    (level, idx),
                )
                row = c.fetchone()
                if row is not None:
                    found[(level, idx)] = bytes(row[0])
        return found

    def append(self, batch: LogBatch, tiles: dict[tuple[int, int], bytes], events: bytes) -> None:
        """Store a batch, its tiles and events in one transaction."""
        try:
            with self._datastore.transaction(commit=True) as c:
                c.execute(
                    "INSERT INTO agentledger_log_batches (first_leaf, size, first_nid, last_nid, "
                    "gaps) VALUES (?, ?, ?, ?, ?)",
                    (batch.first_leaf, batch.size, batch.first_nid, batch.last_nid, _gaps(batch)),
                )
                c.execute(
                    "INSERT INTO agentledger_log_events (first_leaf, events) VALUES (?, ?)",
                    (batch.first_leaf, events),
                )
                c.executemany(
                    "INSERT OR REPLACE INTO agentledger_log_tiles (level, idx, hashes) "
                    "VALUES (?, ?, ?)",
                    [(level, idx, data) for (level, idx), data in tiles.items()],
                )
        except (IntegrityError, sqlite3.IntegrityError) as e:
            raise LogConflictError(str(e)) from e

    def nid_of(self, run_id: str, position: int) -> int | None:
        """The rowid of a run's event."""
        with self._datastore.transaction(commit=False) as c:
            c.execute(
                f"SELECT rowid FROM {self._events} WHERE originator_id = ? "
                "AND originator_version = ?",
                (UUID(run_id).hex, position),
            )
            row = c.fetchone()
            return None if row is None else int(row[0])

    def add_checkpoint(self, size: int, root: bytes, note: str) -> None:
        """Keep an issued checkpoint."""
        with self._datastore.transaction(commit=True) as c:
            c.execute(
                "INSERT OR IGNORE INTO agentledger_log_checkpoints (size, root, note) "
                "VALUES (?, ?, ?)",
                (size, root, note),
            )

    def checkpoints(self) -> list[tuple[int, bytes, str]]:
        """Issued checkpoints, by size."""
        with self._datastore.transaction(commit=False) as c:
            c.execute("SELECT size, root, note FROM agentledger_log_checkpoints ORDER BY size")
            return [(int(r[0]), bytes(r[1]), str(r[2])) for r in c.fetchall()]


class MemoryLogTables:
    """The log's tables beside the in-memory recorder (for tests)."""

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder
        self._lock = recorder._database_lock
        state = recorder.__dict__.setdefault("_agentledger_log", {})
        self._batches: list[LogBatch] = state.setdefault("batches", [])
        self._tiles: dict[tuple[int, int], bytes] = state.setdefault("tiles", {})
        self._checkpoints: dict[tuple[int, bytes], str] = state.setdefault("checkpoints", {})
        self._events: dict[int, bytes] = state.setdefault("events", {})

    def entries(self, after_nid: int, limit: int) -> list[LogEntry]:
        """Events after `after_nid`, in list order."""
        with self._lock:
            start = max(after_nid, 0)
            stored = self._recorder._stored_events[start : start + limit]
            return [
                LogEntry(
                    start + i + 1,
                    str(UUID(str(s.originator_id))),
                    s.originator_version,
                    bytes(s.state[:33] if s.state[:1] == b"\x02" else s.state),
                )
                for i, s in enumerate(stored)
            ]

    def heads(self, after_nid: int, limit: int) -> list[Head]:
        """Heads after `after_nid`."""
        return [(e.nid, e.state, e.run_id, e.position) for e in self.entries(after_nid, limit)]

    def hashed(self, after_nid: int, limit: int) -> list[Hashed]:
        """Hashes after `after_nid`."""
        return hashed_heads(self.heads(after_nid, limit))

    def rows(self, after_nid: int, limit: int) -> list[Row]:
        """Whole rows after `after_nid`, in list order."""
        start = max(after_nid, 0)
        with self._lock:
            stored = self._recorder._stored_events[start : start + limit]
            return [
                (
                    start + i + 1,
                    bytes(s.state),
                    str(UUID(str(s.originator_id))),
                    s.originator_version,
                    s.topic,
                )
                for i, s in enumerate(stored)
            ]

    def count_rows(self) -> int:
        """Events held."""
        with self._lock:
            return len(self._recorder._stored_events)

    def batch_events(self, first_leaf: int) -> list[tuple[str, int]]:
        """(run id, position) of each leaf of a batch."""
        with self._lock:
            data = self._events.get(first_leaf)
        return [] if data is None else unpack_events(data)

    def batches(self) -> list[LogBatch]:
        """Every batch."""
        with self._lock:
            return list(self._batches)

    def last_batch(self) -> LogBatch | None:
        """The latest batch."""
        with self._lock:
            return self._batches[-1] if self._batches else None

    def tiles(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """Stored tiles among `keys`."""
        with self._lock:
            return {key: self._tiles[key] for key in keys if key in self._tiles}

    def append(self, batch: LogBatch, tiles: dict[tuple[int, int], bytes], events: bytes) -> None:
        """Store a batch, its tiles and events."""
        with self._lock:
            end = self._batches[-1].end if self._batches else 0
            if batch.first_leaf != end:
                raise LogConflictError(f"leaf {batch.first_leaf} is not the next ({end})")
            self._batches.append(batch)
            self._tiles.update(tiles)
            self._events[batch.first_leaf] = events

    def nid_of(self, run_id: str, position: int) -> int | None:
        """The list index (plus one) of a run's event."""
        with self._lock:
            index = self._recorder._stored_events_index.get(run_id, {})
            found = index.get(position)
            return None if found is None else int(found) + 1

    def add_checkpoint(self, size: int, root: bytes, note: str) -> None:
        """Keep an issued checkpoint."""
        with self._lock:
            self._checkpoints.setdefault((size, root), note)

    def checkpoints(self) -> list[tuple[int, bytes, str]]:
        """Issued checkpoints, by size."""
        with self._lock:
            return sorted((size, root, note) for (size, root), note in self._checkpoints.items())


def log_tables(kind: str, recorder: Any) -> LogTables:
    """The log's tables for a store of `kind` ('sqlite', 'postgresql' or 'memory')."""
    if kind == "sqlite":
        return SQLiteLogTables(recorder)
    if kind == "postgresql":
        from agentledger.ledger._tlog_tables_pg import PostgresLogTables

        return PostgresLogTables(recorder)
    return MemoryLogTables(recorder)
