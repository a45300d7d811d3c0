"""`ReadModelProjector`: SQL read models kept up to date from the ledger's notification log.

Owns following the log with tracking. `catch_up` reads the notifications after the tracked id
through `Ledger.notifications` (eventsourcing's ``select_notifications``, which works on every
backend; eventsourcing's ``ProjectionRunner`` does not run on SQLite) and applies them in
batches; each batch is ONE transaction holding its rows and the new tracked id, so a crash
loses or repeats nothing: the rows of a batch are there exactly when the tracked id says so.
The first statement of each batch locks the tracking row, so two projectors on one database
take turns instead of applying a batch twice. `rebuild` clears the tables and replays the log
from the start, giving the same rows. Queries (`runs`, `stats`) catch up first by default.
Must not write events; the tables and their meaning live in `_rm_schema` and `_rm_apply`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateIndex, CreateTable

from agentledger.ledger import Ledger, StorageError
from agentledger.projections._rm_apply import apply_batch
from agentledger.projections._rm_query import (
    GROUPINGS,
    RunFilter,
    RunRow,
    StatsRow,
    check_grouping,
    compute_stats,
    select_runs,
)
from agentledger.projections._rm_schema import (
    DATA_TABLES,
    METADATA,
    SCHEMA_VERSION,
    SEARCH,
    TRACKING,
)
from agentledger.projections._rm_search import (
    SearchHit,
    apply_search,
    create_search_table,
    search_runs,
)
from agentledger.projections._sql import derived_engine_for
from agentledger.projections.errors import ReadModelOptionError

__all__ = ["DEFAULT_BATCH", "ProjectionStatus", "ReadModelProjector"]

DEFAULT_BATCH = 500
"""Notifications per transaction when catching up."""

Progress = Callable[[int, int], None]
"""Called after each committed batch with (tracked id, the id catch-up runs to)."""


@dataclass(frozen=True)
class ProjectionStatus:
    """Where a projection stands: tracked id, the ledger's last id, lag and rows per table."""

    name: str
    position: int
    max_notification_id: int
    lag: int
    rows: dict[str, int] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "name": self.name,
            "position": self.position,
            "max_notification_id": self.max_notification_id,
            "lag": self.lag,
            "rows": dict(self.rows),
            "schema_version": self.schema_version,
        }


class ReadModelProjector:
    """Keeps the ``al_rm_*`` tables in the ledger's database up to date with its events.

    ``ReadModelProjector(ledger).runs(model="gpt-4o-mini")`` catches up, then queries. The
    tables are created on first use; tables of another schema version are dropped and rebuilt.
    Use it as a context manager (or call `close`) to release its database connections.
    """

    NAME = "agentledger.readmodel"
    """The projection's name in ``al_rm_tracking``."""

    def __init__(self, ledger: Ledger, *, engine: Engine | None = None) -> None:
        self.ledger = ledger
        self.engine = engine or derived_engine_for(ledger)
        self._ready = False

    def close(self) -> None:
        """Close the engine's pooled connections (kept for a memory ledger: they hold the data).

        The engine is shared by everything on this ledger and reconnects when used again.
        """
        if self.ledger.backend != "memory":
            self.engine.dispose()

    def __enter__(self) -> ReadModelProjector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Following the log -----------------------------------------------------------------------

    def catch_up(
        self,
        batch_size: int = DEFAULT_BATCH,
        progress: Progress | None = None,
        *,
        before_commit: Callable[[int], None] | None = None,
        upto: int | None = None,
    ) -> int:
        """Apply every notification committed so far; returns how many were applied.

        `before_commit` (tests, tracing) is called with each batch's new tracked id after its
        rows are written and before its transaction commits. `upto` stops at that notification
        id instead of the ledger's last (to rebuild what another copy holds, for a comparison).
        """
        if batch_size < 1:
            raise ReadModelOptionError("batch_size", f"must be at least 1, got {batch_size}")
        self.setup()
        stop = self.ledger.max_notification_id()
        if upto is not None:
            stop = min(stop, upto)
        applied = 0
        while True:
            with self._transaction() as conn:
                position = self._lock(conn)
                if position >= stop:
                    return applied
                batch = self.ledger.notifications(position, batch_size, stop=stop)
                records = [record for _, record in batch]
                apply_batch(conn, records)
                apply_search(conn, records, self.ledger.blobs)
                position = batch[-1][0] if len(batch) == batch_size else stop
                if before_commit is not None:
                    before_commit(position)
                self._track(conn, position)
            applied += len(batch)
            if progress is not None:
                progress(position, stop)

    def position(self) -> int:
        """The last notification id whose rows are written (0: none)."""
        self.setup()
        with self._connect() as conn:
            return self._read_position(conn)

    def lag(self) -> int:
        """Notification ids committed to the ledger but not yet applied (0: up to date)."""
        return max(0, self.ledger.max_notification_id() - self.position())

    def status(self) -> ProjectionStatus:
        """Tracked id, the ledger's last id, lag, and the row count of every table."""
        self.setup()
        last = self.ledger.max_notification_id()
        with self._connect() as conn:
            position = self._read_position(conn)
            rows = {
                table.name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
                for table in DATA_TABLES
            }
        return ProjectionStatus(self.NAME, position, last, max(0, last - position), rows)

    def rebuild(self, batch_size: int = DEFAULT_BATCH, progress: Progress | None = None) -> int:
        """Clear every table and replay the whole log; returns notifications applied."""
        if batch_size < 1:
            raise ReadModelOptionError("batch_size", f"must be at least 1, got {batch_size}")
        self.setup()
        with self._transaction() as conn:
            self._lock(conn)
            for table in reversed(DATA_TABLES):
                conn.execute(table.delete())
            self._track(conn, 0)
        return self.catch_up(batch_size, progress)

    def table_rows(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of every table, ordered by key (to compare or export the read model)."""
        self.setup()
        with self._connect() as conn:
            return {
                table.name: [
                    dict(row._mapping)
                    for row in conn.execute(select(table).order_by(*table.primary_key.columns))
                ]
                for table in DATA_TABLES
            }

    # Queries ---------------------------------------------------------------------------------

    def runs(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        prompt: tuple[str, str | None] | None = None,
        tag: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        fresh: bool = True,
    ) -> list[RunRow]:
        """Runs newest first, filtered in SQL (after catching up, unless `fresh` is False).

        `model` matches a model id (``gpt-4o-mini``) or ``provider:model`` that the run was
        configured with or called; `prompt` is ``(name, version)`` (version None: any), where
        the name is a prompt name (``pipeline.planner``) or the role using it (``planner``).
        """
        where = RunFilter(status, agent, model, prompt, tag, since, limit)
        where.check()
        if fresh:
            self.catch_up()
        else:
            self.setup()
        with self._connect() as conn:
            return select_runs(conn, where)

    def search(
        self,
        query: str,
        *,
        status: str | None = None,
        agent: str | None = None,
        tag: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        fresh: bool = True,
    ) -> list[SearchHit]:
        """Runs with an input, answer or model message holding every word of `query`.

        Newest first, each with a snippet (matches in ``[...]``); only the query's words count
        (see `_rm_search`). Raises `ReadModelOptionError` for a query without words.
        """
        where = RunFilter(status=status, agent=agent, tag=tag, since=since, limit=limit)
        where.check()
        if fresh:
            self.catch_up()
        else:
            self.setup()
        with self._connect() as conn:
            hits = search_runs(conn, query)
        kept = [
            hit
            for hit in hits
            if (status is None or hit.run.status == status)
            and (agent is None or hit.run.agent == agent)
            and (tag is None or tag in hit.run.tags)
            and (since is None or hit.run.started_at >= since)
        ]
        return kept if limit is None else kept[:limit]

    def stats(
        self,
        group_by: Sequence[str] = GROUPINGS,
        *,
        since: str | None = None,
        fresh: bool = True,
    ) -> list[StatsRow]:
        """Tokens, cost, latency and tool error rate per model and/or prompt version."""
        check_grouping(group_by)
        if fresh:
            self.catch_up()
        else:
            self.setup()
        with self._connect() as conn:
            return compute_stats(conn, group_by, since)

    # Internals -------------------------------------------------------------------------------

    def setup(self) -> None:
        """Create the tables and the tracking row if missing (rebuilding on a schema change)."""
        if self._ready:
            return
        for attempt in range(_SETUP_ATTEMPTS):
            try:
                with self._transaction() as conn:
                    _create_missing(conn)
                break
            except StorageError:
                # Another process created the same tables at the same moment (PostgreSQL can
                # refuse the loser's CREATE ... IF NOT EXISTS); they exist now, so look again.
                if attempt == _SETUP_ATTEMPTS - 1:
                    raise
        with self._transaction() as conn:
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            row = {"name": self.NAME, "position": 0, "schema_version": SCHEMA_VERSION}
            conn.execute(dialect.insert(TRACKING).on_conflict_do_nothing(), [row])
            version = conn.execute(
                select(TRACKING.c.schema_version).where(TRACKING.c.name == self.NAME)
            ).scalar_one()
            if version != SCHEMA_VERSION:
                for table in reversed(DATA_TABLES):
                    table.drop(conn, checkfirst=True)
                _create_missing(conn)
                conn.execute(
                    TRACKING.update()
                    .where(TRACKING.c.name == self.NAME)
                    .values(position=0, schema_version=SCHEMA_VERSION)
                )
        self._ready = True

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except DBAPIError as e:
            raise StorageError(self.ledger.url, f"read model: {e.orig or e}") from e

    @contextmanager
    def _connect(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                yield conn
        except DBAPIError as e:
            raise StorageError(self.ledger.url, f"read model: {e.orig or e}") from e

    def _lock(self, conn: Connection) -> int:
        """Take the tracking row for this transaction (other projectors wait); its position."""
        conn.execute(
            TRACKING.update()
            .where(TRACKING.c.name == self.NAME)
            .values(position=TRACKING.c.position)
        )
        return self._read_position(conn)

    def _read_position(self, conn: Connection) -> int:
        found = conn.execute(
            select(TRACKING.c.position).where(TRACKING.c.name == self.NAME)
        ).scalar_one()
        return int(found)

    def _track(self, conn: Connection, position: int) -> None:
        conn.execute(
            TRACKING.update().where(TRACKING.c.name == self.NAME).values(position=position)
        )


_SETUP_ATTEMPTS = 3


def _create_missing(conn: Connection) -> None:
    """CREATE TABLE / INDEX IF NOT EXISTS for every read-model table, in dependency order."""
    for table in METADATA.sorted_tables:
        if table is SEARCH:
            create_search_table(conn)
            continue
        conn.execute(CreateTable(table, if_not_exists=True))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            conn.execute(CreateIndex(index, if_not_exists=True))
