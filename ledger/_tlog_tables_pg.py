"""The transparency log's tables in PostgreSQL (see `_tlog_tables` for what each holds).

Split from `_tlog_tables` so that a SQLite or memory ledger never imports psycopg. Must not
know events' meaning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from psycopg.sql import SQL, Composable, Composed, Identifier

from agentledger.ledger._order_pg import HORIZON_TABLE, ORDER_TABLE
from agentledger.ledger._tlog_tables import (
    Hashed,
    Head,
    LogBatch,
    LogConflictError,
    LogEntry,
    Row,
    _batch,
    _gaps,
    hashed_heads,
    unpack_events,
)

__all__ = ["PostgresLogTables", "postgres_log_statements"]


def postgres_log_statements(schema: Identifier) -> list[Composed]:
    """The log's tables in a PostgreSQL schema."""
    return [
        SQL(
            "CREATE TABLE IF NOT EXISTS {}.agentledger_log_batches (first_leaf BIGINT PRIMARY KEY, "
            "size BIGINT NOT NULL, first_nid BIGINT NOT NULL, last_nid BIGINT NOT NULL, "
            "gaps TEXT NOT NULL)"
        ).format(schema),
        SQL(
            "CREATE TABLE IF NOT EXISTS {}.agentledger_log_events (first_leaf BIGINT PRIMARY KEY, "
            "events BYTEA NOT NULL)"
        ).format(schema),
        SQL(
            "CREATE TABLE IF NOT EXISTS {}.agentledger_log_tiles (level INTEGER NOT NULL, "
            "idx BIGINT NOT NULL, hashes BYTEA NOT NULL, PRIMARY KEY (level, idx))"
        ).format(schema),
        SQL(
            "CREATE TABLE IF NOT EXISTS {}.agentledger_log_checkpoints (size BIGINT NOT NULL, "
            "root BYTEA NOT NULL, note TEXT NOT NULL, PRIMARY KEY (size, root))"
        ).format(schema),
    ]


class PostgresLogTables:
    """The log's tables in the ledger's PostgreSQL schema."""

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder
        self._datastore = recorder.datastore
        schema = Identifier(recorder.datastore.schema or "public")
        self._events = SQL("{}.{}").format(schema, Identifier(recorder.events_table_name))
        self._ordered = SQL("{}.{} o JOIN {} e ON e.notification_id = o.notification_id").format(
            schema, Identifier(ORDER_TABLE), self._events
        )
        self._order = SQL("{}.{}").format(schema, Identifier(ORDER_TABLE))
        self._horizon = SQL("{}.{}").format(schema, Identifier(HORIZON_TABLE))
        self._batches = SQL("{}.agentledger_log_batches").format(schema)
        self._tiles = SQL("{}.agentledger_log_tiles").format(schema)
        self._log_events = SQL("{}.agentledger_log_events").format(schema)
        self._checkpoints = SQL("{}.agentledger_log_checkpoints").format(schema)

    def _rows(self, query: Composable, params: Sequence[Any] = ()) -> list[Any]:
        with self._datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, params)
            return list(curs.fetchall())

    def _tail(self, query: Composable, after: int, limit: int) -> list[Any]:
        """Rows of the ledger-wide order after `after`; numbers what is due at its end."""
        found = self._rows(query, (after, limit))
        if len(found) < limit and self._recorder.assign_order():
            found = self._rows(query, (after, limit))
        return found

    def entries(self, after_nid: int, limit: int) -> list[LogEntry]:
        """Events after `after_nid`, in the ledger-wide order (``seq``, see `_order_pg`)."""
        rows = self._tail(
            SQL(
                "SELECT o.seq AS notification_id, e.originator_id, e.originator_version, CASE "
                "WHEN substring(e.state from 1 for 1) = '\\x02'::bytea THEN substring(e.state "
                "from 1 for 33) ELSE e.state END AS head FROM {} WHERE o.seq > %s "
                "ORDER BY o.seq LIMIT %s"
            ).format(self._ordered),
            after_nid,
            limit,
        )
        return [
            LogEntry(
                r["notification_id"],
                str(r["originator_id"]),
                r["originator_version"],
                bytes(r["head"]),
            )
            for r in rows
        ]

    def heads(self, after_nid: int, limit: int) -> list[Head]:
        """Heads after `after_nid`."""
        rows = self._tail(
            SQL(
                "SELECT o.seq AS notification_id, CASE WHEN substring(e.state from 1 for 1) = "
                "'\\x02'::bytea THEN substring(e.state from 1 for 33) ELSE e.state END AS head, "
                "e.originator_id::text AS run, e.originator_version FROM {} "
                "WHERE o.seq > %s ORDER BY o.seq LIMIT %s"
            ).format(self._ordered),
            after_nid,
            limit,
        )
        return [
            (r["notification_id"], bytes(r["head"]), r["run"], r["originator_version"])
            for r in rows
        ]

    def hashed(self, after_nid: int, limit: int) -> list[Hashed]:
        """Hashes after `after_nid`."""
        return hashed_heads(self.heads(after_nid, limit))

    def rows(self, after_nid: int, limit: int) -> list[Row]:
        """Whole rows after `after_nid`, in the ledger-wide order."""
        found = self._tail(
            SQL(
                "SELECT o.seq AS notification_id, e.state, e.originator_id::text AS run, "
                "e.originator_version, e.topic FROM {} WHERE o.seq > %s ORDER BY o.seq LIMIT %s"
            ).format(self._ordered),
            after_nid,
            limit,
        )
        return [
            (
                r["notification_id"],
                bytes(r["state"] or b""),
                r["run"],
                r["originator_version"],
                str(r["topic"]),
            )
            for r in found
        ]

    def count_rows(self) -> int:
        """Rows that stand in the ledger-wide order, or should (hidden rows included).

        That is the numbered rows, and rows below the numbering horizon that have no number
        (no assigner will ever read them: hidden from the log). Rows committed since the last
        numbering are not counted, so a verification that runs while writers commit is not
        told that rows are hidden (see `_order_pg`).
        """
        query = SQL(
            "SELECT (SELECT count(*) FROM {order}) + (SELECT count(*) FROM {events} e "
            "WHERE e.xact_id < (SELECT horizon FROM {horizon}) AND NOT EXISTS "
            "(SELECT 1 FROM {order} o WHERE o.notification_id = e.notification_id)) AS n"
        ).format(order=self._order, events=self._events, horizon=self._horizon)
        return int(self._rows(query)[0]["n"])

    def batch_events(self, first_leaf: int) -> list[tuple[str, int]]:
        """(run id, position) of each leaf of a batch."""
        rows = self._rows(
            SQL("SELECT events FROM {} WHERE first_leaf = %s").format(self._log_events),
            (first_leaf,),
        )
        return unpack_events(bytes(rows[0]["events"])) if rows else []

    def _select_batches(self, tail: str) -> list[LogBatch]:
        rows = self._rows(
            SQL("SELECT first_leaf, size, first_nid, last_nid, gaps FROM {} " + tail).format(
                self._batches
            )
        )
        return [
            _batch((r["first_leaf"], r["size"], r["first_nid"], r["last_nid"], r["gaps"]))
            for r in rows
        ]

    def batches(self) -> list[LogBatch]:
        """Every batch."""
        return self._select_batches("ORDER BY first_leaf")

    def last_batch(self) -> LogBatch | None:
        """The latest batch."""
        found = self._select_batches("ORDER BY first_leaf DESC LIMIT 1")
        return found[0] if found else None

    def tiles(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """Stored tiles among `keys`."""
        if not keys:
            return {}
        rows = self._rows(
            SQL(
                "SELECT t.level, t.idx, t.hashes FROM {} t JOIN unnest(%s::int[], %s::bigint[]) "
                "AS k(level, idx) ON t.level = k.level AND t.idx = k.idx"
            ).format(self._tiles),
            ([k[0] for k in keys], [k[1] for k in keys]),
        )
        return {(r["level"], r["idx"]): bytes(r["hashes"]) for r in rows}

    def append(self, batch: LogBatch, tiles: dict[tuple[int, int], bytes], events: bytes) -> None:
        """Store a batch, its tiles and events in one transaction."""
        try:
            with self._datastore.transaction(commit=True) as curs:
                curs.execute(
                    SQL(
                        "INSERT INTO {} (first_leaf, size, first_nid, last_nid, gaps) "
                        "VALUES (%s, %s, %s, %s, %s)"
                    ).format(self._batches),
                    (batch.first_leaf, batch.size, batch.first_nid, batch.last_nid, _gaps(batch)),
                )
                curs.execute(
                    SQL("INSERT INTO {} (first_leaf, events) VALUES (%s, %s)").format(
                        self._log_events
                    ),
                    (batch.first_leaf, events),
                )
                curs.executemany(
                    SQL(
                        "INSERT INTO {} (level, idx, hashes) VALUES (%s, %s, %s) "
                        "ON CONFLICT (level, idx) DO UPDATE SET hashes = EXCLUDED.hashes"
                    ).format(self._tiles),
                    [(level, idx, data) for (level, idx), data in tiles.items()],
                )
        except IntegrityError as e:
            raise LogConflictError(str(e)) from e

    def nid_of(self, run_id: str, position: int) -> int | None:
        """The ledger-wide sequence number of a run's event (None: not numbered yet)."""
        rows = self._rows(
            SQL(
                "SELECT o.seq AS notification_id FROM {} WHERE e.originator_id = %s "
                "AND e.originator_version = %s"
            ).format(self._ordered),
            (UUID(run_id), position),
        )
        return int(rows[0]["notification_id"]) if rows else None

    def add_checkpoint(self, size: int, root: bytes, note: str) -> None:
        """Keep an issued checkpoint."""
        with self._datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL(
                    "INSERT INTO {} (size, root, note) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
                ).format(self._checkpoints),
                (size, root, note),
            )

    def checkpoints(self) -> list[tuple[int, bytes, str]]:
        """Issued checkpoints, by size."""
        rows = self._rows(
            SQL("SELECT size, root, note FROM {} ORDER BY size").format(self._checkpoints)
        )
        return [(int(r["size"]), bytes(r["root"]), str(r["note"])) for r in rows]
