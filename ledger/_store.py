"""Opening a ledger URL: the persistence choice, and the eventsourcing event store on top.

``sqlite:///path.db`` (embedded default), ``postgresql://user@host:port/db[?schema=name]``
(scale) and ``memory://`` (tests). Translates database errors into `StorageError` and refuses
unknown schemes with `UnknownSchemeError`. A URL is untrusted text: the PostgreSQL schema must be a
plain identifier (checked before connecting, then quoted), and an option the ledger does not use
is refused rather than ignored. Knows which files a SQLite ledger lives in, so nothing can be
written over them. Owns the SQLite durability mode (`DURABILITY`) and `Store.make_durable`,
which forces every commit to disk before a checkpoint is signed over it. Must not know events
beyond the envelope.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlsplit
from uuid import UUID

from eventsourcing.persistence import EventStore, PersistenceError
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteDatastore

from agentledger.ledger._backends import (
    LedgerRecorder,
    LedgerSQLiteConnection,
    MemoryRecorder,
    SQLiteRecorder,
)
from agentledger.ledger._mapper import EnvelopeMapper
from agentledger.ledger.errors import (
    ReadOnlyDatabaseError,
    StorageError,
    UnknownSchemeError,
    UsageError,
)

if TYPE_CHECKING:
    from eventsourcing.postgres import PostgresDatastore

__all__ = [
    "DEFAULT_DURABILITY",
    "DEFAULT_URL",
    "DURABILITY",
    "SCHEMA_NAME",
    "Store",
    "check_durability",
    "open_store",
    "postgres_schema",
    "redact_url",
]

DEFAULT_URL = "sqlite:///agentledger.db"
SQLITE_LOCK_TIMEOUT_S = 30
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""A PostgreSQL schema the ledger accepts: a lowercase identifier of at most 63 characters.
(Lowercase only: eventsourcing looks its composite type up by the unquoted name, which
PostgreSQL folds to lowercase, so a schema with capitals could be created but not used.)"""
DURABILITY = {"normal": "NORMAL", "full": "FULL"}
"""SQLite's ``synchronous`` setting for each durability mode (the file is always in WAL mode).

``normal``: a commit is written to the write-ahead log without waiting for the disk. It survives
the process being killed at any point; an operating-system crash or power loss may lose the last
commits, never corrupt the file or break a chain (what is left verifies). ``full``: every commit
waits for the disk (an ``fsync`` each), so it survives power loss too."""
DEFAULT_DURABILITY = "normal"
_POSTGRES_OPTIONS = frozenset({"schema"})
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass
class Store:
    """An opened backend: its URL, recorder and eventsourcing event store."""

    url: str
    kind: str
    recorder: LedgerRecorder
    events: EventStore[UUID]
    datastore: SQLiteDatastore | PostgresDatastore | None
    raw_url: str = ""
    path: Path | None = None
    """The SQLite database file, made absolute when opened (None for PostgreSQL and memory)."""
    read_only: bool = False
    """Opened read-only (a SQLite file with ``mode=ro``): nothing may be written to it."""
    durability: str = DEFAULT_DURABILITY
    """How a SQLite commit waits for the disk (see `DURABILITY`)."""

    def own_file(self, target: str | os.PathLike[str]) -> Path | None:
        """The file of this ledger's database that `target` would write over, if any.

        The database file and its ``-wal``, ``-shm`` and ``-journal`` siblings, compared by
        resolved path (symlinks and relative spellings followed) and, for files that exist, by
        identity (hard links).
        """
        if self.path is None:
            return None
        database = Path(os.path.realpath(self.path))
        own = [database, *(Path(f"{database}{suffix}") for suffix in _SQLITE_SIDE_FILES)]
        resolved = Path(os.path.realpath(target))
        for candidate in own:
            if resolved == candidate:
                return candidate
            try:
                if Path(target).samefile(candidate):
                    return candidate
            except OSError:
                continue  # one of the two does not exist (or cannot be read): not the same file
        return None

    def sqlalchemy_url(self) -> tuple[str, str | None]:
        """A SQLAlchemy URL for the same database, and the PostgreSQL schema (if any).

        For ``memory://`` this is a shared in-memory SQLite database, so read models of a
        memory ledger still run on SQLAlchemy.
        """
        if self.kind == "memory":
            return "sqlite://", None
        if self.kind == "sqlite":
            path = unquote(self.raw_url.split("://", 1)[1])[1:]
            if self.read_only:  # as the ledger opened it: mode=ro (immutable where it must be)
                return f"sqlite:///{read_only_uri(Path(path))}&uri=true", None
            return "sqlite:///" + path, None
        parts = urlsplit(self.raw_url)
        schema = postgres_schema(self.raw_url) or None
        return parts._replace(scheme="postgresql+psycopg", query="").geturl(), schema

    def salt(self) -> bytes:
        """The ledger's salt for hashed redactions: generated once, kept in its database."""
        return bytes.fromhex(self.recorder.setting("redaction_salt", os.urandom(32).hex()))

    def make_durable(self) -> None:
        """Force every commit so far to disk, whatever the durability mode (before signing).

        On a SQLite file in ``normal`` mode the write-ahead log is checkpointed into the
        database file, which SQLite then syncs; when a reader or a writer keeps the checkpoint
        from completing (it does not wait for them), the log file itself is synced: its commits
        then survive power loss, and recovery replays them. A ``full`` file, PostgreSQL
        (commits are durable when the server acknowledges them) and memory have nothing to do.
        """
        if self.kind != "sqlite" or self.read_only or self.durability == "full":
            return
        assert isinstance(self.datastore, SQLiteDatastore)
        assert self.path is not None
        with self.datastore.get_connection(commit=True) as connection:
            assert isinstance(connection, LedgerSQLiteConnection)
            busy, frames, done = connection.raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy or frames != done:
            _fsync(Path(f"{self.path}-wal"))

    def close(self) -> None:
        """Release connections."""
        if self.datastore is not None:
            self.datastore.close()


class _CachingPool(SQLiteConnectionPool):
    """eventsourcing's SQLite pool with a real prepared-statement cache.

    eventsourcing connects with ``cached_statements=True``, a cache of ONE statement, so every
    transaction re-prepares BEGIN and each INSERT; a cache of 128 keeps them prepared
    (measured in bench/bench_ledger.py).
    """

    read_only = False
    """Set on a read-only pool: connect without the WAL switch, which would write the file."""
    synchronous = DURABILITY[DEFAULT_DURABILITY]
    """SQLite's ``synchronous`` setting for every connection (see `DURABILITY`)."""

    def _create_connection(self) -> SQLiteConnection:
        if not self.read_only:
            self._switch_to_wal()
        fresh = sqlite3.connect(
            database=self.db_name,
            uri=True,
            check_same_thread=False,
            isolation_level=None,
            cached_statements=128,
            timeout=self.lock_timeout or SQLITE_LOCK_TIMEOUT_S,
        )
        fresh.row_factory = sqlite3.Row
        if not self.read_only:
            fresh.execute(f"PRAGMA synchronous={self.synchronous}")
        return LedgerSQLiteConnection(sqlite_conn=fresh, max_age=self.max_age)

    def _switch_to_wal(self) -> None:
        """Switch the file to WAL mode (eventsourcing's connect does), waiting out other openers.

        Changing the journal mode takes an exclusive lock for a moment, and SQLite answers
        "database is locked" at once, without its busy wait, when another process holds a lock
        just then (two processes opening a new ledger together): retried for up to the lock
        timeout, as any other write waits.
        """
        deadline = time.monotonic() + (self.lock_timeout or SQLITE_LOCK_TIMEOUT_S)
        pause = 0.001
        while True:
            try:
                super()._create_connection()._close()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() >= deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
            else:
                return


class _Datastore(SQLiteDatastore):
    """eventsourcing's SQLite datastore using `_CachingPool`."""

    def __init__(
        self,
        db_name: str,
        *,
        lock_timeout: int,
        read_only: bool = False,
        durability: str = DEFAULT_DURABILITY,
    ) -> None:
        super().__init__(db_name, lock_timeout=lock_timeout)
        self.pool.close()
        pool = _CachingPool(db_name=db_name, lock_timeout=lock_timeout)
        pool.read_only = read_only
        pool.synchronous = DURABILITY[durability]
        self.pool = pool


def _fsync(path: Path) -> None:
    """Flush ``path``'s written data to disk (a file that does not exist has none)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_durability(durability: str) -> str:
    """``durability`` if it is a mode of `DURABILITY`; `UsageError` naming the choices if not."""
    if durability not in DURABILITY:
        choices = " or ".join(repr(mode) for mode in DURABILITY)
        raise UsageError(f"durability must be {choices}, not {durability!r}")
    return durability


_SHOWN_OPTIONS = frozenset({"schema"})
"""URL options whose values messages show; any other's value may be a secret (``?password=``)."""


def redact_url(url: str) -> str:
    """The URL without its password or any option value but the schema, for messages and logs.

    A URL too malformed to take apart is shown as its scheme alone.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        scheme = url.split("://", 1)[0] if "://" in url else ""
        return f"{scheme}://***" if scheme else "***"
    netloc = parts.netloc
    if password:
        netloc = netloc.replace(f":{password}@", ":***@")
    query = parts.query
    if query:
        query = "&".join(
            f"{name}={value}" if name in _SHOWN_OPTIONS else f"{name}=***"
            for name, value in parse_qsl(query, keep_blank_values=True)
        )
    return parts._replace(netloc=netloc, query=query).geturl()


def open_store(
    url: str,
    *,
    create: bool = True,
    read_only: bool = False,
    durability: str = DEFAULT_DURABILITY,
) -> Store:
    """Open (creating tables if needed) the store at `url`.

    With ``create=False`` a missing SQLite file is refused (`StorageError` naming its path)
    before anything connects, so a mistyped URL never leaves an empty database behind. With
    ``read_only=True`` (implies ``create=False``) a SQLite file is opened ``mode=ro``: nothing
    is written, not even the tables, so a read-only copy can still be read. ``durability``
    (see `DURABILITY`) sets how a SQLite file's commits wait for the disk.
    """
    check_durability(durability)
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    mapper = EnvelopeMapper()
    if scheme == "memory":
        recorder = MemoryRecorder()
        return Store(url, "memory", recorder, EventStore(mapper, recorder), None, url)
    if scheme == "sqlite":
        return _open_sqlite(
            url,
            mapper,
            create=create and not read_only,
            read_only=read_only,
            durability=durability,
        )
    if scheme in {"postgresql", "postgres", "postgresql+psycopg"}:
        return _open_postgres(url, mapper)
    raise UnknownSchemeError(url)


def _open_sqlite(
    url: str, mapper: EnvelopeMapper, *, create: bool, read_only: bool, durability: str
) -> Store:
    raw = unquote(url.split("://", 1)[1])
    if not raw.startswith("/") or raw == "/":
        raise StorageError(url, "expected sqlite:///relative/path.db or sqlite:////abs/path.db")
    path = Path(raw[1:])
    directory = path.parent if str(path.parent) else Path()
    if not directory.is_dir():
        raise StorageError(url, f"directory {str(directory)!r} does not exist")
    if not create and not path.is_file():
        raise StorageError(url, f"database file {str(path)!r} does not exist")
    if read_only:
        return _open_sqlite_read_only(url, mapper, path)
    if path.exists() and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222):
        # the mode bits too: root may write anything, but a file marked read-only is an
        # auditor's copy or a sealed ledger, not one to append to
        raise ReadOnlyDatabaseError(url, f"database file {str(path)!r} is read-only")
    if not path.exists() and not os.access(directory, os.W_OK):
        raise StorageError(url, f"directory {str(directory)!r} is not writable")
    datastore = _Datastore(str(path), lock_timeout=SQLITE_LOCK_TIMEOUT_S, durability=durability)
    recorder = SQLiteRecorder(datastore)
    try:
        recorder.create_table()
    except (PersistenceError, sqlite3.Error) as e:
        datastore.close()
        raise StorageError(url, f"cannot create tables: {e}") from e
    return Store(
        url,
        "sqlite",
        recorder,
        EventStore(mapper, recorder),
        datastore,
        url,
        path.absolute(),
        durability=durability,
    )


def read_only_uri(path: Path) -> str:
    """The SQLite URI that opens ``path`` read-only (see `_open_sqlite_read_only`)."""
    uri = f"file:{quote(str(path.absolute()))}?mode=ro"
    if not os.access(path.absolute().parent, os.W_OK) and not Path(f"{path}-wal").exists():
        uri += "&immutable=1"
    return uri


def _open_sqlite_read_only(url: str, mapper: EnvelopeMapper, path: Path) -> Store:
    """Open `path` with ``mode=ro``; in a directory nobody can write, also ``immutable=1``.

    A WAL database needs its ``-shm`` file even to read; where the directory is read-only and
    there is no ``-wal`` file, no writer can change the file either, so SQLite may read it as
    immutable (an auditor's copy on read-only media).
    """
    datastore = _Datastore(read_only_uri(path), lock_timeout=SQLITE_LOCK_TIMEOUT_S, read_only=True)
    try:
        with datastore.transaction(commit=False) as cursor:
            cursor.execute("SELECT count(*) FROM sqlite_master")
    except (PersistenceError, sqlite3.Error) as e:
        datastore.close()
        raise StorageError(url, f"cannot read the database: {e}") from e
    recorder = SQLiteRecorder(datastore)
    return Store(
        url,
        "sqlite",
        recorder,
        EventStore(mapper, recorder),
        datastore,
        url,
        path.absolute(),
        read_only=True,
    )


def postgres_schema(url: str) -> str:
    """The ``?schema=`` of a PostgreSQL URL ("" for none), refusing anything but an identifier.

    Raises `StorageError` for a schema that is not `SCHEMA_NAME`, a repeated schema and any
    option the ledger would otherwise silently ignore (``sslmode`` and the like).
    """
    redacted = redact_url(url)
    options = parse_qs(urlsplit(url).query, keep_blank_values=True)
    unknown = sorted(set(options) - _POSTGRES_OPTIONS)
    if unknown:
        raise StorageError(
            redacted,
            f"unsupported URL option(s) {', '.join(unknown)}: the ledger takes only ?schema=NAME",
        )
    values = options.get("schema", [])
    if len(values) > 1:
        raise StorageError(redacted, "the URL gives ?schema= more than once")
    schema = values[0] if values else ""
    if schema and not SCHEMA_NAME.fullmatch(schema):
        raise StorageError(
            redacted,
            f"schema {schema!r} is not a plain identifier: use lowercase letters, digits and _ "
            "(not starting with a digit, at most 63)",
        )
    return schema


POSTGRES_CONNECT_TIMEOUT_S = 3


def _probe_postgres(url: str, params: dict[str, Any]) -> None:
    """Connect once, directly, so that a failure names its cause within a few seconds.

    The connection pool only says "pool initialization incomplete" after its timeout; psycopg
    itself says "database ... does not exist", "password authentication failed" or "connection
    refused". The server's message is quoted without the password (it never holds one).
    """
    import psycopg

    try:
        psycopg.connect(**params, connect_timeout=POSTGRES_CONNECT_TIMEOUT_S).close()
    except psycopg.Error as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if params.get("password"):
            reason = reason.replace(str(params["password"]), "***")
        raise StorageError(redact_url(url), f"cannot connect to PostgreSQL: {reason}") from None


def _schema_exists(datastore: Any, schema: str) -> bool:
    """Whether the PostgreSQL schema is there (then opening it takes no lock at all)."""
    with datastore.get_connection() as conn, conn.cursor() as curs:
        found = curs.execute(
            "SELECT 1 AS found FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
    return found is not None


def _open_postgres(url: str, mapper: EnvelopeMapper) -> Store:
    from eventsourcing.postgres import PostgresDatastore
    from psycopg.sql import SQL, Identifier

    from agentledger.ledger._backends_pg import PostgresRecorder

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:  # a port that is not a number, or out of range; a broken IPv6 host
        raise StorageError(redact_url(url), f"the URL is malformed: {e}") from None
    schema = postgres_schema(url)
    params: dict[str, Any] = {
        "dbname": (parts.path or "/").lstrip("/") or "postgres",
        "host": parts.hostname or "127.0.0.1",
        "port": port or 5432,
        "user": unquote(parts.username or "postgres"),
        "password": unquote(parts.password or ""),
    }
    _probe_postgres(url, params)
    try:
        datastore = PostgresDatastore(
            dbname=params["dbname"],
            host=params["host"],
            port=params["port"],
            user=params["user"],
            password=params["password"],
            schema=schema,
            # One connection when the ledger opens, more on demand (up to 10). No waiting
            # for the pool to fill (pool_open_timeout=None): eventsourcing would otherwise wait
            # before every checkout until `pool_size` connections are idle, and close the pool
            # after the timeout. The probe above has already reported an unreachable server.
            pool_size=1,
            max_overflow=9,
            pool_open_timeout=None,
            connect_timeout=5.0,
            lock_timeout=30,
        )
        if schema and not _schema_exists(datastore, schema):
            with datastore.transaction(commit=True) as curs:
                # IF NOT EXISTS is not safe against a concurrent CREATE of the same schema (a
                # unique violation): processes opening a new schema at once take turns here.
                curs.execute(
                    SQL("SELECT pg_advisory_xact_lock(hashtext(%s))"),
                    (f"agentledger:schema:{schema}",),
                )
                curs.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(schema)))
        recorder = PostgresRecorder(datastore)
        recorder.create_table()
    except (PersistenceError, OSError, Exception) as e:
        raise StorageError(redact_url(url), f"cannot open PostgreSQL: {e}") from e
    return Store(
        redact_url(url), "postgresql", recorder, EventStore(mapper, recorder), datastore, url
    )
