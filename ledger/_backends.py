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

from agentledger.ledger._chain import ref_of_column
from agentledger.ledger._records import (
    BlobRow,
    RecordedEvent,
    RunIndexUpdate,
    RunInfo,
    RunQuery,
    RunTotals,
)
from agentledger.ledger.errors import CorruptEventError

__all__ = [
    "EVENTS_TABLE",
    "LOG_TABLES_SQLITE",
    "LedgerRecorder",
    "LedgerSQLiteConnection",
    "MemoryRecorder",
    "SQLiteRecorder",
    "ScannedEvent",
]

EVENTS_TABLE = "agentledger_events"
SCHEMA_VERSION = 8
"""The PostgreSQL schema's version: bump it whenever the DDL below changes (an open of an older
schema then runs the DDL again, under an advisory lock)."""
RUN_TAGS_BY_RUN_DDL = "CREATE INDEX IF NOT EXISTS agentledger_run_tags_run ON {tags} (run_id)"
"""Listing N runs reads their tags by run id: without this index, a scan of every tag row.
PostgreSQL only: an embedded SQLite file keeps to the fewest pages (a scan of its tags is a few
milliseconds at 60,000 runs)."""
RUNS_BY_PARENT_DDL = (
    "CREATE INDEX IF NOT EXISTS agentledger_runs_parent ON {runs} (parent_run_id) "
    "WHERE parent_run_id IS NOT NULL"
)
"""Verifying one run reads the runs started from it (forks, reruns, resumes) by parent
(PostgreSQL only, as `RUN_TAGS_BY_RUN_DDL`)."""
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
ScannedEvent = tuple[Any, int, str, bytes]
"""A stored event as `LedgerRecorder.scan_events` gives it: run id as stored, position, kind,
state."""
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

    def scan_events(self, after: tuple[Any, int] | None, limit: int) -> Sequence[ScannedEvent]:
        """Every run's events ordered by run id then position: up to `limit` after `after`.

        Each is ``(originator_id, originator_version, topic, state)``, the id as stored; `after`
        is the first two of the last event of the previous page (None for the first page). One
        query a page however many runs it spans (what `Ledger.verify` reads).
        """
        ...

    def get_blobs(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """Return the stored blobs among `refs`."""
        ...

    def get_chains(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """The stored blobs among `refs`, and their ancestors by the parent column (`_chain`).

        One query whatever the chains' length. Only a hint of what a chain holds: a row whose
        column is NULL (written before the column) ends the walk there, and the caller follows
        each node's content, reading on where it names a parent not returned.
        """
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

    def child_run_ids(self, run_id: str) -> list[str]:
        """The runs the index lists as started from ``run_id`` (forks, reruns, resumes)."""
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
    cost = row["cost_usd"]
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
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cost_usd=None if cost is None else float(cost),
        model_latency_ms=row["model_latency_ms"],
        tool_latency_ms=row["tool_latency_ms"],
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

_TOTAL_COLUMNS = "input_tokens, output_tokens, cost_usd, model_latency_ms, tool_latency_ms"
"""The runs index's usage totals (`RunTotals`), kept apart from `_RUN_COLUMNS` because an index
that predates them (opened read-only, so never migrated) has none: it selects `_NO_TOTALS`."""
_NO_TOTALS = ", ".join(f"NULL AS {name}" for name in _TOTAL_COLUMNS.split(", "))
_TOTALS_DDL = (
    ("input_tokens", "BIGINT NOT NULL DEFAULT 0"),
    ("output_tokens", "BIGINT NOT NULL DEFAULT 0"),
    ("cost_usd", "DOUBLE PRECISION"),
    ("model_latency_ms", "DOUBLE PRECISION NOT NULL DEFAULT 0"),
    ("tool_latency_ms", "DOUBLE PRECISION NOT NULL DEFAULT 0"),
)
"""The totals' column definitions, for CREATE TABLE and for the migration of an older index."""
_TOTALS_SET = (
    "input_tokens = input_tokens + {m}, output_tokens = output_tokens + {m}, "
    "cost_usd = CASE WHEN cost_usd IS NULL THEN {m} ELSE cost_usd + COALESCE({m}, 0.0) END, "
    "model_latency_ms = model_latency_ms + {m}, tool_latency_ms = tool_latency_ms + {m}"
)
"""How a save adds its totals to a row (a cost stays NULL until some call reports one)."""
_TOTALS_KINDS = ("ModelCalled", "ToolReturned")


def _totals_params(totals: RunTotals) -> tuple[Any, ...]:
    """`_TOTALS_SET`'s parameters, in order."""
    return (
        totals.input_tokens,
        totals.output_tokens,
        totals.cost_usd,
        totals.cost_usd,
        totals.model_latency_ms,
        totals.tool_latency_ms,
    )


def totals_by_run(rows: Iterable[tuple[str, int, str, bytes]]) -> dict[str, RunTotals]:
    """Each run's totals over stored ``(run id, position, kind, state)`` rows.

    A migration's backfill: an undecodable row counts nothing (verify names it).
    """
    pairs: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for run_id, position, kind, state in rows:
        try:
            payload = RecordedEvent.from_state(run_id, position, kind, bytes(state)).payload
        except CorruptEventError:
            continue
        pairs.setdefault(run_id, []).append((kind, payload))
    return {run_id: RunTotals.of(events) for run_id, events in pairs.items()}


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
        *_totals_params(update.totals),
        update.run_id,
    )


def _run_insert_totals(update: RunIndexUpdate) -> tuple[Any, ...]:
    """A new row's totals, after `_run_insert_params` (for `_TOTAL_COLUMNS`)."""
    t = update.totals
    return (t.input_tokens, t.output_tokens, t.cost_usd, t.model_latency_ms, t.tool_latency_ms)


LOG_TABLES_SQLITE = [
    (
        "CREATE TABLE IF NOT EXISTS agentledger_log_batches (first_leaf INTEGER PRIMARY KEY, "
        "size INTEGER NOT NULL, first_nid INTEGER NOT NULL, last_nid INTEGER NOT NULL, "
        "gaps TEXT NOT NULL)"
    ),
    (
        "CREATE TABLE IF NOT EXISTS agentledger_log_events (first_leaf INTEGER PRIMARY KEY, "
        "events BLOB NOT NULL)"
    ),
    (
        "CREATE TABLE IF NOT EXISTS agentledger_log_tiles (level INTEGER NOT NULL, "
        "idx INTEGER NOT NULL, hashes BLOB NOT NULL, PRIMARY KEY (level, idx)) WITHOUT ROWID"
    ),
    (
        "CREATE TABLE IF NOT EXISTS agentledger_log_checkpoints (size INTEGER NOT NULL, "
        "root BLOB NOT NULL, note TEXT NOT NULL, PRIMARY KEY (size, root)) WITHOUT ROWID"
    ),
]
"""The transparency log's tables in SQLite (see `_tlog_tables` for what each holds), created
with the ledger's: here, so that opening a ledger does not import the log's code."""


_SQLITE_CHAINS = (
    "WITH RECURSIVE chain(ref) AS (SELECT value FROM json_each(?) "
    "UNION SELECT 'sha256:' || lower(hex(b.parent)) FROM chain "
    "JOIN agentledger_blobs b ON b.ref = chain.ref WHERE length(b.parent) = 32) "
    "SELECT b.ref, b.size, b.encoding, b.data, b.parent FROM chain "
    "JOIN agentledger_blobs b ON b.ref = chain.ref"
)
"""Every blob of the chains from the JSON array of refs given (see `SQLiteRecorder.get_chains`)."""


def _blob_row(row: Any) -> BlobRow:
    parent = row["parent"]
    return BlobRow(
        row["ref"],
        row["size"],
        row["encoding"],
        bytes(row["data"]),
        None if parent is None else bytes(parent),
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
        self._totals_kept: bool | None = None
        self._parents_kept: bool | None = None

    def construct_create_table_statements(self) -> list[str]:
        """Events, blobs, runs index, tags, and the append-only triggers."""
        statements = super().construct_create_table_statements()
        statements += [
            (
                "CREATE TABLE IF NOT EXISTS agentledger_blobs (ref TEXT PRIMARY KEY, "
                "size INTEGER NOT NULL, encoding TEXT NOT NULL, data BLOB NOT NULL, "
                "parent BLOB) WITHOUT ROWID"
            ),
            (
                "CREATE TABLE IF NOT EXISTS agentledger_runs (run_id TEXT PRIMARY KEY, "
                "agent TEXT NOT NULL, status TEXT NOT NULL, started_at TEXT NOT NULL, "
                "ended_at TEXT, last_position INTEGER NOT NULL, head_hash TEXT NOT NULL, "
                "input_preview TEXT NOT NULL, parent_run_id TEXT, updated_at TEXT NOT NULL, "
                + ", ".join(f"{name} {kind}" for name, kind in _TOTALS_DDL)
                + ")"
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

    def create_table(self) -> None:
        """Create the tables, and migrate an older file (`migrate_totals`, `migrate_parents`)."""
        super().create_table()
        self.migrate_totals()
        self.migrate_parents()

    def migrate_parents(self) -> None:
        """Give a blobs table from before the parent column (see `_chain`) that column.

        Its rows keep NULL (unknown: readers follow their content). No DDL when the column is
        there; two processes migrating at once both find it missing, and the second's ALTER
        TABLE, refused as a duplicate column, is the first's.
        """
        if self._keeps_parents():
            return
        with self.datastore.transaction(commit=True) as c:
            c.execute("PRAGMA table_info(agentledger_blobs)")
            if "parent" not in {row["name"] for row in c.fetchall()}:
                try:
                    c.execute("ALTER TABLE agentledger_blobs ADD COLUMN parent BLOB")
                except (OperationalError, sqlite3.OperationalError) as e:
                    if "duplicate column" not in str(e):
                        raise
        self._parents_kept = True

    def _keeps_parents(self) -> bool:
        """Whether the blobs table has the parent column (a read-only older file has not)."""
        if self._parents_kept is None:
            names = self._columns("agentledger_blobs")
            self._parents_kept = "parent" in names or not names
        return self._parents_kept

    def _columns(self, table: str) -> set[str]:
        """The column names of one of the ledger's own tables (none when it does not exist)."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"PRAGMA table_info({table})")
            return {row["name"] for row in c.fetchall()}

    def migrate_totals(self) -> None:
        """Give a runs index from before the usage totals their columns, filled from the events.

        In one transaction: ALTER TABLE adds the columns, then each run's totals are summed
        from its stored ModelCalled and ToolReturned events.
        """
        if self._keeps_totals():
            return
        with self.datastore.transaction(commit=True) as c:
            c.execute("PRAGMA table_info(agentledger_runs)")
            present = {row["name"] for row in c.fetchall()}
            for name, kind in _TOTALS_DDL:
                if name not in present:
                    c.execute(f"ALTER TABLE agentledger_runs ADD COLUMN {name} {kind}")
            marks = ", ".join("?" * len(_TOTALS_KINDS))
            c.execute(
                "SELECT originator_id, originator_version, topic, state FROM "
                f"{self.events_table_name} WHERE topic IN ({marks}) "
                "ORDER BY originator_id, originator_version",
                list(_TOTALS_KINDS),
            )
            rows = [
                (str(UUID(r[0])), r[1], r[2], r[3])
                for r in c.fetchall()
                if isinstance(r[0], str) and _HEX32.fullmatch(r[0])
            ]
            c.executemany(
                f"UPDATE agentledger_runs SET {_TOTALS_SET.format(m='?')} WHERE run_id = ?",
                [(*_totals_params(t), run_id) for run_id, t in totals_by_run(rows).items()],
            )
        self._totals_kept = True

    def _keeps_totals(self) -> bool:
        """Whether the runs index has the usage totals' columns (a read-only older file has not)."""
        if self._totals_kept is None:
            names = self._columns("agentledger_runs")
            self._totals_kept = "input_tokens" in names or not names
        return self._totals_kept

    def _run_columns(self) -> str:
        return f"{_RUN_COLUMNS}, {_TOTAL_COLUMNS if self._keeps_totals() else _NO_TOTALS}"

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
                "INSERT OR IGNORE INTO agentledger_blobs (ref, size, encoding, data, parent) "
                "VALUES (?, ?, ?, ?, ?)",
                [(b.ref, b.size, b.encoding, b.data, b.parent) for b in blobs],
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
                f"INSERT INTO agentledger_runs ({_RUN_COLUMNS}, {_TOTAL_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [_run_insert_params(u) + _run_insert_totals(u) for u in started],
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
                f"ended_at = COALESCE(ended_at, ?), updated_at = ?, {_TOTALS_SET.format(m='?')} "
                "WHERE run_id = ?",
                updates,
            )
        return None

    def get_blobs(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """Return the stored blobs among `refs`."""
        found: dict[str, BlobRow] = {}
        parent = "parent" if self._keeps_parents() else "NULL AS parent"
        with self.datastore.transaction(commit=False) as c:
            for start in range(0, len(refs), 500):
                chunk = list(refs[start : start + 500])
                c.execute(
                    f"SELECT ref, size, encoding, data, {parent} FROM agentledger_blobs "
                    f"WHERE ref IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
                for row in c.fetchall():
                    found[row["ref"]] = _blob_row(row)
        return found

    def get_chains(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """The stored blobs among `refs` and their ancestors by the parent column, one query.

        A recursive query from `refs` along each row's parent column (see `_chain`): it stops
        at a root, at a NULL (a row from before the column) and at a parent that is not
        stored; UNION keeps each ref once, so a column that loops ends too. A file from before
        the column, opened read-only, gives only the blobs at `refs`.
        """
        if not self._keeps_parents():
            return self.get_blobs(refs)
        with self.datastore.transaction(commit=False) as c:
            c.execute(_SQLITE_CHAINS, [json.dumps(list(refs))])
            return {row["ref"]: _blob_row(row) for row in c.fetchall()}

    def scan_events(self, after: tuple[Any, int] | None, limit: int) -> list[ScannedEvent]:
        """Every run's events ordered by run id then position: up to `limit` after `after`.

        Keyset paging on the events' primary key; the run id is as stored (32 hex digits).
        """
        where, params = "", [limit]
        if after is not None:
            where, params = "WHERE (originator_id, originator_version) > (?, ?) ", [*after, limit]
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT originator_id, originator_version, topic, state FROM "
                f"{self.events_table_name} {where}"
                "ORDER BY originator_id, originator_version LIMIT ?",
                params,
            )
            return [(row[0], row[1], row[2], bytes(row[3])) for row in c.fetchall()]

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
            c.execute(
                f"SELECT {self._run_columns()} FROM agentledger_runs WHERE run_id = ?", [run_id]
            )
            row = c.fetchone()
            if row is None:
                return None
            c.execute("SELECT tag FROM agentledger_run_tags WHERE run_id = ?", [run_id])
            return _row_to_info(row, [t["tag"] for t in c.fetchall()])

    def child_run_ids(self, run_id: str) -> list[str]:
        """The runs the index lists as started from ``run_id``, by run id."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT run_id FROM agentledger_runs WHERE parent_run_id = ? ORDER BY run_id",
                [run_id],
            )
            return [row["run_id"] for row in c.fetchall()]

    def list_runs(self, where: RunQuery) -> list[RunInfo]:
        """Return index rows, newest first."""
        sql, params = _filter_sql(where, "?")
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT {self._run_columns()} FROM agentledger_runs r{sql}", params)
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
            names = f"{_RUN_COLUMNS},{_TOTAL_COLUMNS}".replace(" ", "").split(",")
            if update.started is not None:
                self._runs[update.run_id] = dict(
                    zip(names, _run_insert_params(update) + _run_insert_totals(update), strict=True)
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
                before = RunTotals(
                    row["input_tokens"],
                    row["output_tokens"],
                    row["cost_usd"],
                    row["model_latency_ms"],
                    row["tool_latency_ms"],
                )
                after = before.plus(update.totals)
                row.update(
                    input_tokens=after.input_tokens,
                    output_tokens=after.output_tokens,
                    cost_usd=after.cost_usd,
                    model_latency_ms=after.model_latency_ms,
                    tool_latency_ms=after.tool_latency_ms,
                )
        return ids

    def scan_events(self, after: tuple[Any, int] | None, limit: int) -> list[ScannedEvent]:
        """Every run's events ordered by run id then position: up to `limit` after `after`."""
        start = None if after is None else (str(after[0]), after[1])
        found: list[ScannedEvent] = []
        with self._database_lock:
            for key in sorted(k for k, rows in self._stored_events_index.items() if rows):
                if start is not None and key < start[0]:
                    continue
                index = self._stored_events_index[key]
                for position in sorted(index):
                    if start is not None and (key, position) <= start:
                        continue
                    event = self._stored_events[index[position]]
                    found.append((event.originator_id, position, event.topic, event.state))
                    if len(found) == limit:
                        return found
        return found

    def get_blobs(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """Return the stored blobs among `refs`."""
        with self._database_lock:
            return {ref: self._blobs[ref] for ref in refs if ref in self._blobs}

    def get_chains(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """The stored blobs among `refs` and their ancestors by the parent column."""
        found: dict[str, BlobRow] = {}
        with self._database_lock:
            wanted = list(refs)
            while wanted:
                ref = wanted.pop()
                row = self._blobs.get(ref)
                if row is None or ref in found:
                    continue
                found[ref] = row
                parent = ref_of_column(row.parent)
                if parent:
                    wanted.append(parent)
        return found

    def get_run(self, run_id: str) -> RunInfo | None:
        """Return a run's index row."""
        with self._database_lock:
            row = self._runs.get(run_id)
            return None if row is None else _row_to_info(row, self._tags[run_id])

    def child_run_ids(self, run_id: str) -> list[str]:
        """The runs the index lists as started from ``run_id``, by run id."""
        with self._database_lock:
            return sorted(r for r, row in self._runs.items() if row["parent_run_id"] == run_id)

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
