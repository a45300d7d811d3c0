"""World-state snapshots: a checksummed cache in the ledger's own database, never the truth.

Owns the ``agentledger_snapshots`` table (run_id, position, deltas, state, checksum, event_hash,
created; created on first use through SQLAlchemy on `engine_for(ledger)`, and given its
``event_hash`` column when an older table lacks it), the `SnapshotStore` over it,
`take_snapshots`, and `fold_run`, the fold that starts from the newest valid snapshot and folds
only the tail of events after it.

How snapshots work:

- A snapshot holds the world state after `position` and the number of DeltaApplied events up
  to it (`deltas`). Snapshots are due after every ``every``-th delta of a run (the 1000th,
  2000th, ...), so their positions depend only on the run, never on who asked for what.
- The state is stored as RFC 8785 canonical JSON with ``checksum = sha256(state)``: a state over
  `PACK_OVER` bytes is packed with the ledger's blob codec (Zstandard with its preset dictionary)
  into ``state_packed`` (``state`` is then empty), a smaller one stays readable text in
  ``state``. Tables made before packing gain the column on first use. A row whose
  checksum fails, or that cannot be read, is skipped with a ``snapshot.ignored`` warning naming
  the run and position; the fold then uses an older valid snapshot, or the events from the start.
- Each snapshot carries ``event_hash``: the hash recomputed from the content of the event at its
  position (`GENESIS` at position 0). A read recomputes that event's hash and skips the
  snapshot, with the same warning, when they differ: the snapshot then belongs to another chain
  than the one stored now. Rows written before the column existed have none and are used as
  they are. Neither check can tell a forged state whose checksum and event hash were computed
  afresh (anyone with write access can compute both): only re-folding the events can, which
  is what ``agentledger verify --deep`` (`agentledger.projections.verify_snapshots`) does.
- Writing is lazy: a fold with a store and an interval writes each snapshot that falls due in
  the tail it folds (replacing a corrupt one), so the first read of a long run pays one full
  fold and later reads fold at most ``every - 1`` deltas. `take_snapshots` writes them eagerly.
- Snapshots are a cache: `SnapshotStore.clear` (or dropping the table) changes no result, only
  speed. Events are immutable and positions only grow, so a snapshot never goes stale.
- A database error while reading or lazily writing snapshots is logged and the fold carries on
  from the events; the explicit store methods raise `SnapshotStoreError` instead.

Logging follows the ledger's rule that a library stays silent by default: warnings go to the
ledger's `EventLogger` when it has one (the CLI's ``-v``), else to ``structlog.get_logger``
only when the application has configured structlog. Must not write events.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

import structlog
from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    delete,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from agentledger.ledger import (
    GENESIS,
    CorruptEventError,
    InvalidPayloadError,
    Ledger,
    LedgerError,
    canonical_json,
    envelope_hash,
    pack_blob,
    unpack_blob,
)
from agentledger.projections._deltas import RunSpan, delta_patches, last_position, run_span
from agentledger.projections._json import JSONValue
from agentledger.projections._merge import fold_patches
from agentledger.projections._sql import engine_for
from agentledger.projections.errors import (
    PositionOutOfRangeError,
    SnapshotIntervalError,
    SnapshotStoreError,
)

__all__ = [
    "DEFAULT_EVERY",
    "SNAPSHOTS_TABLE",
    "Snapshot",
    "SnapshotStore",
    "StoredSnapshot",
    "check_every",
    "checksum_of",
    "event_hash_at",
    "fold_run",
    "take_snapshots",
]

SNAPSHOTS_TABLE = "agentledger_snapshots"
DEFAULT_EVERY = 1000
"""Deltas between snapshots: a read folds at most this many minus one."""

BLOB_ENCODING = "zstd-d1"
"""How ``state_packed`` is packed: the ledger's blob encoding of the same name."""
PACK_OVER = 1024
"""States whose canonical JSON is larger than this many bytes are stored packed."""

_MAX_EXACT_INT = 2**53 - 1

_metadata = MetaData()
_table = Table(
    SNAPSHOTS_TABLE,
    _metadata,
    Column("run_id", String(64), primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("deltas", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("checksum", String(64), nullable=False),
    Column("event_hash", String(64)),
    Column("state_packed", LargeBinary),
    Column("created", DateTime(timezone=True), server_default=func.current_timestamp()),
)


_COLUMNS = (
    _table.c.position,
    _table.c.deltas,
    _table.c.state,
    _table.c.checksum,
    _table.c.event_hash,
    _table.c.state_packed,
)
"""A snapshot row as `_parse` and `StoredSnapshot` take it."""


@dataclass(frozen=True)
class Snapshot:
    """The world state of run `run_id` after `position`, which `deltas` DeltaApplied built.

    `event_hash` is the hash of the event at `position` the snapshot was taken at (None for a
    snapshot written before snapshots carried one).
    """

    run_id: str
    position: int
    deltas: int
    state: dict[str, JSONValue]
    event_hash: str | None = None


def event_hash_at(ledger: Ledger, run_id: str, position: int) -> str | None:
    """The hash recomputed from the content of the run's event at `position`.

    Never the hash stored beside the event: `GENESIS` at position 0, None when no readable
    event is stored there.
    """
    if position == 0:
        return GENESIS
    try:
        found = ledger.events(run_id, after=position - 1, upto=position)
        return envelope_hash(found[0].envelope()) if found else None
    except (CorruptEventError, InvalidPayloadError):
        return None


def checksum_of(state_json: bytes) -> str:
    """The checksum stored with a snapshot: SHA-256 (hex) of its canonical state JSON."""
    return hashlib.sha256(state_json).hexdigest()


class SnapshotStore:
    """The snapshots of a ledger's runs, in the ledger's database (table created on first use)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._engine: Engine = engine_for(ledger)
        self._ready = False

    def save(
        self,
        run_id: str,
        position: int,
        deltas: int,
        state: dict[str, JSONValue],
        *,
        event_hash: str | None = None,
    ) -> None:
        """Store (or replace) the snapshot of `run_id` after `position`.

        `event_hash` defaults to the hash recomputed from the stored event at `position`;
        a position where no readable event is stored raises `PositionOutOfRangeError`.
        """
        rid = _canonical_id(run_id)
        if event_hash is None:
            event_hash = event_hash_at(self._ledger, rid, position)
        if event_hash is None:
            raise PositionOutOfRangeError(rid, position, last_position(self._ledger, rid)[1])
        state_json = canonical_json(state)
        encoding, packed = pack_blob(state_json) if len(state_json) > PACK_OVER else ("raw", b"")
        packs = encoding == BLOB_ENCODING
        row = {
            "run_id": rid,
            "position": position,
            "deltas": deltas,
            "state": "" if packs else state_json.decode("utf-8"),
            "state_packed": packed if packs else None,
            "checksum": checksum_of(state_json),
            "event_hash": event_hash,
        }
        insert = postgresql.insert if self._engine.dialect.name == "postgresql" else sqlite.insert
        statement = insert(_table).values(**row)
        replaced = ("deltas", "state", "state_packed", "checksum", "event_hash")
        statement = statement.on_conflict_do_update(
            index_elements=["run_id", "position"],
            set_={key: statement.excluded[key] for key in replaced},
        )
        self._write(lambda connection: connection.execute(statement))

    def latest(self, run_id: str, at: int | None = None) -> Snapshot | None:
        """The newest valid snapshot of `run_id` at or before `at` (any position if None).

        Rows that fail their checksum, cannot be read, or whose event hash is not the hash of
        the event now stored at their position are skipped, each with a ``snapshot.ignored``
        warning; None when no valid snapshot is left.
        """
        rid = _canonical_id(run_id)
        bound = at
        while True:
            row = self._newest_row(rid, bound)
            if row is None:
                return None
            snapshot, problem = _parse(rid, row)
            if snapshot is not None:
                problem = self._unbound(snapshot)
                if not problem:
                    return snapshot
            _warn(self._ledger, "snapshot.ignored", run_id=rid, position=row[0], reason=problem)
            bound = int(row[0]) - 1

    def _unbound(self, snapshot: Snapshot) -> str:
        """Why `snapshot` does not belong to the events stored now ("" when it does)."""
        if snapshot.event_hash is None:
            return ""  # written before snapshots carried an event hash
        try:
            actual = event_hash_at(self._ledger, snapshot.run_id, snapshot.position)
        except LedgerError as e:
            return f"the event at its position cannot be read: {e}"
        if actual is None:
            return "no readable event is stored at its position"
        if actual != snapshot.event_hash:
            return (
                f"event hash mismatch: taken at event {snapshot.event_hash[:12]}, "
                f"the event stored there hashes to {actual[:12]}"
            )
        return ""

    def rows(self, run_id: str) -> list[StoredSnapshot]:
        """Every snapshot row of `run_id` as stored (valid or not), by position."""
        rid = _canonical_id(run_id)
        query = select(*_COLUMNS).where(_table.c.run_id == rid)
        found = self._read(lambda c: c.execute(query.order_by(_table.c.position)).all())
        return [StoredSnapshot(rid, *row) for row in found]

    def exists(self) -> bool:
        """Whether the snapshot table exists (a read-only ledger that never took one has none)."""
        if self._ready:
            return True
        try:
            return bool(inspect(self._engine).has_table(SNAPSHOTS_TABLE))
        except SQLAlchemyError as e:
            raise SnapshotStoreError(self._ledger.url, str(e)) from e

    def run_ids(self) -> list[str]:
        """The runs that have snapshot rows, sorted."""
        query = select(_table.c.run_id).distinct().order_by(_table.c.run_id)
        return [str(r) for r in self._read(lambda c: c.execute(query).scalars().all())]

    def positions(self, run_id: str) -> list[int]:
        """The positions of `run_id` that have a snapshot row (valid or not), ascending."""
        query = (
            select(_table.c.position)
            .where(_table.c.run_id == _canonical_id(run_id))
            .order_by(_table.c.position)
        )
        return [int(p) for p in self._read(lambda c: c.execute(query).scalars().all())]

    def delete_run(self, run_id: str) -> int:
        """Delete every snapshot of `run_id`; returns how many rows went."""
        statement = delete(_table).where(_table.c.run_id == _canonical_id(run_id))
        return int(self._write(lambda c: c.execute(statement).rowcount))

    def clear(self) -> int:
        """Delete every snapshot of every run; returns how many rows went."""
        return int(self._write(lambda c: c.execute(delete(_table)).rowcount))

    def _newest_row(self, run_id: str, bound: int | None) -> tuple[Any, ...] | None:
        query = select(*_COLUMNS).where(_table.c.run_id == run_id)
        if bound is not None:
            query = query.where(_table.c.position <= bound)
        query = query.order_by(_table.c.position.desc()).limit(1)
        row = self._read(lambda c: c.execute(query).first())
        return None if row is None else tuple(row)

    def _read(self, work: Callable[[Any], Any]) -> Any:
        self._ensure()
        try:
            with self._engine.connect() as connection:
                return work(connection)
        except SQLAlchemyError as e:
            raise SnapshotStoreError(self._ledger.url, str(e)) from e

    def _write(self, work: Callable[[Any], Any]) -> Any:
        self._ensure()
        try:
            with self._engine.begin() as connection:
                return work(connection)
        except SQLAlchemyError as e:
            raise SnapshotStoreError(self._ledger.url, str(e)) from e

    def _ensure(self) -> None:
        if self._ready:
            return
        if self._ledger.read_only:  # read what is there; create and alter nothing
            try:
                present = inspect(self._engine).has_table(SNAPSHOTS_TABLE)
            except SQLAlchemyError as e:
                raise SnapshotStoreError(self._ledger.url, str(e)) from e
            if not present:
                raise SnapshotStoreError(self._ledger.url, "no snapshot table (read-only)")
            self._ready = True
            return
        try:
            _metadata.create_all(self._engine, checkfirst=True)
        except SQLAlchemyError as e:
            # Another process may have created the table between the check and the CREATE.
            if not inspect(self._engine).has_table(SNAPSHOTS_TABLE):
                raise SnapshotStoreError(self._ledger.url, str(e)) from e
        self._add_column("event_hash", "VARCHAR(64)")
        binary = "BYTEA" if self._engine.dialect.name == "postgresql" else "BLOB"
        self._add_column("state_packed", binary)
        self._ready = True

    def _add_column(self, name: str, sql_type: str) -> None:
        """Give a table made by an older version the column ``name`` it lacks."""

        def columns() -> set[str]:
            return {c["name"] for c in inspect(self._engine).get_columns(SNAPSHOTS_TABLE)}

        try:
            present = columns()
            if name in present or "checksum" not in present:
                return  # current, or not our table at all (reads will report it)
            with self._engine.begin() as connection:
                connection.execute(
                    text(f"ALTER TABLE {SNAPSHOTS_TABLE} ADD COLUMN {name} {sql_type}")
                )
        except SQLAlchemyError as e:
            # Another process may have added it between the look and the ALTER.
            if name not in columns():
                raise SnapshotStoreError(self._ledger.url, str(e)) from e


@dataclass(frozen=True)
class StoredSnapshot:
    """A snapshot row as stored, before any check: what ``verify --deep`` examines."""

    run_id: str
    position: int
    deltas: Any
    state: Any
    checksum: Any
    event_hash: Any
    state_packed: Any = None

    def parse(self) -> tuple[Snapshot | None, str]:
        """The snapshot, or None and why its row cannot be trusted (checksum, unreadable)."""
        row = (
            self.position,
            self.deltas,
            self.state,
            self.checksum,
            self.event_hash,
            self.state_packed,
        )
        return _parse(self.run_id, row)


def _parse(run_id: str, row: tuple[Any, ...]) -> tuple[Snapshot | None, str]:
    """The snapshot in `row`, or None and why it cannot be trusted."""
    position, deltas, state_text, checksum, event_hash, packed = row
    try:
        data = unpack_blob(BLOB_ENCODING, bytes(packed)) if packed else state_text.encode("utf-8")
        if checksum_of(data) != checksum:
            return None, "checksum mismatch"
        state = json.loads(data, parse_int=_parse_int)
    except (AttributeError, TypeError, ValueError) as e:
        return None, f"unreadable row: {e}"
    if not isinstance(state, dict) or not isinstance(deltas, int) or deltas < 0:
        return None, "unreadable row: the state is not an object or the delta count is invalid"
    if event_hash is not None and not isinstance(event_hash, str):
        return None, "unreadable row: the event hash is not text"
    return Snapshot(run_id, int(position), deltas, state, event_hash), ""


def _parse_int(text: str) -> int | float:
    # Read integers back as the ledger reads event payloads: beyond 2^53 they were floats.
    value = int(text)
    return value if -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT else float(value)


def _canonical_id(run_id: str) -> str:
    try:
        return str(UUID(str(run_id)))
    except ValueError:
        return str(run_id)


def check_every(every: int) -> int:
    """`every` itself, once checked to be a positive whole number of deltas."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise SnapshotIntervalError(every)
    return every


def fold_run(
    ledger: Ledger, span: RunSpan, *, store: SnapshotStore | None, every: int | None
) -> tuple[dict[str, JSONValue], Snapshot | None]:
    """The world state after `span.at`, and the snapshot the fold started from (None: none).

    Starts from the newest valid snapshot when `store` is given; with `store` and `every`,
    snapshots that fall due in the folded tail are written as it goes. Snapshot read or write
    failures are logged and never change the result.
    """
    if store is None:
        return _fold_tail(ledger, span, None, 0, None), None
    start = _safe_latest(ledger, store, span)
    if not every:
        return _fold_tail(ledger, span, start, 0, None), start

    def save(position: int, count: int, state: dict[str, JSONValue]) -> bool:
        try:
            store.save(span.run_id, position, count, state)
        except (SnapshotStoreError, PositionOutOfRangeError) as e:
            _warn(
                ledger, "snapshot.not_saved", run_id=span.run_id, position=position, reason=str(e)
            )
            return False
        return True

    return _fold_tail(ledger, span, start, every, save), start


def take_snapshots(ledger: Ledger, run_id: str, every: int = DEFAULT_EVERY) -> int:
    """Write the snapshots due in `run_id` (one after every `every`-th delta) that are missing.

    Folds from the newest valid snapshot, so calling it again after the run grew only folds the
    new events (and a corrupt snapshot is rewritten). Returns how many snapshots it wrote.
    Database errors raise `SnapshotStoreError`.
    """
    check_every(every)
    span = run_span(ledger, run_id, None)
    store = SnapshotStore(ledger)
    written: list[int] = []

    def save(position: int, count: int, state: dict[str, JSONValue]) -> bool:
        store.save(span.run_id, position, count, state)
        written.append(position)
        return True

    _fold_tail(ledger, span, store.latest(span.run_id, span.at), every, save)
    return len(written)


_Saver = Callable[[int, int, dict[str, JSONValue]], bool]
"""Saves the state after (position, delta count); False means stop saving for this fold."""


def _safe_latest(ledger: Ledger, store: SnapshotStore, span: RunSpan) -> Snapshot | None:
    try:
        return store.latest(span.run_id, span.at)
    except SnapshotStoreError as e:
        _warn(ledger, "snapshot.unavailable", run_id=span.run_id, position=span.at, reason=str(e))
        return None


def _fold_tail(
    ledger: Ledger, span: RunSpan, start: Snapshot | None, every: int, save: _Saver | None
) -> dict[str, JSONValue]:
    """Fold the deltas after `start` (or all) up to `span.at`, saving every `every`-th state."""
    state: JSONValue = start.state if start is not None else {}
    count = start.deltas if start is not None else 0
    after = start.position if start is not None else 0
    chunk: list[JSONValue] = []
    for position, patch in delta_patches(ledger, span.run_id, after=after, upto=span.at):
        chunk.append(patch)
        count += 1
        if save is not None and count % every == 0:
            state = fold_patches(chunk, state)
            chunk = []
            if not save(position, count, cast("dict[str, JSONValue]", state)):
                save = None
    return cast("dict[str, JSONValue]", fold_patches(chunk, state))


def _warn(ledger: Ledger, event: str, **fields: Any) -> None:
    """Log a warning without ever printing from an unconfigured library (see the docstring)."""
    if ledger.log is not None:
        ledger.log.warning(event, **fields)
    elif structlog.is_configured():
        structlog.get_logger(__name__).warning(event, **fields)
