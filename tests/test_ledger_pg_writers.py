"""Concurrent writers on PostgreSQL: no table lock, and a ledger-wide order that skips nothing.

Writers insert without eventsourcing's ``LOCK TABLE``; the order followers read is assigned
after commit (``ledger/_order_pg.py``). These tests run eight writer processes while the read
models and the transparency log follow, hold one writer's transaction open while another run is
written, and open a ledger of the previous schema version.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent

from agentledger.ledger import Ledger, UsageError
from agentledger.ledger.signed_note import generate_key
from agentledger.projections import ReadModelProjector

pytestmark = pytest.mark.postgres

WRITERS = 8
RUNS_EACH = 3
STEPS = 6
WRITE_RUNS = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agentledger.ledger import Ledger
    url, go, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    runs, steps = int(sys.argv[4]), int(sys.argv[5])
    with Ledger.open(url) as ledger:
        while not go.exists():
            time.sleep(0.005)
        for r in range(runs):
            with ledger.record_run(name, input=r) as run:
                for s in range(steps):
                    with run.batch():
                        run.model_call(
                            provider="p", model="m",
                            messages=[{"role": "user", "content": f"{name} {r} {s}"}],
                            response={"role": "assistant", "content": "ok"},
                        )
                        run.delta({name: {str(r): s}})
                    run.tool("lookup", {"step": s}, result={"ok": True})
                    time.sleep(0.03)  # a model's think time: the writers overlap the followers
    """
)


def _schema(url: str) -> tuple[str, str]:
    base, schema = url.split("?schema=")
    return base, schema


def start_writers(url: str, go: Path) -> list[subprocess.Popen[str]]:
    """WRITERS processes that each record RUNS_EACH runs once `go` exists."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", WRITE_RUNS, url, str(go), f"w{i}", str(RUNS_EACH), str(STEPS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WRITERS)
    ]


def test_eight_writer_processes_skip_nothing_for_read_models_and_the_log(
    pg_url: str, tmp_path: Path
) -> None:
    """Followers reading while 8 processes write see every event once, each run in order."""
    go = tmp_path / "go"
    with Ledger.open(pg_url) as ledger, ReadModelProjector(ledger) as projector:
        writers = start_writers(pg_url, go)
        projector.catch_up()  # the read models' tables exist before anything is written
        ledger.integrate()
        time.sleep(1.0)
        go.touch()
        seen: list[tuple[int, str, int]] = []
        log_sizes: list[int] = []
        while True:
            running = any(w.poll() is None for w in writers)
            after = seen[-1][0] if seen else 0
            seen += [(n, e.run_id, e.position) for n, e in ledger.notifications(after, 37)]
            projector.catch_up(batch_size=23)
            log_sizes.append(ledger.integrate().size)
            if not running:
                break
        ended = [(w.returncode, w.communicate()[1]) for w in writers]
        failed = [err for code, err in ended if code != 0]
        assert failed == []
        while batch := ledger.notifications(seen[-1][0], 500):
            seen += [(n, e.run_id, e.position) for n, e in batch]
        projector.catch_up()
        head = ledger.integrate()

        runs = ledger.run_ids()
        total = sum(len(ledger.events(r)) for r in runs)
        assert len(runs) == WRITERS * RUNS_EACH
        assert [n for n, _, _ in seen] == list(range(1, total + 1)), "a number skipped or repeated"
        assert len({(r, p) for _, r, p in seen}) == total, "an event seen twice"
        by_run: dict[str, list[int]] = {}
        for _, run_id, position in seen:
            by_run.setdefault(run_id, []).append(position)
        for run_id, positions in by_run.items():
            assert positions == list(range(1, len(ledger.events(run_id)) + 1)), run_id
        assert len(log_sizes) > 3, "the followers did not read while the writers wrote"

        assert (projector.position(), projector.lag()) == (total, 0)
        followed = projector.table_rows()
        assert projector.rebuild() == total
        assert projector.table_rows() == followed, "following live differs from a rebuild"

        assert head.size == total
        log = ledger.transparency_log
        assert [(e.nid, e.run_id, e.position) for e in log.entries()] == seen
        signer, verifier = generate_key("writers.example/log")
        note = ledger.checkpoint(signer)
        report = ledger.verify(checkpoint=note, verifier_keys=[verifier])
        assert report.ok, [str(p) for p in report.log_problems]


@pytest.fixture
def other_url(pg_url: str) -> Any:
    """A second schema on the same server, dropped after the test."""
    base, schema = _schema(pg_url)
    yield f"{base}?schema={schema}_b"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}_b" CASCADE')


def write_sets_of_a_run(url: str) -> list[tuple[list[StoredEvent], dict[str, Any]]]:
    """What a ledger's recorder was asked to write for a small run, elsewhere."""
    with Ledger.open(url) as ledger:
        recorder = ledger.recorder
        insert = recorder.insert_events
        kept: list[tuple[list[StoredEvent], dict[str, Any]]] = []

        def keep(stored: Any, **kwargs: Any) -> Any:
            kept.append((list(stored), kwargs))
            return insert(stored, **kwargs)

        recorder.insert_events = keep
        with ledger.record_run("held", input="x") as run:
            run.delta({"held": True})
    return kept


def test_a_writer_of_another_run_does_not_wait_for_an_open_insert(
    pg_url: str, other_url: str
) -> None:
    """An insert transaction left open blocks no other run's commit and holds no table lock."""
    sets = write_sets_of_a_run(other_url)
    with Ledger.open(pg_url) as ledger:
        recorder = ledger.recorder
        inserted, release = threading.Event(), threading.Event()

        def hold_open() -> None:  # the recorder's own statements, in one open transaction
            with recorder.datastore.transaction(commit=True) as curs:
                for stored, kwargs in sets:
                    recorder._insert_events(curs, stored, **kwargs)
                    recorder._insert_stored_events(curs, stored, **kwargs)
                inserted.set()
                release.wait(30)

        holder = threading.Thread(target=hold_open)
        holder.start()
        try:
            assert inserted.wait(10)
            base, schema = _schema(pg_url)
            with psycopg.connect(base, autocommit=True) as conn:
                modes = conn.execute(
                    "SELECT l.mode FROM pg_locks l JOIN pg_class c ON l.relation = c.oid "
                    "JOIN pg_namespace n ON c.relnamespace = n.oid "
                    "WHERE n.nspname = %s AND c.relname = 'agentledger_events' AND l.granted",
                    (schema,),
                ).fetchall()
            assert modes == [("RowExclusiveLock",)], "the open insert holds only row locks"
            began = time.perf_counter()
            with ledger.record_run("second", input="y") as second:
                second.delta({"b": 2})
            assert time.perf_counter() - began < 10
            before = ledger.max_notification_id()
            assert [e.run_id for _, e in ledger.notifications(0, 100)] == [second.run_id] * 3
        finally:
            release.set()
            holder.join()
        assert ledger.max_notification_id() == before + sum(len(st) for st, _ in sets)
        assert ledger.verify().ok


def _downgrade_to_version_5(url: str, *, spread: bool = False) -> None:
    """Take a schema back to how version 5 stored events: no xact_id, no order tables.

    `spread` doubles every notification id, as ids left unused by rolled-back writes would.
    """
    base, schema = _schema(url)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("DROP TABLE agentledger_event_order, agentledger_event_order_horizon")
        conn.execute("ALTER TABLE agentledger_events DROP COLUMN xact_id")
        if spread:
            conn.execute("ALTER TABLE agentledger_events DISABLE TRIGGER USER")
            conn.execute("UPDATE agentledger_events SET notification_id = -notification_id")
            conn.execute("UPDATE agentledger_events SET notification_id = -2 * notification_id")
            conn.execute("ALTER TABLE agentledger_events ENABLE TRIGGER USER")
            conn.execute("SELECT setval('agentledger_events_notification_id_seq', 1000)")
        conn.execute("UPDATE agentledger_schema SET version = 5")


def record(ledger: Ledger, name: str) -> None:
    """One small run."""
    with ledger.record_run(name, input=name) as run:
        run.delta({name: True})
        run.tool("lookup", {"q": name}, result={"ok": True})


def test_a_version_5_ledger_keeps_its_notification_ids_gaps_included(pg_url: str) -> None:
    """Rows written under the table lock keep their ids as their order; new ones follow on."""
    with Ledger.open(pg_url) as ledger:
        record(ledger, "old-1")
        record(ledger, "old-2")
        count = ledger.max_notification_id()
    _downgrade_to_version_5(pg_url, spread=True)
    with Ledger.open(pg_url) as ledger:
        old = [n for n, _ in ledger.notifications(0, 100)]
        assert old == [2 * i for i in range(1, count + 1)]
        record(ledger, "new")
        new = [n for n, _ in ledger.notifications(old[-1], 100)]
        assert new == list(range(old[-1] + 1, old[-1] + 1 + len(new)))
        assert len(new) == 5
        assert ledger.verify().ok


def test_a_version_5_ledgers_read_models_and_checkpoints_carry_on(pg_url: str) -> None:
    """Read-model positions and a checkpoint signed before the upgrade stay valid after it."""
    with Ledger.open(pg_url) as ledger, ReadModelProjector(ledger) as projector:
        record(ledger, "old-1")
        record(ledger, "old-2")
        old = [(n, e.run_id, e.position) for n, e in ledger.notifications(0, 100)]
        projector.catch_up()
        signer, verifier = generate_key("old.example/log")
        note = ledger.checkpoint(signer)
    _downgrade_to_version_5(pg_url)
    with Ledger.open(pg_url) as ledger, ReadModelProjector(ledger) as projector:
        record(ledger, "new")
        found = [(n, e.run_id, e.position) for n, e in ledger.notifications(0, 100)]
        assert found[: len(old)] == old
        assert projector.position() == old[-1][0]
        assert projector.catch_up() == len(found) - len(old)
        followed = projector.table_rows()
        projector.rebuild()
        assert projector.table_rows() == followed
        assert ledger.integrate().size == len(found)
        report = ledger.verify(checkpoint=note, verifier_keys=[verifier])
        assert report.ok, [str(p) for p in report.log_problems]


def test_the_recorder_refuses_a_subscription_that_would_never_wake(pg_url: str) -> None:
    """Inserts send no NOTIFY, so eventsourcing's subscribe is refused with what to use."""
    with Ledger.open(pg_url) as ledger, pytest.raises(UsageError, match=r"Ledger\.notifications"):
        ledger.recorder.subscribe()


def test_a_row_slipped_in_below_the_numbering_horizon_is_found_hidden(pg_url: str) -> None:
    """A row written with an old transaction id is never numbered; verify says it is hidden."""
    with Ledger.open(pg_url) as ledger:
        record(ledger, "honest")
        signer, verifier = generate_key("hidden.example/log")
        note = ledger.checkpoint(signer)
        assert ledger.verify(checkpoint=note, verifier_keys=[verifier]).ok
        base, schema = _schema(pg_url)
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                f'INSERT INTO "{schema}".agentledger_events (originator_id, originator_version, '
                "topic, state, xact_id) SELECT originator_id, originator_version + 100, topic, "
                f"state, '1' FROM \"{schema}\".agentledger_events ORDER BY notification_id LIMIT 1"
            )
        count = ledger.max_notification_id()
        assert [n for n, _ in ledger.notifications(0, 100)] == list(range(1, count + 1))
        report = ledger.verify(checkpoint=note, verifier_keys=[verifier])
        assert not report.ok
        assert any("hidden from the log" in str(p) for p in report.log_problems)
