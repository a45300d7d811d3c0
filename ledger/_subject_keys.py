"""The subject key table on each backend: keys by subject, and which runs used each key.

``agentledger_subject_keys`` holds each data subject's key (subject as given, key id, secret,
created at), apart from the events; ``agentledger_subject_runs`` lists which runs sealed content
under which key. SQLite creates both on first need; PostgreSQL with its schema (`SCHEMA_VERSION`
6); a memory ledger keeps them on its recorder. Erasure deletes a subject's rows (SQLite with
``secure_delete``) and `scrub` makes deleted rows unrecoverable from the files. Must not know
events or agents.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from agentledger.ledger._subjects import SubjectKey, new_subject_key

if TYPE_CHECKING:
    from agentledger.ledger._store import Store

__all__ = ["KeyTable", "MemoryKeyTable", "PostgresKeyTable", "SQLiteKeyTable", "key_table"]


class KeyTable(Protocol):
    """The subject keys of one ledger's database."""

    def key_for(self, subject: str, created_at: str, *, create: bool) -> SubjectKey | None:
        """The subject's key (made and stored first when ``create`` and it has none)."""
        ...

    def keys(self, key_ids: Iterable[str]) -> dict[str, SubjectKey]:
        """The keys among ``key_ids`` that exist."""
        ...

    def subject_of(self, key_id: str) -> str | None:
        """The subject a key belongs to, or None when the key does not exist."""
        ...

    def link(self, key_id: str, run_id: str) -> None:
        """Note that ``run_id`` sealed content under ``key_id``."""
        ...

    def runs_of(self, key_id: str) -> list[str]:
        """The runs that sealed content under ``key_id``."""
        ...

    def destroy(self, subject: str) -> str | None:
        """Delete the subject's key and its run links; its key id, or None if it had none."""
        ...

    def scrub(self, *, vacuum: bool, tables: Sequence[str] = ()) -> None:
        """Make deleted rows unrecoverable from the files (checkpoint; ``vacuum``: rewrite).

        ``tables`` names other tables of the same database whose rows were deleted (derived
        data); SQLite's VACUUM rewrites the whole file anyway.
        """
        ...


_SQLITE_DDL = (
    (
        "CREATE TABLE IF NOT EXISTS agentledger_subject_keys (subject TEXT PRIMARY KEY, "
        "key_id TEXT NOT NULL UNIQUE, secret BLOB NOT NULL, created_at TEXT NOT NULL)"
    ),
    (
        "CREATE TABLE IF NOT EXISTS agentledger_subject_runs (key_id TEXT NOT NULL, "
        "run_id TEXT NOT NULL, PRIMARY KEY (key_id, run_id)) WITHOUT ROWID"
    ),
)


class SQLiteKeyTable:
    """The key tables in a SQLite file, created on first need (most ledgers never use them)."""

    def __init__(self, store: Store) -> None:
        self._store: Any = store

    def _exists(self, c: Any) -> bool:
        c.execute("SELECT 1 FROM sqlite_master WHERE name = 'agentledger_subject_keys'")
        return c.fetchone() is not None

    def key_for(self, subject: str, created_at: str, *, create: bool) -> SubjectKey | None:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=False) as c:
            if self._exists(c):
                c.execute(
                    "SELECT key_id, secret FROM agentledger_subject_keys WHERE subject = ?",
                    [subject],
                )
                row = c.fetchone()
                if row is not None:
                    return SubjectKey(row["key_id"], bytes(row["secret"]))
        if not create:
            return None
        fresh = new_subject_key()
        with datastore.transaction(commit=True) as c:
            for statement in _SQLITE_DDL:
                c.execute(statement)
            c.execute(
                "INSERT OR IGNORE INTO agentledger_subject_keys (subject, key_id, secret, "
                "created_at) VALUES (?, ?, ?, ?)",
                [subject, fresh.key_id, fresh.secret, created_at],
            )
            c.execute(
                "SELECT key_id, secret FROM agentledger_subject_keys WHERE subject = ?", [subject]
            )
            row = c.fetchone()
            return SubjectKey(row["key_id"], bytes(row["secret"]))

    def keys(self, key_ids: Iterable[str]) -> dict[str, SubjectKey]:
        wanted = sorted(set(key_ids))
        if not wanted:
            return {}
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=False) as c:
            if not self._exists(c):
                return {}
            c.execute(
                "SELECT key_id, secret FROM agentledger_subject_keys WHERE key_id IN "
                f"({','.join('?' * len(wanted))})",
                wanted,
            )
            return {r["key_id"]: SubjectKey(r["key_id"], bytes(r["secret"])) for r in c.fetchall()}

    def subject_of(self, key_id: str) -> str | None:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=False) as c:
            if not self._exists(c):
                return None
            c.execute("SELECT subject FROM agentledger_subject_keys WHERE key_id = ?", [key_id])
            row = c.fetchone()
            return None if row is None else str(row["subject"])

    def link(self, key_id: str, run_id: str) -> None:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=True) as c:
            c.execute(
                "INSERT OR IGNORE INTO agentledger_subject_runs (key_id, run_id) VALUES (?, ?)",
                [key_id, run_id],
            )

    def runs_of(self, key_id: str) -> list[str]:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=False) as c:
            if not self._exists(c):
                return []
            c.execute(
                "SELECT run_id FROM agentledger_subject_runs WHERE key_id = ? ORDER BY run_id",
                [key_id],
            )
            return [str(r["run_id"]) for r in c.fetchall()]

    def destroy(self, subject: str) -> str | None:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=True) as c:
            if not self._exists(c):
                return None
            # secure_delete: SQLite overwrites the deleted row's bytes with zeros in the page
            # (and so in the WAL frame that carries it), instead of leaving them in free space.
            c.execute("PRAGMA secure_delete = ON")
            c.execute("SELECT key_id FROM agentledger_subject_keys WHERE subject = ?", [subject])
            row = c.fetchone()
            if row is None:
                return None
            key_id = str(row["key_id"])
            c.execute("DELETE FROM agentledger_subject_keys WHERE subject = ?", [subject])
            c.execute("DELETE FROM agentledger_subject_runs WHERE key_id = ?", [key_id])
            return key_id

    def scrub(self, *, vacuum: bool, tables: Sequence[str] = ()) -> None:
        del tables  # VACUUM rewrites every table of the file
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.get_connection(commit=True) as connection:
            raw: sqlite3.Connection = connection.raw
            raw.execute("PRAGMA secure_delete = ON")
            if vacuum:
                raw.execute("VACUUM")
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


class PostgresKeyTable:
    """The key tables in a PostgreSQL schema (created with the schema, `SCHEMA_VERSION` 6)."""

    def __init__(self, store: Store) -> None:
        from psycopg.sql import SQL, Identifier

        self._datastore: Any = cast("Any", store.datastore)
        schema = Identifier(str(self._datastore.schema))
        self._keys = SQL("{}.agentledger_subject_keys").format(schema)
        self._runs = SQL("{}.agentledger_subject_runs").format(schema)

    def _rows(self, query: Any, params: Sequence[Any] = (), *, commit: bool = False) -> list[Any]:
        with self._datastore.transaction(commit=commit) as curs:
            curs.execute(query, params)
            return list(curs.fetchall()) if curs.description else []

    def key_for(self, subject: str, created_at: str, *, create: bool) -> SubjectKey | None:
        from psycopg.sql import SQL

        select = SQL("SELECT key_id, secret FROM {} WHERE subject = %s").format(self._keys)
        rows = self._rows(select, (subject,))
        if not rows and create:
            fresh = new_subject_key()
            with self._datastore.transaction(commit=True) as curs:
                curs.execute(
                    SQL(
                        "INSERT INTO {} (subject, key_id, secret, created_at) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT (subject) DO NOTHING"
                    ).format(self._keys),
                    (subject, fresh.key_id, fresh.secret, created_at),
                )
                curs.execute(select, (subject,))
                rows = list(curs.fetchall())
        if not rows:
            return None
        return SubjectKey(rows[0]["key_id"], bytes(rows[0]["secret"]))

    def keys(self, key_ids: Iterable[str]) -> dict[str, SubjectKey]:
        from psycopg.sql import SQL

        wanted = sorted(set(key_ids))
        if not wanted:
            return {}
        query = SQL("SELECT key_id, secret FROM {} WHERE key_id = ANY(%s)").format(self._keys)
        return {
            r["key_id"]: SubjectKey(r["key_id"], bytes(r["secret"]))
            for r in self._rows(query, (wanted,))
        }

    def subject_of(self, key_id: str) -> str | None:
        from psycopg.sql import SQL

        query = SQL("SELECT subject FROM {} WHERE key_id = %s").format(self._keys)
        rows = self._rows(query, (key_id,))
        return str(rows[0]["subject"]) if rows else None

    def link(self, key_id: str, run_id: str) -> None:
        from psycopg.sql import SQL

        query = SQL(
            "INSERT INTO {} (key_id, run_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
        ).format(self._runs)
        self._rows(query, (key_id, run_id), commit=True)

    def runs_of(self, key_id: str) -> list[str]:
        from psycopg.sql import SQL

        query = SQL("SELECT run_id FROM {} WHERE key_id = %s ORDER BY run_id").format(self._runs)
        return [str(r["run_id"]) for r in self._rows(query, (key_id,))]

    def destroy(self, subject: str) -> str | None:
        from psycopg.sql import SQL

        with self._datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL("DELETE FROM {} WHERE subject = %s RETURNING key_id").format(self._keys),
                (subject,),
            )
            row = curs.fetchone()
            if row is None:
                return None
            key_id = str(row["key_id"])
            curs.execute(SQL("DELETE FROM {} WHERE key_id = %s").format(self._runs), (key_id,))
            return key_id

    def scrub(self, *, vacuum: bool, tables: Sequence[str] = ()) -> None:
        # VACUUM cannot run in a transaction: an autocommit connection of the pool's settings.
        import psycopg
        from psycopg.sql import SQL, Identifier

        params = {k: v for k, v in self._datastore.pool.kwargs.items() if k != "row_factory"}
        with psycopg.connect(**params, autocommit=True) as conn:
            # FULL rewrites each table into a new file and drops the old one: deleted row
            # versions do not linger in its pages until later writes reuse them.
            full = SQL("VACUUM (FULL) {}") if vacuum else SQL("VACUUM {}")
            schema = Identifier(str(self._datastore.schema))
            derived = [SQL("{}.{}").format(schema, Identifier(t)) for t in tables]
            for table in (self._keys, self._runs, *derived):
                conn.execute(full.format(table))


class MemoryKeyTable:
    """The key tables of a memory ledger (kept on its recorder, gone with the process)."""

    def __init__(self, recorder: Any) -> None:
        self._lock = threading.Lock()
        tables = recorder.__dict__.setdefault("_subject_tables", ({}, {}))
        self._keys: dict[str, SubjectKey] = tables[0]
        self._runs: dict[str, set[str]] = tables[1]

    def key_for(self, subject: str, created_at: str, *, create: bool) -> SubjectKey | None:
        del created_at
        with self._lock:
            if subject not in self._keys and create:
                self._keys[subject] = new_subject_key()
            return self._keys.get(subject)

    def keys(self, key_ids: Iterable[str]) -> dict[str, SubjectKey]:
        wanted = set(key_ids)
        with self._lock:
            return {k.key_id: k for k in self._keys.values() if k.key_id in wanted}

    def subject_of(self, key_id: str) -> str | None:
        with self._lock:
            return next((s for s, k in self._keys.items() if k.key_id == key_id), None)

    def link(self, key_id: str, run_id: str) -> None:
        with self._lock:
            self._runs.setdefault(key_id, set()).add(run_id)

    def runs_of(self, key_id: str) -> list[str]:
        with self._lock:
            return sorted(self._runs.get(key_id, ()))

    def destroy(self, subject: str) -> str | None:
        with self._lock:
            key = self._keys.pop(subject, None)
            if key is None:
                return None
            self._runs.pop(key.key_id, None)
            return key.key_id

    def scrub(self, *, vacuum: bool, tables: Sequence[str] = ()) -> None:
        del vacuum, tables


def key_table(store: Store) -> KeyTable:
    """The key table of ``store``'s backend."""
    if store.kind == "sqlite":
        return SQLiteKeyTable(store)
    if store.kind == "postgresql":
        return PostgresKeyTable(store)
    return MemoryKeyTable(store.recorder)
