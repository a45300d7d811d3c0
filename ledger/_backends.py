"""Storage backends: eventsourcing's recorders, extended with blobs and a runs index.

Each backend is an eventsourcing application recorder (SQLite, PostgreSQL or in-memory POPO)
whose insert also writes the content-addressed blobs the events refer to and the runs index row,
in the same transaction. Events and blobs are append-only (database triggers refuse UPDATE and
DELETE). Must not know events' meaning beyond the envelope, nor agents.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import (
    IntegrityError,
    Notification,
    OperationalError,
    PersistenceError,
    StoredEvent,
)
from eventsourcing.popo import POPOApplicationRecorder
from eventsourcing.sqlite import (
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteCursor,
    SQLiteDatastore,
)

from agentledger.ledger._records import BlobRow, RunIndexUpdate, RunInfo, RunQuery
from agentledger.ledger._tlog_tables import LOG_TABLES_SQLITE

__all__ = [
    "EVENTS_TABLE",
    "LedgerRecorder",
    "LedgerSQLiteConnection",
    "MemoryRecorder",
    "SQLiteRecorder",
]

EVENTS_TABLE = "agentledger_events"
SCHEMA_VERSION = 4
"""The PostgreSQL schema's version: bump it whenever the DDL below changes (an open of an older
schema then runs the DDL again, under an advisory lock)."""
ENTRY_RUNS_DDL = (
    "CREATE TABLE IF NOT EXISTS agentledger_entry_runs (run_id TEXT PRIMARY KEY) WITHOUT ROWID"
)
"""Runs this ledger started from a user function (`Ledger.record_function`). An imported run
is never listed: replay runs the code a RunStarted names only for runs listed here, and needs
``--entry`` for any other (it never runs code named only by a record it did not make)."""
SETTINGS_DDL = (
    "CREATE TABLE IF NOT EXISTS agentledger_settings "
    "(name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
)
"""The ledger's own settings (the salt of the redaction policy's ``hash`` action): written once,
never part of an event, a blob or an export."""
_PREVIEW = 120
_HEX32 = re.compile(r"[0-9a-f]{32}")


class LedgerRecorder(Protocol):
    """What the ledger needs of a backend: eventsourcing's application recorder, plus more."""

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """eventsourcing: insert events (our recorders take blobs= and runs= too)."""
        ...

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """eventsourcing: one aggregate's events."""
        ...

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """eventsourcing: the notification log, in order."""
        ...

    def max_notification_id(self) -> int | None:
        """eventsourcing: the last notification id."""
        ...

    def get_blobs(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """Return the stored blobs among `refs`."""
        ...

    def get_run(self, run_id: str) -> RunInfo | None:
        """Return a run's index row."""
        ...

    def list_runs(self, where: RunQuery) -> list[RunInfo]:
        """Return index rows, newest first."""
        ...

    def count_runs(self, where: RunQuery) -> int:
        """How many index rows match (``where.limit`` ignored)."""
        ...

    def all_run_ids(self) -> list[str]:
        """Every run id that has events (read from the events, not the index)."""
        ...

    def recorded_entry(self, run_id: str) -> bool:
        """Whether this ledger started the run from a user function it recorded itself."""
        ...

    def setting(self, name: str, value: str) -> str:
        """The ledger's setting ``name``, stored as ``value`` first when it has none."""
        ...


def _preview(started: dict[str, Any]) -> str:
    value = started.get("input")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "\u2026"


def _row_to_info(row: Any, tags: Iterable[str]) -> RunInfo:
    return RunInfo(
        run_id=row["run_id"],
        agent=row["agent"],
        status=row["status"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        event_count=row["last_position"],
        head_hash=row["head_hash"],
        input_preview=row["input_preview"],
        tags=tuple(sorted(tags)),
        parent_run_id=row["parent_run_id"],
    )


def _where_sql(where: RunQuery, mark: str) -> tuple[str, list[Any]]:
    """The WHERE clause (or "") selecting the index rows `where` asks for, and its params."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("status", where.status), ("agent", where.agent)):
        if value is not None:
            clauses.append(f"r.{column} = {mark}")
            params.append(value)
    if where.since is not None:
        clauses.append(f"r.started_at >= {mark}")
        params.append(where.since)
    if where.until is not None:
        clauses.append(f"r.started_at < {mark}")
        params.append(where.until)
    if where.tag is not None:
        clauses.append(
            f"EXISTS (SELECT 1 FROM agentledger_run_tags t WHERE t.run_id = r.run_id "
            f"AND t.tag = {mark})"
        )
        params.append(where.tag)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


TAGS_BY_ID_UNDER = 1000
"""A listing of fewer runs than this reads only their tags (by id); a longer one reads them all."""


def _filter_sql(where: RunQuery, mark: str) -> tuple[str, list[Any]]:
    """`_where_sql` plus the listing's order (newest first) and limit."""
    sql, params = _where_sql(where, mark)
    sql += " ORDER BY r.started_at DESC, r.run_id"
    if where.limit is not None:
        sql += f" LIMIT {int(where.limit)}"
    return sql, params


_RUN_COLUMNS = (
    "run_id, agent, status, started_at, ended_at, last_position, head_hash, input_preview, "
    "parent_run_id, updated_at"
)


def _run_insert_params(update: RunIndexUpdate) -> tuple[Any, ...]:
    started = update.started or {}
    ended = update.updated_at if update.status != "running" else None
    return (
        update.run_id,
        started.get("agent", ""),
        update.status,
        update.updated_at,
        ended,
        update.last_position,
        update.head_hash,
        _preview(started),
        started.get("parent_run_id"),
        update.updated_at,
    )


def _run_update_params(update: RunIndexUpdate) -> tuple[Any, ...]:
    ended = update.updated_at if update.status != "running" else None
    return (
        update.last_position,
        update.head_hash,
        update.status,
        ended,
        update.updated_at,
        update.run_id,
    )


class LedgerSQLiteConnection(SQLiteConnection):
    """eventsourcing's pooled SQLite connection, with its sqlite3 connection reachable."""

    def __init__(self, sqlite_conn: sqlite3.Connection, max_age: float | None) -> None:
        super().__init__(sqlite_conn=sqlite_conn, max_age=max_age)
        self.raw = sqlite_conn


class SQLiteRecorder(SQLiteApplicationRecorder):
    """eventsourcing's SQLite application recorder plus blobs and the runs index."""

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = EVENTS_TABLE):
        super().__init__(datastore, events_table_name)

    def construct_create_table_statements(self) -> list[str]:
        """Events, blobs, runs index, tags, and the append-only triggers."""
        statements = super().construct_create_table_statements()
        statements += [
            (
                "CREATE TABLE IF NOT EXISTS agentledger_blobs (ref TEXT PRIMARY KEY, "
                "size INTEGER NOT NULL, encoding TEXT NOT NULL, data BLOB NOT NULL) WITHOUT ROWID"
            ),
            (
                "CREATE TABLE IF NOT EXISTS agentledger_runs (run_id TEXT PRIMARY KEY, "
                "agent TEXT NOT NULL, status TEXT NOT NULL, started_at TEXT NOT NULL, "
                "ended_at TEXT, last_position INTEGER NOT NULL, head_hash TEXT NOT NULL, "
                "input_preview TEXT NOT NULL, parent_run_id TEXT, updated_at TEXT NOT NULL)"
            ),
            "CREATE INDEX IF NOT EXISTS agentledger_runs_started ON agentledger_runs (started_at)",
            (
                "CREATE TABLE IF NOT EXISTS agentledger_run_tags (tag TEXT NOT NULL, "
                "run_id TEXT NOT NULL, PRIMARY KEY (tag, run_id)) WITHOUT ROWID"
            ),
            ENTRY_RUNS_DDL,
        ]
        statements += LOG_TABLES_SQLITE
        for table in (self.events_table_name, "agentledger_blobs"):
            for action in ("UPDATE", "DELETE"):
                statements.append(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_no_{action.lower()} BEFORE {action} "
                    f"ON {table} BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
                )
        return statements

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Write events, blobs and the runs index in one transaction on the writer connection.

        eventsourcing's own path wraps each write in a new cursor and three context managers;
        this issues BEGIN, the statements and COMMIT directly on the pooled writer connection
        (the pool still serialises writers) and maps sqlite3's errors to eventsourcing's as it
        does. It saves about 30 us a transaction (bench/bench_ledger.py, one commit per event).
        """
        with self.datastore.get_connection(commit=True) as connection:
            if not isinstance(connection, LedgerSQLiteConnection):
                return super().insert_events(stored_events, **kwargs)
            conn = connection.raw
            try:
                conn.execute("BEGIN")
                try:
                    self._insert_events(conn, stored_events, **kwargs)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.IntegrityError as e:
                raise IntegrityError(e) from e
            except sqlite3.OperationalError as e:
                raise OperationalError(e) from e
            except sqlite3.Error as e:
                raise PersistenceError(e) from e
        return None

    def _insert_events(
        self,
        c: SQLiteCursor | sqlite3.Connection,
        stored_events: Sequence[StoredEvent],
        *,
        blobs: Sequence[BlobRow] = (),
        runs: Sequence[RunIndexUpdate] = (),
        **_: Any,
    ) -> Sequence[int] | None:
        if blobs:
            c.executemany(
                "INSERT OR IGNORE INTO agentledger_blobs (ref, size, encoding, data) "
                "VALUES (?, ?, ?, ?)",
                [(b.ref, b.size, b.encoding, b.data) for b in blobs],
            )
        c.executemany(
            self.insert_events_statement,
            [
                (s.originator_id.hex, s.originator_version, s.topic, s.state)  # type: ignore[union-attr]
                for s in stored_events
            ],
        )
        # One statement per kind of row, whatever the number of runs (a group commit holds
        # many): each call releases and retakes the GIL, which costs most under contention.
        started = [u for u in runs if u.started is not None]
        if started:
            c.executemany(
                f"INSERT INTO agentledger_runs ({_RUN_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [_run_insert_params(u) for u in started],
            )
            tags = [(tag, u.run_id) for u in started for tag in u.tags]
            if tags:
                c.executemany(
                    "INSERT OR IGNORE INTO agentledger_run_tags (tag, run_id) VALUES (?, ?)", tags
                )
            entries = [(u.run_id,) for u in started if u.entry]
            if entries:
                c.executemany("INSERT INTO agentledger_entry_runs (run_id) VALUES (?)", entries)
        updates = [_run_update_params(u) for u in runs if u.started is None]
        if updates:
            c.executemany(
                "UPDATE agentledger_runs SET last_position = ?, head_hash = ?, status = ?, "
                "ended_at = COALESCE(ended_at, ?), updated_at = ? WHERE run_id = ?",
                updates,
            )
        return None

    def get_blobs(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """Return the stored blobs among `refs`."""
        found: dict[str, BlobRow] = {}
        with self.datastore.transaction(commit=False) as c:
            for start in range(0, len(refs), 500):
                chunk = list(refs[start : start + 500])
                c.execute(
                    "SELECT ref, size, encoding, data FROM agentledger_blobs WHERE ref IN "
                    f"({','.join('?' * len(chunk))})",
                    chunk,
                )
                for row in c.fetchall():
                    found[row["ref"]] = BlobRow(
                        row["ref"], row["size"], row["encoding"], bytes(row["data"])
                    )
        return found

    def setting(self, name: str, value: str) -> str:
        """The ledger's setting ``name``, stored as ``value`` first when it has none.

        Read first, so a ledger opened read-only can read a setting it already has.
        """
        with self.datastore.transaction(commit=False) as c:
            c.execute("SELECT name FROM sqlite_master WHERE name = 'agentledger_settings'")
            if c.fetchone() is not None:
                c.execute("SELECT value FROM agentledger_settings WHERE name = ?", [name])
                row = c.fetchone()
                if row is not None:
                    return str(row["value"])
        with self.datastore.transaction(commit=True) as c:
            c.execute(SETTINGS_DDL)  # created on first need: most ledgers never hash
            c.execute(
                "INSERT OR IGNORE INTO agentledger_settings (name, value) VALUES (?, ?)",
                [name, value],
            )
            c.execute("SELECT value FROM agentledger_settings WHERE name = ?", [name])
            return str(c.fetchone()["value"])

    def get_run(self, run_id: str) -> RunInfo | None:
        """Return a run's index row."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT {_RUN_COLUMNS} FROM agentledger_runs WHERE run_id = ?", [run_id])
            row = c.fetchone()
            if row is None:
                return None
            c.execute("SELECT tag FROM agentledger_run_tags WHERE run_id = ?", [run_id])
            return _row_to_info(row, [t["tag"] for t in c.fetchall()])

    def list_runs(self, where: RunQuery) -> list[RunInfo]:
        """Return index rows, newest first."""
        sql, params = _filter_sql(where, "?")
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT {_RUN_COLUMNS} FROM agentledger_runs r{sql}", params)
            rows = c.fetchall()
            ids = [row["run_id"] for row in rows]
            if len(ids) < TAGS_BY_ID_UNDER:
                marks = ", ".join("?" * len(ids))
                c.execute(
                    f"SELECT tag, run_id FROM agentledger_run_tags WHERE run_id IN ({marks})", ids
                )
            else:
                c.execute("SELECT tag, run_id FROM agentledger_run_tags")
            tags: dict[str, list[str]] = {}
            for t in c.fetchall():
                tags.setdefault(t["run_id"], []).append(t["tag"])
        return [_row_to_info(row, tags.get(row["run_id"], [])) for row in rows]

    def count_runs(self, where: RunQuery) -> int:
        """How many index rows match (``where.limit`` ignored)."""
        sql, params = _where_sql(where, "?")
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT count(*) FROM agentledger_runs r{sql}", params)
            return int(c.fetchone()[0])

    def recorded_entry(self, run_id: str) -> bool:
        """Whether this ledger started the run from a user function it recorded itself.

        A database from before the table existed (opened read-only, so it was not added) has
        no such run.
        """
        with self.datastore.transaction(commit=False) as c:
            try:
                c.execute("SELECT 1 FROM agentledger_entry_runs WHERE run_id = ?", [run_id])
            except (OperationalError, sqlite3.OperationalError):
                return False
            return c.fetchone() is not None

    def all_run_ids(self) -> list[str]:
        """Every run id that has events, as the ledger spells them (32 lowercase hex digits).

        A row spelled otherwise was not written by the ledger; verification against a
        checkpoint reports it (the transparency log reads every row).
        """
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT DISTINCT originator_id FROM {self.events_table_name}")
            found = [row[0] for row in c.fetchall()]
        return sorted(
            str(UUID(key)) for key in found if isinstance(key, str) and _HEX32.fullmatch(key)
        )


class MemoryRecorder(POPOApplicationRecorder):
    """eventsourcing's in-memory recorder plus blobs and the runs index (for tests)."""

    def __init__(self) -> None:
        super().__init__()
        self._blobs: dict[str, BlobRow] = {}
        self._runs: dict[str, dict[str, Any]] = {}
        self._tags: dict[str, set[str]] = {}
        self._entries: set[str] = set()
        self._settings: dict[str, str] = {}

    def setting(self, name: str, value: str) -> str:
        """The ledger's setting ``name``, stored as ``value`` first when it has none."""
        return self._settings.setdefault(name, value)

    def _update_table(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        blobs: Sequence[BlobRow] = (),
        runs: Sequence[RunIndexUpdate] = (),
        **kwargs: Any,
    ) -> Sequence[int] | None:
        ids = super()._update_table(stored_events, **kwargs)
        for blob in blobs:
            self._blobs.setdefault(blob.ref, blob)
        for update in runs:
            names = _RUN_COLUMNS.replace(" ", "").split(",")
            if update.started is not None:
                self._runs[update.run_id] = dict(
                    zip(names, _run_insert_params(update), strict=True)
                )
                self._tags[update.run_id] = set(update.tags)
                if update.entry:
                    self._entries.add(update.run_id)
            else:
                row = self._runs[update.run_id]
                values = _run_update_params(update)
                row.update(
                    last_position=values[0],
                    head_hash=values[1],
                    status=values[2],
                    ended_at=row["ended_at"] or values[3],
                    updated_at=values[4],
                )
        return ids

    def get_blobs(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """Return the stored blobs among `refs`."""
        with self._database_lock:
            return {ref: self._blobs[ref] for ref in refs if ref in self._blobs}

    def get_run(self, run_id: str) -> RunInfo | None:
        """Return a run's index row."""
        with self._database_lock:
            row = self._runs.get(run_id)
            return None if row is None else _row_to_info(row, self._tags[run_id])

    def list_runs(self, where: RunQuery) -> list[RunInfo]:
        """Return index rows, newest first."""
        with self._database_lock:
            rows = [
                row
                for row in self._runs.values()
                if (where.status is None or row["status"] == where.status)
                and (where.agent is None or row["agent"] == where.agent)
                and (where.since is None or row["started_at"] >= where.since)
                and (where.until is None or row["started_at"] < where.until)
                and (where.tag is None or where.tag in self._tags[row["run_id"]])
            ]
            rows.sort(key=lambda r: r["run_id"])
            rows.sort(key=lambda r: r["started_at"], reverse=True)
            if where.limit is not None:
                rows = rows[: where.limit]
            return [_row_to_info(row, self._tags[row["run_id"]]) for row in rows]

    def count_runs(self, where: RunQuery) -> int:
        """How many index rows match (``where.limit`` ignored)."""
        return len(self.list_runs(replace(where, limit=None)))

    def recorded_entry(self, run_id: str) -> bool:
        """Whether this ledger started the run from a user function it recorded itself."""
        with self._database_lock:
            return run_id in self._entries

    def all_run_ids(self) -> list[str]:
        """Every run id that has events."""
        with self._database_lock:
            # eventsourcing's index is a defaultdict: a lookup of an unknown run adds it empty.
            return sorted(key for key, rows in self._stored_events_index.items() if rows)
