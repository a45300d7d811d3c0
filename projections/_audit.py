"""Auditing derived data against the events: world-state snapshots and the SQL read models.

Snapshots and read models are caches in the ledger's own database, so anyone who can edit the
events can edit them too, checksums included. This module owns the two checks that trust
nothing but the events:

- `verify_snapshots` (``agentledger verify --deep``) re-folds each run's deltas up to every
  stored snapshot and compares the stored state (byte for byte with its canonical JSON), the
  delta count, and the stored event hash with the hash recomputed from the event at that
  position. A snapshot past a run's last event is reported too: the run lost its tail, or the
  row was forged. Rows written before snapshots carried an event hash are re-folded and
  compared like the others, and counted.
- `verify_read_models` (``agentledger projections verify``) rebuilds the read models from the
  events in a scratch SQLite database (never the user's tables, which it only reads), up to the
  notification the user's copy tracks, and compares the two row by row.

Must not write events, snapshots or read-model rows.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, Table, create_engine, event, inspect, select
from sqlalchemy.exc import SQLAlchemyError

from agentledger.ledger import Ledger, StorageError, UnknownRunError, canonical_json
from agentledger.projections._deltas import delta_patches, last_position
from agentledger.projections._json import JSONValue, json_equal, json_pointer
from agentledger.projections._merge import fold_patches
from agentledger.projections._readmodel import DEFAULT_BATCH, ReadModelProjector
from agentledger.projections._rm_schema import DATA_TABLES, SCHEMA_VERSION, TRACKING
from agentledger.projections._snapshots import SnapshotStore, StoredSnapshot, event_hash_at
from agentledger.projections._sql import engine_for
from agentledger.projections.errors import InvalidDeltaError

__all__ = [
    "ReadModelReport",
    "RowDifference",
    "SnapshotProblem",
    "SnapshotReason",
    "SnapshotReport",
    "verify_read_models",
    "verify_snapshots",
]

# Snapshots -----------------------------------------------------------------------------------

SnapshotReason = Literal[
    "snapshot state differs",
    "snapshot delta count differs",
    "snapshot event hash differs",
    "snapshot past end",
    "snapshot of unknown run",
    "snapshot corrupt",
    "snapshot unverifiable",
]
"""Why a stored snapshot is wrong: its state or delta count is not what the events fold to, its
event hash is not that of the event at its position, it lies past the run's last event or
belongs to no run, its row fails its checksum or cannot be read (reads skip such a row), or a
delta before it cannot be folded."""


@dataclass(frozen=True)
class SnapshotProblem:
    """One stored snapshot that the events do not bear out: where, and why."""

    run_id: str
    position: int
    reason: SnapshotReason
    detail: str

    def __str__(self) -> str:
        return f"run {self.run_id} position {self.position}: {self.reason} ({self.detail})"


@dataclass
class SnapshotReport:
    """What `verify_snapshots` checked and what it found."""

    snapshots_checked: int = 0
    without_event_hash: int = 0
    problems: list[SnapshotProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every snapshot is what the events fold to."""
        return not self.problems


def verify_snapshots(ledger: Ledger, run_id: str | None = None) -> SnapshotReport:
    """Re-fold the events behind every stored snapshot (of one run, or all) and compare.

    Reads each run's events once, in pages. Database errors raise `SnapshotStoreError`.
    """
    store = SnapshotStore(ledger)
    report = SnapshotReport()
    if not store.exists():  # no snapshot was ever taken: nothing to re-fold
        return report
    for rid in [run_id] if run_id is not None else store.run_ids():
        rows = store.rows(rid)
        if rows:
            report.snapshots_checked += len(rows)
            report.without_event_hash += sum(row.event_hash is None for row in rows)
            report.problems += _check_run(ledger, rows)
    return report


def _check_run(ledger: Ledger, rows: Sequence[StoredSnapshot]) -> list[SnapshotProblem]:
    """Fold the run once, stopping at each snapshot's position to compare (rows by position)."""
    rid = rows[0].run_id
    try:
        rid, last = last_position(ledger, rid)
    except UnknownRunError:
        detail = "the ledger holds no event of this run"
        return [SnapshotProblem(rid, r.position, "snapshot of unknown run", detail) for r in rows]
    problems: list[SnapshotProblem] = []
    state: JSONValue = {}
    count = folded = 0
    for row in rows:
        if row.position > last:
            detail = f"the run's events end at {last}: its tail was cut, or the row was forged"
            problems.append(SnapshotProblem(rid, row.position, "snapshot past end", detail))
            continue
        try:
            patches = [p for _, p in delta_patches(ledger, rid, after=folded, upto=row.position)]
        except InvalidDeltaError as e:
            detail = f"the events before it cannot be folded: {e}"
            problems.append(SnapshotProblem(rid, row.position, "snapshot unverifiable", detail))
            break
        state = fold_patches(patches, state)
        count, folded = count + len(patches), row.position
        problems += _compare_snapshot(ledger, row, state, count)
    return problems


def _compare_snapshot(
    ledger: Ledger, row: StoredSnapshot, state: JSONValue, count: int
) -> list[SnapshotProblem]:
    rid, position = row.run_id, row.position
    snapshot, why = row.parse()
    if snapshot is None:
        return [SnapshotProblem(rid, position, "snapshot corrupt", f"{why}; reads skip it")]
    problems: list[SnapshotProblem] = []
    if row.event_hash is not None:
        actual = event_hash_at(ledger, rid, position)
        if actual != row.event_hash:
            there = f"hashes to {actual[:12]}" if actual else "cannot be read"
            detail = f"taken at event {row.event_hash[:12]}, the event stored there {there}"
            problems.append(SnapshotProblem(rid, position, "snapshot event hash differs", detail))
    if str(row.state).encode("utf-8") != canonical_json(state):
        detail = _difference(state, snapshot.state)
        problems.append(SnapshotProblem(rid, position, "snapshot state differs", detail))
    if snapshot.deltas != count:
        detail = f"the snapshot counts {snapshot.deltas} deltas, the events {count}"
        problems.append(SnapshotProblem(rid, position, "snapshot delta count differs", detail))
    return problems


_ABSENT: Any = object()


def _difference(folded: JSONValue, stored: JSONValue) -> str:
    """Where the stored state first departs from the folded one, as a readable phrase."""
    path: tuple[str, ...] = ()
    while isinstance(folded, dict) and isinstance(stored, dict):
        for key in sorted(set(folded) | set(stored)):
            a, b = folded.get(key, _ABSENT), stored.get(key, _ABSENT)
            if a is _ABSENT or b is _ABSENT or not json_equal(a, b):
                path, folded, stored = (*path, key), a, b
                break
        else:
            return "the stored text is not the canonical JSON of the folded state"
    where = json_pointer(path) or "the whole state"
    return f"{where}: the snapshot holds {_show(stored)}, the events fold to {_show(folded)}"


def _show(value: JSONValue) -> str:
    if value is _ABSENT:
        return "nothing"
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 60 else text[:59] + "\u2026"


# Read models ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowDifference:
    """One read-model row that is not what the events make.

    `kind` is ``"differs"`` (`columns` holds each differing column with the read model's value
    and the value rebuilt from the events), ``"missing"`` (the events make the row, the read
    model lacks it) or ``"extra"`` (the read model holds a row the events do not make).
    """

    table: str
    key: tuple[tuple[str, Any], ...]
    kind: Literal["differs", "missing", "extra"]
    columns: tuple[tuple[str, Any, Any], ...] = ()

    def __str__(self) -> str:
        where = f"{self.table} " + ", ".join(f"{name}={value}" for name, value in self.key)
        if self.kind == "missing":
            return f"{where}: missing from the read models (the events make this row)"
        if self.kind == "extra":
            return f"{where}: in the read models, but the events make no such row"
        changes = "; ".join(f"{c}: read model {a!r}, events {b!r}" for c, a, b in self.columns)
        return f"{where}: {changes}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "table": self.table,
            "key": dict(self.key),
            "kind": self.kind,
            "columns": {c: {"read_model": a, "events": b} for c, a, b in self.columns},
        }


@dataclass
class ReadModelReport:
    """What `verify_read_models` compared (up to notification `position`) and what differed."""

    position: int = 0
    max_notification_id: int = 0
    rows_checked: int = 0
    differences: list[RowDifference] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        """True when every row is what the events make."""
        return not self.differences

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "ok": self.ok,
            "position": self.position,
            "max_notification_id": self.max_notification_id,
            "rows_checked": self.rows_checked,
            "differences": [d.as_dict() for d in self.differences],
            "note": self.note,
        }


_CHUNK = 500
"""Run ids per query when comparing tables."""


def verify_read_models(ledger: Ledger, *, batch_size: int = DEFAULT_BATCH) -> ReadModelReport:
    """Compare the ledger's read models with a rebuild from its events, row by row.

    The rebuild goes to a scratch SQLite file that is deleted afterwards and stops at the
    notification the read models track, so a read model that merely lags is not a difference;
    the read models themselves are only read (never created, caught up or migrated). Database
    errors raise the ledger's `StorageError`.
    """
    engine = engine_for(ledger)
    report = ReadModelReport(max_notification_id=ledger.max_notification_id())
    try:
        tracked = _tracked(engine)
        if tracked is None:
            report.note = "no read models in this database yet: nothing to compare"
            return report
        position, version = tracked
        key = (("name", ReadModelProjector.NAME),)
        if version != SCHEMA_VERSION:
            column = ("schema_version", version, SCHEMA_VERSION)
            report.differences.append(RowDifference(TRACKING.name, key, "differs", (column,)))
            report.note = "the read models are of another schema version: rebuild them"
            return report
        report.position = min(position, report.max_notification_id)
        if position > report.max_notification_id:
            column = ("position", position, report.max_notification_id)
            report.differences.append(RowDifference(TRACKING.name, key, "differs", (column,)))
        with _scratch_engine() as scratch:
            ReadModelProjector(ledger, engine=scratch).catch_up(batch_size, upto=report.position)
            _compare(engine, scratch, report)
    except SQLAlchemyError as e:
        raise StorageError(ledger.url, f"read model: {e}") from e
    return report


def _tracked(engine: Engine) -> tuple[int, int] | None:
    """The read models' tracked notification id and schema version (None: no read models)."""
    if not inspect(engine).has_table(TRACKING.name):
        return None
    query = select(TRACKING.c.position, TRACKING.c.schema_version).where(
        TRACKING.c.name == ReadModelProjector.NAME
    )
    with engine.connect() as conn:
        row = conn.execute(query).first()
    return None if row is None else (int(row[0]), int(row[1]))


@contextmanager
def _scratch_engine() -> Iterator[Engine]:
    """A SQLite engine on a fresh file in a temporary directory, all removed on exit."""
    with tempfile.TemporaryDirectory(prefix="agentledger-verify-") as directory:
        engine = create_engine(f"sqlite:///{Path(directory) / 'rebuild.db'}")
        event.listen(engine, "connect", _fast_scratch)
        try:
            yield engine
        finally:
            engine.dispose()


def _fast_scratch(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=OFF")  # a throwaway copy needs no crash safety
    cursor.execute("PRAGMA synchronous=OFF")
    cursor.close()


def _compare(user: Engine, rebuilt: Engine, report: ReadModelReport) -> None:
    present = set(inspect(user).get_table_names())
    for table in DATA_TABLES:
        has = table.name in present
        run_ids = _run_ids(rebuilt, table) | (_run_ids(user, table) if has else set())
        ordered = sorted(run_ids)
        for start in range(0, len(ordered), _CHUNK):
            chunk = ordered[start : start + _CHUNK]
            theirs = _rows(user, table, chunk) if has else {}
            ours = _rows(rebuilt, table, chunk)
            for key in sorted(set(theirs) | set(ours)):
                report.rows_checked += 1
                difference = _row_difference(table, key, theirs.get(key), ours.get(key))
                if difference is not None:
                    report.differences.append(difference)


def _run_ids(engine: Engine, table: Table) -> set[str]:
    with engine.connect() as conn:
        return {str(r) for r in conn.execute(select(table.c.run_id).distinct()).scalars()}


_Rows = dict[tuple[Any, ...], dict[str, Any]]


def _rows(engine: Engine, table: Table, run_ids: list[str]) -> _Rows:
    keys = [column.name for column in table.primary_key.columns]
    with engine.connect() as conn:
        found = conn.execute(select(table).where(table.c.run_id.in_(run_ids)))
        rows = [dict(row._mapping) for row in found]
    return {tuple(row[k] for k in keys): row for row in rows}


def _row_difference(
    table: Table, key: tuple[Any, ...], theirs: dict[str, Any] | None, ours: dict[str, Any] | None
) -> RowDifference | None:
    names = [column.name for column in table.primary_key.columns]
    where = tuple(zip(names, key, strict=True))
    if theirs is None:
        return RowDifference(table.name, where, "missing")
    if ours is None:
        return RowDifference(table.name, where, "extra")
    changed = tuple(
        (name, theirs[name], ours[name]) for name in ours if not _same(theirs[name], ours[name])
    )
    return RowDifference(table.name, where, "differs", changed) if changed else None


def _same(a: Any, b: Any) -> bool:
    """Column values equal as stored (JSON columns as JSON values; True is not 1)."""
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return json_equal(a, b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)
