"""SQLAlchemy engines on a ledger's own database, for snapshots and read models.

Owns ``engine_for(ledger)``: one cached ``Engine`` per open ledger, on the same database as its
events (``Ledger.sqlalchemy_url``). On PostgreSQL a ledger URL's ``?schema=`` becomes the
connection's ``search_path`` so read-model tables live beside the event tables; on SQLite
connections wait for writers (busy timeout) like the ledger's own; a ``memory://`` ledger gets
one shared in-memory SQLite database for the life of the ledger. A ledger opened read-only (an
auditor's copy) gets its file opened read-only (snapshots are read and checked, never written),
and ``derived_engine_for`` gives its read models an in-memory database of their own, filled
from the events. Must not write events.
"""

from __future__ import annotations

import weakref
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import StaticPool

from agentledger.ledger import Ledger

__all__ = ["derived_engine_for", "engine_for"]

SQLITE_BUSY_TIMEOUT_S = 30.0
"""How long a SQLite connection waits for another writer before failing."""

_ENGINES: weakref.WeakKeyDictionary[Ledger, Engine] = weakref.WeakKeyDictionary()
_MEMORY: weakref.WeakKeyDictionary[Ledger, Engine] = weakref.WeakKeyDictionary()


def engine_for(ledger: Ledger) -> Engine:
    """The SQLAlchemy engine of ``ledger``'s database (created once per ledger)."""
    engine = _ENGINES.get(ledger)
    if engine is None:
        engine = _create(ledger)
        _ENGINES[ledger] = engine
        weakref.finalize(ledger, engine.dispose)
    return engine


def derived_engine_for(ledger: Ledger) -> Engine:
    """Where derived data that must be written (read models) lives.

    That is `engine_for(ledger)`, or for a ledger opened read-only an in-memory SQLite
    database of its own, filled from the events and never written to the file.
    """
    if not ledger.read_only:
        return engine_for(ledger)
    engine = _MEMORY.get(ledger)
    if engine is None:
        engine = _memory_engine()
        _MEMORY[ledger] = engine
        weakref.finalize(ledger, engine.dispose)
    return engine


def _memory_engine() -> Engine:
    return create_engine(
        "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
    )


def _create(ledger: Ledger) -> Engine:
    url, schema = ledger.sqlalchemy_url()
    if url == "sqlite://":
        return _memory_engine()
    if ledger.read_only and url.startswith("sqlite:///"):
        # The file read-only, as the ledger opened it (its URL says so): its snapshots can be
        # read and checked (verify --deep), and nothing can be written.
        return create_engine(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    connect_args: dict[str, Any] = {}
    if schema:
        connect_args["options"] = f"-csearch_path={schema}"
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
