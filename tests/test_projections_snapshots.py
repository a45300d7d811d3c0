"""World-state snapshots: a cache that speeds up `world_state` and never changes its answer.

Covers the law "folding from any snapshot + the tail == the full fold" (Hypothesis), lazy and
eager snapshot writing, corrupt rows (checksum mismatch, tampered state, unreadable rows) that
are skipped with a logged warning in favour of an older snapshot or the events, a missing or
broken snapshot table, and deleting snapshots, on memory, SQLite files and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text
from structlog.testing import capture_logs

from agentledger.ledger import EventLogger, Ledger, canonical_json, pack_blob, unpack_blob
from agentledger.projections import (
    JSONValue,
    PositionOutOfRangeError,
    SnapshotIntervalError,
    SnapshotStore,
    fold_patches,
    fold_world_state,
    take_snapshots,
    verify_snapshots,
    world_state,
)
from agentledger.projections import _snapshots as snapshots_module
from agentledger.projections._snapshots import PACK_OVER
from agentledger.projections._sql import engine_for

# Strategies -------------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d"])
SCALARS = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=4)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)
DELTAS = st.lists(st.dictionaries(KEYS, VALUES, max_size=3), min_size=1, max_size=25)


def record_deltas(ledger: Ledger, deltas: list[dict[str, Any]], *, noise: bool = True) -> str:
    """Record a run of `deltas` (with a plan event after every third, so positions skip)."""
    with ledger.record_run("snapshots", input=None) as run, run.batch():
        for index, delta in enumerate(deltas):
            run.delta(delta)
            if noise and index % 3 == 2:
                run.plan({"after": index})
        return run.run_id


def counting_deltas(count: int) -> list[dict[str, Any]]:
    """`count` deltas that keep a counter, a rolling key and a growing object."""
    return [{"n": i, f"k{i % 5}": i, "seen": {f"i{i % 17}": i}} for i in range(count)]


@pytest.fixture
def ledger(ledger: Ledger) -> Iterator[Ledger]:
    """The backend ledger of conftest, with its SQLAlchemy engine's connections closed after."""
    yield ledger
    engine_for(ledger).dispose()


@pytest.fixture(scope="module")
def shared_memory_ledger() -> Iterator[Ledger]:
    """One memory ledger for the Hypothesis law (a fresh run per example)."""
    with Ledger.open("memory://") as ledger:
        yield ledger
        engine_for(ledger).dispose()


def rows(ledger: Ledger, run_id: str) -> list[tuple[Any, ...]]:
    """The raw snapshot rows of a run: (position, deltas, state, checksum)."""
    with engine_for(ledger).connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                text(
                    "SELECT position, deltas, state, checksum FROM agentledger_snapshots "
                    "WHERE run_id = :r ORDER BY position"
                ),
                {"r": run_id},
            )
        ]


def set_row(ledger: Ledger, run_id: str, position: int, **values: Any) -> None:
    """Overwrite columns of one snapshot row behind the store's back."""
    assignments = ", ".join(f"{key} = :{key}" for key in values)
    with engine_for(ledger).begin() as connection:
        connection.execute(
            text(
                f"UPDATE agentledger_snapshots SET {assignments} "
                "WHERE run_id = :run_id AND position = :position"
            ),
            {**values, "run_id": run_id, "position": position},
        )


def warnings_named(logs: list[dict[str, Any]], event: str) -> list[tuple[Any, ...]]:
    """(run_id, position, reason) of each captured warning called `event`."""
    return [
        (entry["run_id"], entry["position"], entry["reason"])
        for entry in logs
        if entry["event"] == event and entry["log_level"] == "warning"
    ]


# The law ----------------------------------------------------------------------------------


@given(deltas=DELTAS, data=st.data())
@settings(max_examples=60)  # each example records a run: keep the file fast
def test_folding_from_any_snapshot_plus_the_tail_equals_the_full_fold(
    shared_memory_ledger: Ledger, deltas: list[dict[str, Any]], data: st.DataObject
) -> None:
    """For any snapshot position p <= at, snapshot(p) + the deltas in (p, at] == fold to at."""
    ledger = shared_memory_ledger
    run_id = record_deltas(ledger, deltas)
    last = ledger.run(run_id).event_count
    at = data.draw(st.integers(0, last), label="at")
    p = data.draw(st.integers(0, at), label="snapshot position")
    store = SnapshotStore(ledger)
    store.save(run_id, p, 0, world_state(ledger, run_id, p))
    full = world_state(ledger, run_id, at)
    assert world_state(ledger, run_id, at, snapshots=store, every=None) == full
    assert full == fold_patches(_deltas_upto(ledger, run_id, at))


def _deltas_upto(ledger: Ledger, run_id: str, at: int) -> list[JSONValue]:
    return [r.payload["patch"] for r in ledger.events(run_id, upto=at) if r.kind == "DeltaApplied"]


@given(deltas=DELTAS, every=st.integers(1, 6), data=st.data())
@settings(max_examples=60)  # each example records a run: keep the file fast
def test_lazy_snapshots_never_change_a_state_at_any_position(
    shared_memory_ledger: Ledger, deltas: list[dict[str, Any]], every: int, data: st.DataObject
) -> None:
    """Reads that write snapshots as they go give the same states, in any order of reads."""
    ledger = shared_memory_ledger
    run_id = record_deltas(ledger, deltas)
    last = ledger.run(run_id).event_count
    reads = data.draw(st.lists(st.integers(0, last), min_size=1, max_size=6), label="reads")
    for at in reads:
        expected = world_state(ledger, run_id, at)
        assert world_state(ledger, run_id, at, snapshots=True, every=every) == expected


# Writing snapshots ------------------------------------------------------------------------


def test_take_snapshots_writes_one_after_every_nth_delta(ledger: Ledger) -> None:
    """Snapshots land after the 4th, 8th, ... delta, and each holds the state there."""
    deltas = counting_deltas(18)
    run_id = record_deltas(ledger, deltas)
    assert take_snapshots(ledger, run_id, every=4) == 4
    delta_positions = [r.position for r in ledger.events(run_id) if r.kind == "DeltaApplied"]
    stored = rows(ledger, run_id)
    assert [row[0] for row in stored] == [delta_positions[i] for i in (3, 7, 11, 15)]
    assert [row[1] for row in stored] == [4, 8, 12, 16]
    for position, _, state, checksum in stored:
        assert checksum == hashlib.sha256(state.encode()).hexdigest()
        snapshot = SnapshotStore(ledger).latest(run_id, position)
        assert snapshot is not None
        assert snapshot.state == world_state(ledger, run_id, position)
    assert take_snapshots(ledger, run_id, every=4) == 0  # all there already


def test_a_read_writes_the_snapshots_that_fall_due_lazily(ledger: Ledger) -> None:
    """The first read with snapshots writes the same snapshots `take_snapshots` would."""
    run_id = record_deltas(ledger, counting_deltas(23))
    store = SnapshotStore(ledger)
    assert store.positions(run_id) == []
    full = world_state(ledger, run_id)
    assert world_state(ledger, run_id, snapshots=True, every=5) == full
    lazily = store.positions(run_id)
    assert len(lazily) == 4
    store.delete_run(run_id)
    take_snapshots(ledger, run_id, every=5)
    assert store.positions(run_id) == lazily
    assert world_state(ledger, run_id, snapshots=True, every=5) == full


def test_reading_with_every_none_writes_no_snapshot(ledger: Ledger) -> None:
    """``every=None`` uses snapshots that exist and adds none."""
    run_id = record_deltas(ledger, counting_deltas(12))
    world_state(ledger, run_id, snapshots=True, every=None)
    assert SnapshotStore(ledger).positions(run_id) == []


def test_take_snapshots_after_the_run_grows_adds_only_the_new_ones(ledger: Ledger) -> None:
    """A run still recording gains snapshots for its new deltas; older ones stay."""
    recorder = ledger.record_run("growing", input=None)
    with recorder.batch():
        for delta in counting_deltas(10):
            recorder.delta(delta)
    assert take_snapshots(ledger, recorder.run_id, every=3) == 3
    with recorder.batch():
        for delta in counting_deltas(20)[10:]:
            recorder.delta(delta)
    assert take_snapshots(ledger, recorder.run_id, every=3) == 3
    assert [row[1] for row in rows(ledger, recorder.run_id)] == [3, 6, 9, 12, 15, 18]
    assert world_state(ledger, recorder.run_id, snapshots=True) == fold_patches(counting_deltas(20))


def test_take_snapshots_refuses_an_interval_below_one(ledger: Ledger) -> None:
    """`every` must be a positive number of deltas."""
    run_id = record_deltas(ledger, counting_deltas(3))
    with pytest.raises(SnapshotIntervalError, match="positive"):
        take_snapshots(ledger, run_id, every=0)


# Corrupt, missing and deleted snapshots ---------------------------------------------------


def test_a_snapshot_failing_its_checksum_is_skipped_and_logged(ledger: Ledger) -> None:
    """A tampered state is ignored with a warning naming run and position; the answer holds."""
    run_id = record_deltas(ledger, counting_deltas(20))
    take_snapshots(ledger, run_id, every=5)
    full = world_state(ledger, run_id)
    newest = rows(ledger, run_id)[-1][0]
    set_row(ledger, run_id, newest, state='{"n": -1}')
    with capture_logs() as logs:
        assert world_state(ledger, run_id, snapshots=True, every=None) == full
    assert warnings_named(logs, "snapshot.ignored") == [(run_id, newest, "checksum mismatch")]


def test_a_corrupt_snapshot_falls_back_to_the_next_older_valid_one(ledger: Ledger) -> None:
    """With the newest snapshot corrupt, the fold starts from the one before it.

    The older snapshot is deliberately valid but wrong (re-saved with a marker key), which
    shows it is the one the fold started from; a snapshot is trusted once its checksum holds.
    """
    run_id = record_deltas(ledger, counting_deltas(20), noise=False)
    take_snapshots(ledger, run_id, every=5)
    positions = [row[0] for row in rows(ledger, run_id)]
    store = SnapshotStore(ledger)
    older = world_state(ledger, run_id, positions[-2]) | {"marker": "from the older snapshot"}
    store.save(run_id, positions[-2], 15, older)
    set_row(ledger, run_id, positions[-1], checksum="0" * 64)
    with capture_logs() as logs:
        state = world_state(ledger, run_id, snapshots=True, every=None)
    assert state["marker"] == "from the older snapshot"
    assert state["n"] == 19
    assert warnings_named(logs, "snapshot.ignored") == [
        (run_id, positions[-1], "checksum mismatch")
    ]


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("not json at all", "unreadable row"),
        ("[1, 2, 3]", "unreadable row: the state is not an object"),
    ],
)
def test_an_unreadable_row_with_a_matching_checksum_is_skipped(
    ledger: Ledger, state: str, reason: str
) -> None:
    """A row whose state cannot be a world state is ignored even when its checksum matches."""
    run_id = record_deltas(ledger, counting_deltas(12))
    take_snapshots(ledger, run_id, every=4)
    full = world_state(ledger, run_id)
    newest = rows(ledger, run_id)[-1][0]
    set_row(
        ledger, run_id, newest, state=state, checksum=hashlib.sha256(state.encode()).hexdigest()
    )
    with capture_logs() as logs:
        assert world_state(ledger, run_id, snapshots=True, every=None) == full
    [(rid, position, why)] = warnings_named(logs, "snapshot.ignored")
    assert (rid, position) == (run_id, newest)
    assert why.startswith(reason)


def test_every_snapshot_corrupt_falls_back_to_the_events(ledger: Ledger) -> None:
    """When no snapshot is valid the fold starts from the first event, and each is logged."""
    run_id = record_deltas(ledger, counting_deltas(12))
    take_snapshots(ledger, run_id, every=4)
    full = world_state(ledger, run_id)
    positions = [row[0] for row in rows(ledger, run_id)]
    for position in positions:
        set_row(ledger, run_id, position, checksum="f" * 64)
    with capture_logs() as logs:
        assert world_state(ledger, run_id, snapshots=True, every=None) == full
    assert [w[1] for w in warnings_named(logs, "snapshot.ignored")] == positions[::-1]


def test_a_lazy_read_rewrites_a_corrupt_snapshot(ledger: Ledger) -> None:
    """A read that folds past a corrupt snapshot's position writes a good one in its place."""
    run_id = record_deltas(ledger, counting_deltas(10))
    take_snapshots(ledger, run_id, every=5)
    good = rows(ledger, run_id)
    set_row(ledger, run_id, good[0][0], state='{"n": 999}')
    set_row(ledger, run_id, good[1][0], state='{"n": 999}')
    with capture_logs():
        world_state(ledger, run_id, snapshots=True, every=5)
    assert rows(ledger, run_id) == good


def test_a_missing_snapshot_table_or_row_changes_nothing(ledger: Ledger) -> None:
    """Reads with snapshots on a ledger that never stored one equal the plain fold."""
    run_id = record_deltas(ledger, counting_deltas(7))
    last = ledger.run(run_id).event_count
    with capture_logs() as logs:
        for at in range(last + 1):
            assert world_state(ledger, run_id, at, snapshots=True, every=None) == world_state(
                ledger, run_id, at
            )
    assert SnapshotStore(ledger).latest(run_id) is None
    assert logs == []


def test_deleting_snapshots_changes_no_result(ledger: Ledger) -> None:
    """Snapshots are a cache: with all of them, some, or none, every state is the same."""
    first = record_deltas(ledger, counting_deltas(16))
    second = record_deltas(ledger, counting_deltas(9))
    last = ledger.run(first).event_count
    before = [world_state(ledger, first, at) for at in range(last + 1)]
    store = SnapshotStore(ledger)
    take_snapshots(ledger, first, every=3)
    take_snapshots(ledger, second, every=3)
    assert [world_state(ledger, first, at, snapshots=True) for at in range(last + 1)] == before
    assert store.delete_run(first) == 5
    assert store.positions(first) == []
    assert store.positions(second) != []
    assert [world_state(ledger, first, at, snapshots=True) for at in range(last + 1)] == before
    assert store.clear() > 0
    assert store.positions(second) == []
    assert world_state(ledger, second, snapshots=True, every=None) == fold_patches(
        counting_deltas(9)
    )


def test_a_broken_snapshot_table_never_breaks_a_read(sqlite_url: str) -> None:
    """If the table cannot be queried, the read logs it and folds from the events."""
    with Ledger.open(sqlite_url) as ledger:
        run_id = record_deltas(ledger, counting_deltas(8))
        with engine_for(ledger).begin() as connection:
            connection.execute(text("CREATE TABLE agentledger_snapshots (unrelated TEXT)"))
        with capture_logs() as logs:
            state = world_state(ledger, run_id, snapshots=True, every=2)
        assert state == fold_patches(counting_deltas(8))
        events = {entry["event"] for entry in logs}
        assert {"snapshot.unavailable", "snapshot.not_saved"} <= events


def test_a_read_only_copy_whose_table_cannot_be_looked_at_folds_from_the_events(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened read-only, a database SQLite cannot even inspect is logged, not raised."""
    with Ledger.open(sqlite_url) as ledger:
        run_id = record_deltas(ledger, counting_deltas(8))
    broken = create_engine("sqlite:///file:/nonexistent/dir/x.db?mode=ro&uri=true")
    monkeypatch.setattr(snapshots_module, "engine_for", lambda _ledger: broken)
    with Ledger.open(sqlite_url, read_only=True) as ledger, capture_logs() as logs:
        state = world_state(ledger, run_id, snapshots=True, every=2)
    assert state == fold_patches(counting_deltas(8))
    assert "snapshot.unavailable" in {entry["event"] for entry in logs}


def test_snapshots_persist_in_a_sqlite_file_across_ledger_openings(sqlite_url: str) -> None:
    """Snapshots live in the ledger's own database file and serve a later process."""
    with Ledger.open(sqlite_url) as ledger:
        run_id = record_deltas(ledger, counting_deltas(10))
        take_snapshots(ledger, run_id, every=5)
    with Ledger.open(sqlite_url) as reopened:
        assert len(SnapshotStore(reopened).positions(run_id)) == 2
        assert world_state(reopened, run_id, snapshots=True) == fold_patches(counting_deltas(10))


def test_warnings_go_to_the_ledgers_event_logger_when_it_has_one(sqlite_url: str) -> None:
    """A ledger opened with an EventLogger (the CLI's -v) gets the snapshot warnings."""
    stream = io.StringIO()
    with Ledger.open(sqlite_url, log=EventLogger(json=True, stream=stream)) as ledger:
        run_id = record_deltas(ledger, counting_deltas(6))
        take_snapshots(ledger, run_id, every=3)
        set_row(ledger, run_id, rows(ledger, run_id)[-1][0], checksum="0" * 64)
        stream.truncate(0)
        world_state(ledger, run_id, snapshots=True, every=None)
    assert '"event": "snapshot.ignored"' in stream.getvalue()
    assert run_id in stream.getvalue()


def test_the_library_is_silent_when_nothing_configured_logging(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without an EventLogger or a structlog configuration, a fallback prints nothing."""
    structlog.reset_defaults()
    with Ledger.open(sqlite_url) as ledger:
        run_id = record_deltas(ledger, counting_deltas(6))
        take_snapshots(ledger, run_id, every=3)
        set_row(ledger, run_id, rows(ledger, run_id)[-1][0], checksum="0" * 64)
        capsys.readouterr()
        assert world_state(ledger, run_id, snapshots=True, every=None) == fold_patches(
            counting_deltas(6)
        )
    assert capsys.readouterr() == ("", "")


# Event hashes and re-folding --------------------------------------------------------------


def test_a_snapshot_taken_at_another_event_is_skipped_and_logged(ledger: Ledger) -> None:
    """A row whose event hash is not the hash of the event at its position is not used."""
    run_id = record_deltas(ledger, counting_deltas(12))
    take_snapshots(ledger, run_id, every=4)
    full = world_state(ledger, run_id)
    newest = rows(ledger, run_id)[-1][0]
    set_row(ledger, run_id, newest, event_hash="ab" * 32)
    with capture_logs() as logs:
        assert world_state(ledger, run_id, snapshots=True, every=None) == full
    [(rid, position, reason)] = warnings_named(logs, "snapshot.ignored")
    assert (rid, position) == (run_id, newest)
    assert reason.startswith("event hash mismatch: taken at event abababababab")


def test_verify_snapshots_names_a_forged_state_with_a_recomputed_checksum(ledger: Ledger) -> None:
    """Reads trust a forged row whose checksum was recomputed; re-folding the events does not."""
    run_id = record_deltas(ledger, counting_deltas(12))
    take_snapshots(ledger, run_id, every=4)
    assert verify_snapshots(ledger, run_id).ok
    newest = rows(ledger, run_id)[-1][0]
    forged = '{"n":-1}'
    set_row(ledger, run_id, newest, state=forged, checksum=hashlib.sha256(b'{"n":-1}').hexdigest())
    folded = fold_world_state(ledger, run_id, newest, snapshots=True, every=None)
    assert folded.snapshot is not None
    assert folded.state == {"n": -1}
    [problem] = verify_snapshots(ledger).problems
    assert (problem.run_id, problem.position, problem.reason) == (
        run_id,
        newest,
        "snapshot state differs",
    )
    assert problem.detail.startswith("/k0: the snapshot holds nothing, the events fold to ")


def test_saving_a_snapshot_where_no_event_is_stored_is_refused(ledger: Ledger) -> None:
    """A snapshot is bound to the event at its position, so there must be one (or position 0)."""
    run_id = record_deltas(ledger, counting_deltas(3))
    last = ledger.run(run_id).event_count
    store = SnapshotStore(ledger)
    store.save(run_id, 0, 0, {})
    with pytest.raises(PositionOutOfRangeError, match=f"0 to {last}"):
        store.save(run_id, last + 1, 3, {"n": 2})
    assert store.positions(run_id) == [0]


def big_deltas(count: int) -> list[dict[str, Any]]:
    """Deltas that build a world state of several kilobytes (it is stored packed)."""
    return [{f"item{i}": {"text": f"entry {i} " * 40, "n": i}} for i in range(count)]


def packed_rows(ledger: Ledger, run_id: str) -> list[tuple[Any, ...]]:
    """(position, state, state_packed) of each snapshot row of a run."""
    with engine_for(ledger).connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                text(
                    "SELECT position, state, state_packed FROM agentledger_snapshots "
                    "WHERE run_id = :r ORDER BY position"
                ),
                {"r": run_id},
            )
        ]


def test_a_large_state_is_stored_packed_and_reads_back_the_same(ledger: Ledger) -> None:
    """States over PACK_OVER bytes are packed (a fraction of their JSON); small ones stay text."""
    run_id = record_deltas(ledger, big_deltas(12))
    small_id = record_deltas(ledger, counting_deltas(12))
    take_snapshots(ledger, run_id, every=4)
    take_snapshots(ledger, small_id, every=4)
    full = world_state(ledger, run_id)
    stored = packed_rows(ledger, run_id)
    assert stored
    for position, state, packed in stored:
        canonical = canonical_json(world_state(ledger, run_id, position))
        assert len(canonical) > PACK_OVER
        assert state == ""
        assert len(packed) < len(canonical) / 4
        assert unpack_blob("zstd-d1", packed) == canonical
    assert all(state and packed is None for _, state, packed in packed_rows(ledger, small_id))
    assert world_state(ledger, run_id, snapshots=True, every=None) == full


def test_a_tampered_packed_state_is_skipped_and_logged(ledger: Ledger) -> None:
    """Packed bytes that do not unpack, or unpack to another state, are never trusted."""
    run_id = record_deltas(ledger, big_deltas(12))
    take_snapshots(ledger, run_id, every=4)
    full = world_state(ledger, run_id)
    positions = [row[0] for row in packed_rows(ledger, run_id)]
    other = pack_blob(canonical_json({"forged": True} | {str(i): "x" * 90 for i in range(20)}))[1]
    set_row(ledger, run_id, positions[-1], state_packed=b"\x28\xb5\x2f\xfd garbage")
    set_row(ledger, run_id, positions[-2], state_packed=other)
    with capture_logs() as logs:
        assert world_state(ledger, run_id, snapshots=True, every=None) == full
    reasons = {w[1]: w[2] for w in warnings_named(logs, "snapshot.ignored")}
    assert reasons[positions[-2]] == "checksum mismatch"
    assert reasons[positions[-1]].startswith("unreadable row")


def test_a_table_from_before_packing_gains_its_column(sqlite_url: str) -> None:
    """An older snapshot table (no state_packed column) is upgraded and its rows still read."""
    with Ledger.open(sqlite_url) as ledger:
        run_id = record_deltas(ledger, big_deltas(8))
        full = world_state(ledger, run_id)
        with engine_for(ledger).begin() as connection:
            connection.execute(
                text(
                    "CREATE TABLE agentledger_snapshots (run_id VARCHAR(64) NOT NULL, "
                    "position INTEGER NOT NULL, deltas INTEGER NOT NULL, state TEXT NOT NULL, "
                    "checksum VARCHAR(64) NOT NULL, event_hash VARCHAR(64), created DATETIME, "
                    "PRIMARY KEY (run_id, position))"
                )
            )
        take_snapshots(ledger, run_id, every=4)
        assert [row[2] is not None for row in packed_rows(ledger, run_id)] == [True, True]
        assert world_state(ledger, run_id, snapshots=True, every=None) == full
        engine_for(ledger).dispose()
