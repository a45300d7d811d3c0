"""The ledger's PostgreSQL recorder: eventsourcing's application recorder plus blobs and runs.

Writers insert without eventsourcing's ``LOCK TABLE ... IN EXCLUSIVE MODE`` (and without its
``NOTIFY``): writes to different runs do not wait for each other, and two writers of one run
still collide on the ``(originator_id, originator_version)`` primary key (`ConcurrencyError`).
The ledger-wide order that followers read is assigned after commit (`_order_pg`).

Split from `_backends` so that a SQLite or memory ledger never imports psycopg or
eventsourcing's PostgreSQL module. Must not know agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from eventsourcing.persistence import Notification, StoredEvent
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
)
from eventsourcing.utils import retry
from psycopg import InterfaceError, OperationalError
from psycopg.errors import DuplicateObject
from psycopg.sql import SQL, Identifier

from agentledger.ledger._backends import (
    _RUN_COLUMNS,
    _TOTAL_COLUMNS,
    _TOTALS_DDL,
    _TOTALS_KINDS,
    _TOTALS_SET,
    EVENTS_TABLE,
    RUN_TAGS_BY_RUN_DDL,
    RUNS_BY_PARENT_DDL,
    SCHEMA_VERSION,
    TAGS_BY_ID_UNDER,
    ScannedEvent,
    _blob_row,
    _filter_sql,
    _row_to_info,
    _run_insert_params,
    _run_insert_totals,
    _run_update_params,
    _totals_params,
    _where_sql,
    totals_by_run,
)
from agentledger.ledger._order_pg import (
    ORDER_TABLE,
    assign_order,
    migrate_to_commit_order,
    order_statements,
)
from agentledger.ledger._records import BlobRow, RunIndexUpdate, RunInfo, RunQuery
from agentledger.ledger._tlog_tables_pg import postgres_log_statements
from agentledger.ledger.errors import UsageError

__all__ = ["PostgresRecorder"]

_SELECTED = f"{_RUN_COLUMNS}, {_TOTAL_COLUMNS}"


class PostgresRecorder(PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL application recorder plus blobs and the runs index."""

    def __init__(self, datastore: PostgresDatastore, events_table_name: str = EVENTS_TABLE):
        super().__init__(datastore, events_table_name=events_table_name)
        schema = Identifier(datastore.schema)
        self._blobs = SQL("{}.agentledger_blobs").format(schema)
        self._runs = SQL("{}.agentledger_runs").format(schema)
        self._tags = SQL("{}.agentledger_run_tags").format(schema)
        self._entries = SQL("{}.agentledger_entry_runs").format(schema)
        self._schema = SQL("{}.agentledger_schema").format(schema)
        self._settings = SQL("{}.agentledger_settings").format(schema)
        events = SQL("{}.{}").format(schema, Identifier(events_table_name))
        self._events = events
        self._order = SQL("{}.{}").format(schema, Identifier(ORDER_TABLE))
        self.sql_create_statements += [
            SQL(
                "CREATE TABLE IF NOT EXISTS {} (ref TEXT PRIMARY KEY, size INTEGER NOT NULL, "
                "encoding TEXT NOT NULL, data BYTEA NOT NULL)"
            ).format(self._blobs),
            # a conversation node's parent (see `_chain`); NULL in rows from before version 8
            SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS parent BYTEA").format(self._blobs),
            SQL(
                "CREATE TABLE IF NOT EXISTS {} (run_id TEXT PRIMARY KEY, agent TEXT NOT NULL, "
                "status TEXT NOT NULL, started_at TEXT NOT NULL, ended_at TEXT, "
                "last_position INTEGER NOT NULL, head_hash TEXT NOT NULL, "
                "input_preview TEXT NOT NULL, parent_run_id TEXT, updated_at TEXT NOT NULL)"
            ).format(self._runs),
            *(
                SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS " + f"{name} {kind}").format(
                    self._runs
                )
                for name, kind in _TOTALS_DDL
            ),
            SQL(
                "CREATE INDEX IF NOT EXISTS agentledger_runs_started ON {} "
                "(started_at DESC, run_id)"
            ).format(self._runs),
            SQL(
                "CREATE TABLE IF NOT EXISTS {} (tag TEXT NOT NULL, run_id TEXT NOT NULL, "
                "PRIMARY KEY (tag, run_id))"
            ).format(self._tags),
            SQL(RUN_TAGS_BY_RUN_DDL).format(tags=self._tags),
            SQL(RUNS_BY_PARENT_DDL).format(runs=self._runs),
            SQL("CREATE TABLE IF NOT EXISTS {} (run_id TEXT PRIMARY KEY)").format(self._entries),
            SQL(
                "CREATE TABLE IF NOT EXISTS {} (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
            ).format(self._settings),
            SQL(
                "CREATE TABLE IF NOT EXISTS {} (subject TEXT PRIMARY KEY, "
                "key_id TEXT NOT NULL UNIQUE, secret BYTEA NOT NULL, created_at TEXT NOT NULL)"
            ).format(SQL("{}.agentledger_subject_keys").format(schema)),
            SQL(
                "CREATE TABLE IF NOT EXISTS {} (key_id TEXT NOT NULL, run_id TEXT NOT NULL, "
                "PRIMARY KEY (key_id, run_id))"
            ).format(SQL("{}.agentledger_subject_runs").format(schema)),
            SQL(
                "CREATE OR REPLACE FUNCTION {}.agentledger_append_only() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; "
                "END $$"
            ).format(schema),
        ]
        self.sql_create_statements += postgres_log_statements(schema)
        for table, name in ((events, "events"), (self._blobs, "blobs")):
            self.sql_create_statements += [
                SQL(
                    "CREATE OR REPLACE TRIGGER {} BEFORE UPDATE OR DELETE ON {} "
                    "FOR EACH ROW EXECUTE FUNCTION {}.agentledger_append_only()"
                ).format(Identifier(f"agentledger_{name}_append_only"), table, schema),
                SQL(
                    "CREATE OR REPLACE TRIGGER {} BEFORE TRUNCATE ON {} "
                    "FOR EACH STATEMENT EXECUTE FUNCTION {}.agentledger_append_only()"
                ).format(Identifier(f"agentledger_{name}_no_truncate"), table, schema),
            ]
        self.sql_create_statements += order_statements(schema, events)

    def create_table(self) -> None:
        """Create tables, functions and triggers only when the schema is not at this version.

        Re-running the DDL on every open (``CREATE OR REPLACE FUNCTION/TRIGGER``) made
        concurrent opens deadlock. Now an open reads `SCHEMA_VERSION` from
        ``agentledger_schema`` and, when it is current, only registers eventsourcing's type
        adapters. Otherwise it takes a transaction-level advisory lock for the schema, checks
        again, and runs the DDL (composite types in savepoints: they have no IF NOT EXISTS).
        """
        if self._schema_version() != SCHEMA_VERSION:
            with self.datastore.transaction(commit=True) as curs:
                curs.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))",
                    (f"agentledger:{self.datastore.schema}",),
                )
                if self._schema_version(curs) != SCHEMA_VERSION:
                    self._create_everything(curs)
        self.datastore.register_type_adapters()

    def _create_everything(self, curs: Any) -> None:
        older = self._index_without_totals(curs)
        for statement in self.sql_create_statements:
            if "CREATE TYPE" in statement.as_string():
                try:
                    with curs.connection.transaction():  # a savepoint
                        curs.execute(statement, prepare=False)
                except DuplicateObject:
                    pass
        self._create_table(curs)
        curs.execute(
            SQL("CREATE TABLE IF NOT EXISTS {} (version INTEGER NOT NULL)").format(self._schema)
        )
        if older:
            self._backfill_totals(curs)
        migrate_to_commit_order(curs, Identifier(self.datastore.schema), self._events)
        curs.execute(SQL("DELETE FROM {}").format(self._schema))
        curs.execute(
            SQL("INSERT INTO {} (version) VALUES (%s)").format(self._schema), (SCHEMA_VERSION,)
        )

    def _index_without_totals(self, curs: Any) -> bool:
        """Whether a runs index exists from before the usage totals (schema version 3)."""
        row = curs.execute(
            "SELECT count(*) FILTER (WHERE column_name = 'input_tokens') AS kept, count(*) AS n "
            "FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'agentledger_runs'",
            (self.datastore.schema,),
        ).fetchone()
        return bool(row["n"]) and not row["kept"]

    def _backfill_totals(self, curs: Any) -> None:
        """Fill the usage totals the migration added from the stored events."""
        curs.execute(
            SQL(
                "SELECT originator_id, originator_version, topic, state FROM {}.{} "
                "WHERE topic = ANY(%s) ORDER BY originator_id, originator_version"
            ).format(Identifier(self.datastore.schema), Identifier(self.events_table_name)),
            (list(_TOTALS_KINDS),),
        )
        rows = [
            (str(r["originator_id"]), r["originator_version"], r["topic"], r["state"])
            for r in curs.fetchall()
        ]
        curs.executemany(
            SQL("UPDATE {} SET " + _TOTALS_SET.format(m="%s") + " WHERE run_id = %s").format(
                self._runs
            ),
            [(*_totals_params(t), run_id) for run_id, t in totals_by_run(rows).items()],
        )

    def _schema_version(self, curs: Any = None) -> int | None:
        """The version the schema's tables were created at, or None (none yet, or older)."""
        if curs is not None:
            return self._read_version(curs)
        with self.datastore.get_connection() as conn, conn.cursor() as fresh:
            return self._read_version(fresh)

    def _read_version(self, curs: Any) -> int | None:
        name = f'"{self.datastore.schema}".agentledger_schema'
        if curs.execute(SQL("SELECT to_regclass(%s) AS t"), (name,)).fetchone()["t"] is None:
            return None
        row = curs.execute(SQL("SELECT max(version) AS v FROM {}").format(self._schema)).fetchone()
        return None if row is None or row["v"] is None else int(row["v"])

    def _insert_stored_events(
        self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        """Insert the events, without eventsourcing's table lock and NOTIFY (see `_order_pg`)."""
        PostgresAggregateRecorder._insert_stored_events(self, curs, stored_events, **kwargs)

    def assign_order(self) -> int:
        """Number the committed events that can be numbered (see `_order_pg`); how many."""
        return assign_order(self.datastore, Identifier(self.datastore.schema), self._events)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """Events in the ledger-wide order (``seq``), from `start`, at most `limit`.

        Reaching the end of the numbered events numbers what is due first, so a follower
        sees every committed event that can be ordered.
        """
        found = self._select_ordered(
            start, limit, stop, topics, inclusive_of_start=inclusive_of_start
        )
        short = len(found) < limit and (stop is None or not found or found[-1].id < stop)
        if short and self.assign_order():
            found = self._select_ordered(
                start, limit, stop, topics, inclusive_of_start=inclusive_of_start
            )
        return found

    def _select_ordered(
        self,
        start: int | None,
        limit: int,
        stop: int | None,
        topics: Sequence[str],
        *,
        inclusive_of_start: bool,
    ) -> list[Notification]:
        where: list[str] = ["TRUE"]
        params: list[Any] = []
        if start is not None:
            where.append("o.seq >= %s" if inclusive_of_start else "o.seq > %s")
            params.append(start)
        if stop is not None:
            where.append("o.seq <= %s")
            params.append(stop)
        if topics:
            where.append("e.topic = ANY(%s)")
            params.append(list(topics))
        params.append(limit)
        query = SQL(
            "SELECT o.seq, e.originator_id, e.originator_version, e.topic, e.state FROM {} o "
            "JOIN {} e ON e.notification_id = o.notification_id WHERE "
            + " AND ".join(where)
            + " ORDER BY o.seq LIMIT %s"
        ).format(self._order, self._events)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, params, prepare=True)
            return [
                Notification(
                    id=row["seq"],
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs.fetchall()
            ]

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def max_notification_id(self) -> int | None:
        """The last number of the ledger-wide order, after numbering what is due."""
        self.assign_order()
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            row = curs.execute(SQL("SELECT max(seq) AS m FROM {}").format(self._order)).fetchone()
        return None if row is None or row["m"] is None else int(row["m"])

    def subscribe(self, gt: int | None = None, topics: Sequence[str] = ()) -> NoReturn:
        """Refused: inserts send no ``NOTIFY``, so eventsourcing's subscription would never wake."""
        del gt, topics
        msg = (
            "the ledger's PostgreSQL recorder sends no NOTIFY: follow new events with "
            "Ledger.notifications (or a ReadModelProjector) instead of recorder.subscribe"
        )
        raise UsageError(msg)

    def _insert_events(
        self,
        curs: Any,
        stored_events: Sequence[StoredEvent],  # noqa: ARG002 - eventsourcing's hook signature
        *,
        blobs: Sequence[BlobRow] = (),
        runs: Sequence[RunIndexUpdate] = (),
        **_: Any,
    ) -> None:
        if blobs:
            curs.executemany(
                SQL(
                    "INSERT INTO {} (ref, size, encoding, data, parent) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (ref) DO NOTHING"
                ).format(self._blobs),
                [(b.ref, b.size, b.encoding, b.data, b.parent) for b in blobs],
            )
        for update in runs:
            if update.started is not None:
                curs.execute(
                    SQL(
                        "INSERT INTO {} (" + _RUN_COLUMNS + ", " + _TOTAL_COLUMNS + ") VALUES "
                        "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    ).format(self._runs),
                    _run_insert_params(update) + _run_insert_totals(update),
                )
                for tag in update.tags:
                    curs.execute(
                        SQL(
                            "INSERT INTO {} (tag, run_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
                        ).format(self._tags),
                        (tag, update.run_id),
                    )
                if update.entry:
                    curs.execute(
                        SQL("INSERT INTO {} (run_id) VALUES (%s)").format(self._entries),
                        (update.run_id,),
                    )
            else:
                curs.execute(
                    SQL(
                        "UPDATE {} SET last_position = %s, head_hash = %s, status = %s, "
                        "ended_at = COALESCE(ended_at, %s), updated_at = %s, "
                        + _TOTALS_SET.format(m="%s")
                        + " WHERE run_id = %s"
                    ).format(self._runs),
                    _run_update_params(update),
                )

    def get_blobs(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """Return the stored blobs among `refs`."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(
                SQL("SELECT ref, size, encoding, data, parent FROM {} WHERE ref = ANY(%s)").format(
                    self._blobs
                ),
                (list(refs),),
            )
            return {row["ref"]: _blob_row(row) for row in curs.fetchall()}

    def get_chains(self, refs: Sequence[str]) -> dict[str, BlobRow]:
        """The stored blobs among `refs` and their ancestors by the parent column, one query.

        As `SQLiteRecorder.get_chains`: a recursive query along the parent column, which stops
        at a root, a NULL and a parent not stored (UNION keeps each row once). Each step looks
        its parent up by primary key (LATERAL): joined, the planner may scan the whole table
        per step, misled by the few rows it expects of the recursion.
        """
        query = SQL(
            "WITH RECURSIVE chain(ref, size, encoding, data, parent) AS ("
            "SELECT b.* FROM unnest(%s::text[]) AS head(ref) CROSS JOIN LATERAL "
            "(SELECT ref, size, encoding, data, parent FROM {blobs} WHERE ref = head.ref) b "
            "UNION SELECT b.* FROM chain CROSS JOIN LATERAL "
            "(SELECT ref, size, encoding, data, parent FROM {blobs} "
            "WHERE ref = 'sha256:' || encode(chain.parent, 'hex')) b "
            "WHERE length(chain.parent) = 32) "
            "SELECT ref, size, encoding, data, parent FROM chain"
        ).format(blobs=self._blobs)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, (list(refs),), prepare=True)
            return {row["ref"]: _blob_row(row) for row in curs.fetchall()}

    def scan_events(self, after: tuple[Any, int] | None, limit: int) -> list[ScannedEvent]:
        """Every run's events ordered by run id then position: up to `limit` after `after`.

        Keyset paging on the events' primary key (one index range scan a page).
        """
        events = SQL("{}.{}").format(
            Identifier(self.datastore.schema), Identifier(self.events_table_name)
        )
        select = "SELECT originator_id, originator_version, topic, state FROM {} "
        order = "ORDER BY originator_id, originator_version LIMIT %s"
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            if after is None:
                curs.execute(SQL(select + order).format(events), (limit,))
            else:
                keyset = "WHERE (originator_id, originator_version) > (%s, %s) "
                curs.execute(SQL(select + keyset + order).format(events), (*after, limit))
            return [
                (row["originator_id"], row["originator_version"], row["topic"], bytes(row["state"]))
                for row in curs.fetchall()
            ]

    def setting(self, name: str, value: str) -> str:
        """The ledger's setting ``name``, stored as ``value`` first when it has none."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL(
                    "INSERT INTO {} (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING"
                ).format(self._settings),
                (name, value),
            )
            curs.execute(
                SQL("SELECT value FROM {} WHERE name = %s").format(self._settings), (name,)
            )
            row = curs.fetchone()
            assert row is not None  # inserted above unless it was there
            return str(row["value"])

    def get_run(self, run_id: str) -> RunInfo | None:
        """Return a run's index row."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(
                SQL("SELECT " + _SELECTED + " FROM {} WHERE run_id = %s").format(self._runs),
                (run_id,),
            )
            row = curs.fetchone()
            if row is None:
                return None
            curs.execute(SQL("SELECT tag FROM {} WHERE run_id = %s").format(self._tags), (run_id,))
            return _row_to_info(row, [t["tag"] for t in curs.fetchall()])

    def child_run_ids(self, run_id: str) -> list[str]:
        """The runs the index lists as started from ``run_id``, by run id."""
        query = SQL("SELECT run_id FROM {} WHERE parent_run_id = %s ORDER BY run_id").format(
            self._runs
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, (run_id,))
            return [row["run_id"] for row in curs.fetchall()]

    def list_runs(self, where: RunQuery) -> list[RunInfo]:
        """Return index rows, newest first."""
        sql, params = _filter_sql(where, "%s")
        sql = sql.replace("agentledger_run_tags", "{tags}")
        query = SQL("SELECT " + _SELECTED + " FROM {runs} r" + sql).format(
            runs=self._runs, tags=self._tags
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, params)
            rows = curs.fetchall()
            ids = [row["run_id"] for row in rows]
            if len(ids) < TAGS_BY_ID_UNDER:
                curs.execute(
                    SQL("SELECT tag, run_id FROM {} WHERE run_id = ANY(%s)").format(self._tags),
                    (ids,),
                )
            else:
                curs.execute(SQL("SELECT tag, run_id FROM {}").format(self._tags))
            tags: dict[str, list[str]] = {}
            for t in curs.fetchall():
                tags.setdefault(t["run_id"], []).append(t["tag"])
        return [_row_to_info(row, tags.get(row["run_id"], [])) for row in rows]

    def count_runs(self, where: RunQuery) -> int:
        """How many index rows match (``where.limit`` ignored)."""
        sql, params = _where_sql(where, "%s")
        sql = sql.replace("agentledger_run_tags", "{tags}")
        query = SQL("SELECT count(*) AS n FROM {runs} r" + sql).format(
            runs=self._runs, tags=self._tags
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, params)
            row = curs.fetchone()
        return int(row["n"]) if row is not None else 0

    def recorded_entry(self, run_id: str) -> bool:
        """Whether this ledger started the run from a user function it recorded itself."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(
                SQL("SELECT 1 AS found FROM {} WHERE run_id = %s").format(self._entries), (run_id,)
            )
            return curs.fetchone() is not None

    def all_run_ids(self) -> list[str]:
        """Every run id that has events."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(
                SQL("SELECT DISTINCT originator_id FROM {}.{}").format(
                    Identifier(self.datastore.schema), Identifier(self.events_table_name)
                )
            )
            return sorted(str(row["originator_id"]) for row in curs.fetchall())
