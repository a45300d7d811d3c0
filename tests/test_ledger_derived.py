"""Derived data is checked, never trusted: the runs index, snapshots and the SQL read models.

An attacker with full database access (sqlite3 or psycopg, triggers dropped where needed) edits
the runs index and its tags, forges world-state snapshots with a recomputed checksum, and edits
read-model rows. ``agentledger verify`` must name each index edit (run, field, what the index
says, what the events say), ``verify --deep`` each forged snapshot, and ``agentledger
projections verify`` each edited read-model row; `state` and `stats` say on stderr when their
answer rests on derived data that was not re-verified. The limits of what the events alone can
show (a cut tail that took the end event, under a rewritten index) are tested as limits.
Runs on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from test_ledger_tamper import Database as TamperDatabase

from agentledger.cli import main
from agentledger.ledger import Ledger, Problem, SequentialIds, StepClock, canonical_json
from agentledger.ledger._mapper import seal
from agentledger.projections import (
    ReadModelProjector,
    fold_world_state,
    take_snapshots,
    verify_read_models,
    verify_snapshots,
    world_state,
)
from agentledger.projections._snapshots import checksum_of
from agentledger.projections._sql import engine_for

# The attacker's view of the database ----------------------------------------------------------


@dataclass
class Database(TamperDatabase):
    """The attacker's connection of the tamper tests, plus edits of the runs index."""

    def set_index(self, run_id: str, **values: Any) -> None:
        """Overwrite columns of a run's row in the runs index."""
        assignments = ", ".join(f"{column} = ?" for column in values)
        self.execute(
            f"UPDATE agentledger_runs SET {assignments} WHERE run_id = ?",
            [*values.values(), run_id],
        )


# The recorded ledger ---------------------------------------------------------------------------


@dataclass
class Recorded:
    """A ledger with an audited run, a bystander run, and the attacker's connection."""

    url: str
    db: Database
    run_id: str
    bystander: str
    count: int
    deltas: list[int]

    def ledger(self) -> Ledger:
        """Open the ledger (close it, or use it in a with block)."""
        return Ledger.open(self.url)

    def problems(self, run_id: str | None = None) -> list[Problem]:
        """What `Ledger.verify` reports."""
        with self.ledger() as ledger:
            return ledger.verify(run_id).problems

    def cli(self, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
        """Run ``agentledger --db URL ARGV`` in-process: status, stdout, stderr."""
        capsys.readouterr()
        status = main(["--db", self.url, *argv])
        out, err = capsys.readouterr()
        return status, out, err


def record(url: str) -> Recorded:
    """A completed, tagged run of eight deltas (a plan before each) and a bystander run."""
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds(url)) as ledger:
        with ledger.record_run("auditee", input="Is the harbour walk on?", tags=["audit"]) as run:
            deltas = []
            for index in range(8):
                run.plan({"step": index})
                deltas.append(run.delta({"step": index, f"k{index % 3}": index}))
            run.answer("Yes: sunny and 19 C.", evidence_ids=["wx"])
        with ledger.record_run("bystander", input={"q": 1.0, "a": [1, 2]}) as other:
            other.answer("hi")
        count = len(ledger.events(run.run_id))
    db = Database(url, "sqlite" if url.startswith("sqlite") else "postgresql")
    return Recorded(url, db, run.run_id, other.run_id, count, deltas)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def recorded(request: pytest.FixtureRequest) -> Iterator[Recorded]:
    """A recorded ledger on a SQLite file or on PostgreSQL."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    found = record(url)
    yield found
    found.db.close()


def index_problems(problems: list[Problem]) -> list[tuple[int, str, str | None]]:
    """(position, reason, field) of each problem."""
    return [(p.position, p.reason, p.field) for p in problems]


# The runs index --------------------------------------------------------------------------------


def test_an_untouched_ledger_has_no_index_problems(recorded: Recorded) -> None:
    """Index rows written by recording (and by an import) agree with the events."""
    assert recorded.problems() == []
    assert recorded.problems(recorded.run_id) == []


@pytest.mark.parametrize(
    ("column", "value", "name", "says"),
    [
        ("status", "failed", "status", "the runs index says 'failed', the events say 'completed'"),
        ("agent", "someone-else", "agent", "says 'someone-else', the events say 'auditee'"),
        ("head_hash", "ab" * 32, "head hash", "says 'abababababab', the events say"),
        ("started_at", "2001-01-01T00:00:00.000000Z", "started at", "'2001-01-01T00:00"),
        ("ended_at", "2001-01-01T00:00:00.000000Z", "ended at", "'2001-01-01T00:00"),
        ("input_preview", "Is the walk off?", "input preview", "'Is the walk off?'"),
        ("parent_run_id", "f" * 32, "parent run id", "'ffffffff"),
    ],
)
def test_an_edited_index_field_is_named_with_both_values(
    recorded: Recorded, column: str, value: str, name: str, says: str
) -> None:
    """Each edited column of a run's index row is one "index mismatch" naming the field."""
    recorded.db.set_index(recorded.run_id, **{column: value})
    problems = recorded.problems()
    assert [(p.run_id, p.reason, p.field) for p in problems] == [
        (recorded.run_id, "index mismatch", name)
    ]
    assert says in problems[0].detail
    assert str(problems[0]).startswith(f"run {recorded.run_id} position ")


def test_an_index_counting_fewer_events_is_named(recorded: Recorded) -> None:
    """A last position below the events' (with its head) is a mismatch, not a silent cut."""
    with recorded.ledger() as ledger:
        earlier = ledger.events(recorded.run_id)[-3]
    recorded.db.set_index(
        recorded.run_id, last_position=earlier.position, head_hash=earlier.hash, status="running"
    )
    found = index_problems(recorded.problems())
    last = recorded.count
    assert found == [
        (last, "index mismatch", "event count"),
        (last, "index mismatch", "head hash"),
        (last, "index mismatch", "status"),
    ]


def test_an_index_counting_more_events_reads_as_a_cut_tail(recorded: Recorded) -> None:
    """A last position past the events' is reported as the truncation it would hide."""
    recorded.db.set_index(recorded.run_id, last_position=recorded.count + 3)
    [problem] = recorded.problems()
    assert (problem.position, problem.reason) == (recorded.count + 1, "tail truncated")
    assert f"recorded {recorded.count + 3} events; {recorded.count} remain" in problem.detail


@pytest.mark.parametrize(
    ("statement", "change"),
    [
        ("DELETE FROM agentledger_run_tags WHERE run_id = ?", "removed ['audit']"),
        ("INSERT INTO agentledger_run_tags (tag, run_id) VALUES ('vip', ?)", "added ['vip']"),
    ],
)
def test_a_removed_or_added_tag_is_named(recorded: Recorded, statement: str, change: str) -> None:
    """Tags come from RunStarted: a missing or extra tag row is an index mismatch on tags."""
    recorded.db.execute(statement, [recorded.run_id])
    [problem] = recorded.problems(recorded.run_id)
    assert (problem.reason, problem.field, problem.position) == ("index mismatch", "tags", 1)
    assert change in problem.detail


def test_a_run_without_an_index_row_and_a_row_without_events_are_named(
    recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deleted index row, and a forged row for a run that has no events, both show."""
    recorded.db.execute("DELETE FROM agentledger_runs WHERE run_id = ?", [recorded.bystander])
    ghost = "00000000-0000-4000-8000-00000000dead"
    recorded.db.execute(
        "INSERT INTO agentledger_runs (run_id, agent, status, started_at, ended_at, "
        "last_position, head_hash, input_preview, parent_run_id, updated_at) "
        "VALUES (?, 'ghost', 'completed', '2026-01-01', NULL, 4, ?, 'x', NULL, '2026-01-01')",
        [ghost, "0" * 64],
    )
    found = {(p.run_id, p.reason) for p in recorded.problems()}
    assert found == {(recorded.bystander, "index row missing"), (ghost, "run missing")}
    status, out, _ = recorded.cli(capsys, "verify")
    assert status == 1
    assert f"BROKEN run {ghost} position 1: run missing" in out
    assert f"BROKEN run {recorded.bystander} position 1: index row missing" in out


def test_a_rehashed_final_event_is_caught_by_the_index_head(recorded: Recorded) -> None:
    """Editing the last event and recomputing its stored hash leaves the chain whole.

    Nothing follows the last event to link to it, so only the head hash the runs index kept
    shows the edit (an attacker who also rewrites the index row is stopped only by a checkpoint).
    """
    with recorded.ledger() as ledger:
        last = ledger.events(recorded.run_id)[-1]
    assert last.kind == "RunCompleted"
    payload = dict(last.payload) | {"outcome": "forged"}
    _, state = seal(
        run_id=last.run_id,
        position=last.position,
        kind=last.kind,
        version=last.version,
        timestamp=last.timestamp,
        event_id=last.event_id,
        prev=last.prev,
        payload_jcs=canonical_json(payload),
    )
    recorded.db.drop_triggers()
    recorded.db.set_packed_state(recorded.run_id, last.position, state)
    assert index_problems(recorded.problems()) == [(last.position, "index mismatch", "head hash")]


def test_a_cut_tail_under_a_matching_index_is_beyond_the_events_alone(recorded: Recorded) -> None:
    """The limit, stated as a test: cut the end and rewrite the index, and no event says so.

    Deleting the last three events (the RunCompleted among them) and rewriting the index row
    to the new last position, head hash, status 'running' and no end time leaves a valid chain
    that reads like a run still recording. Only a signed checkpoint can show this cut; the
    following tests show the outside evidence that can (a fork, a snapshot, a read model).
    """
    cut_to = cut_tail(recorded, 3)
    assert recorded.problems() == []
    with recorded.ledger() as ledger:
        assert ledger.run(recorded.run_id).event_count == cut_to


def cut_tail(recorded: Recorded, events: int) -> int:
    """Delete a run's last `events` events and rewrite its index row to match; the new end."""
    kept = recorded.count - events
    recorded.db.drop_triggers()
    recorded.db.delete_events(recorded.run_id, range(kept + 1, recorded.count + 1))
    with recorded.ledger() as ledger:
        head = ledger.events(recorded.run_id)[-1].hash
    recorded.db.set_index(
        recorded.run_id, last_position=kept, head_hash=head, status="running", ended_at=None
    )
    return kept


def test_a_half_rewritten_index_still_shows_the_cut(recorded: Recorded) -> None:
    """The same cut with the old end time left in the index shows as an ended-at mismatch."""
    kept = recorded.count - 3
    recorded.db.drop_triggers()
    recorded.db.delete_events(recorded.run_id, range(kept + 1, recorded.count + 1))
    with recorded.ledger() as ledger:
        head = ledger.events(recorded.run_id)[-1].hash
    recorded.db.set_index(recorded.run_id, last_position=kept, head_hash=head, status="running")
    assert index_problems(recorded.problems()) == [(kept, "index mismatch", "ended at")]


def test_a_fork_from_past_the_cut_shows_the_cut(recorded: Recorded) -> None:
    """A run forked from a later position of the cut run proves that position existed."""
    with (
        recorded.ledger() as ledger,
        ledger.record_run(
            "auditee",
            input="again",
            parent_run_id=recorded.run_id,
            parent_position=recorded.count - 1,
            relation="fork",
        ) as child,
    ):
        child.answer("forked")
    kept = cut_tail(recorded, 3)
    for problems in (recorded.problems(), recorded.problems(recorded.run_id)):
        [problem] = problems
        assert (problem.run_id, problem.position) == (recorded.run_id, kept + 1)
        assert problem.reason == "tail truncated"
        assert f"run {child.run_id} was started from position {recorded.count - 1}" in (
            problem.detail
        )


def test_state_ends_where_the_events_end_not_where_the_index_says(recorded: Recorded) -> None:
    """`world_state` without a position folds to the last stored event, whatever the index says."""
    with recorded.ledger() as ledger:
        full = world_state(ledger, recorded.run_id)
        recorded.db.set_index(recorded.run_id, last_position=recorded.deltas[2])
        assert world_state(ledger, recorded.run_id) == full
        engine_for(ledger).dispose()


# Snapshots -------------------------------------------------------------------------------------


def snapshot_rows(recorded: Recorded) -> list[tuple[Any, ...]]:
    """(position, deltas, state, checksum, event_hash) of the audited run's snapshots."""
    return recorded.db.execute(
        "SELECT position, deltas, state, checksum, event_hash FROM agentledger_snapshots "
        "WHERE run_id = ? ORDER BY position",
        [recorded.run_id],
    )


def forge_snapshot(recorded: Recorded, position: int, state: dict[str, Any], **extra: Any) -> None:
    """Replace a snapshot's state with `state` (as text), its checksum recomputed to match."""
    text = canonical_json(state)
    values = {"state": text.decode(), "state_packed": None, "checksum": checksum_of(text), **extra}
    assignments = ", ".join(f"{column} = ?" for column in values)
    recorded.db.execute(
        f"UPDATE agentledger_snapshots SET {assignments} WHERE run_id = ? AND position = ?",
        [*values.values(), recorded.run_id, position],
    )


@pytest.fixture
def snapshotted(recorded: Recorded) -> Recorded:
    """The recorded ledger with a snapshot after every second delta of the audited run."""
    with recorded.ledger() as ledger:
        assert take_snapshots(ledger, recorded.run_id, every=2) == 4
        engine_for(ledger).dispose()
    return recorded


def test_snapshots_carry_the_hash_of_the_event_they_end_at(snapshotted: Recorded) -> None:
    """Each snapshot row holds the hash of the event at its position; --deep finds them sound."""
    rows = snapshot_rows(snapshotted)
    with snapshotted.ledger() as ledger:
        hashes = {e.position: e.hash for e in ledger.events(snapshotted.run_id)}
        assert [(r[0], r[4]) for r in rows] == [(r[0], hashes[r[0]]) for r in rows]
        report = verify_snapshots(ledger)
        engine_for(ledger).dispose()
    assert (report.ok, report.snapshots_checked, report.without_event_hash) == (True, 4, 0)


def test_a_forged_snapshot_with_a_recomputed_checksum_is_named_by_verify_deep(
    snapshotted: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """A forged state passes the checksum and the event hash, so `state` uses it, and says so.

    ``verify --deep`` re-folds the events and names the run, the position and the change.
    """
    position = snapshot_rows(snapshotted)[-1][0]
    forge_snapshot(snapshotted, position, {"step": 99, "forged": True})
    status, out, err = snapshotted.cli(capsys, "state", snapshotted.run_id, "--at", str(position))
    assert (status, json.loads(out)) == (0, {"step": 99, "forged": True})
    assert f"started from the snapshot at position {position}" in err
    assert f"agentledger verify --deep {snapshotted.run_id}" in err
    status, out, _ = snapshotted.cli(capsys, "verify")
    assert status == 0, "the events are intact: only --deep looks at snapshots"
    status, out, _ = snapshotted.cli(capsys, "verify", "--deep")
    assert status == 1
    line = f"BROKEN run {snapshotted.run_id} position {position}: snapshot state differs"
    assert line in out
    assert "/forged: the snapshot holds true, the events fold to nothing" in out
    assert "snapshots BROKEN (1): 4 snapshots re-folded" in out


def test_a_forged_delta_count_is_named(snapshotted: Recorded) -> None:
    """A snapshot claiming another number of deltas behind it is reported."""
    position, deltas = snapshot_rows(snapshotted)[1][:2]
    snapshotted.db.execute(
        "UPDATE agentledger_snapshots SET deltas = ? WHERE run_id = ? AND position = ?",
        [deltas + 5, snapshotted.run_id, position],
    )
    with snapshotted.ledger() as ledger:
        [problem] = verify_snapshots(ledger, snapshotted.run_id).problems
        engine_for(ledger).dispose()
    assert (problem.position, problem.reason) == (position, "snapshot delta count differs")
    assert f"counts {deltas + 5} deltas, the events {deltas}" in problem.detail


def test_a_snapshot_moved_to_another_event_is_ignored_by_reads_and_named(
    snapshotted: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """A snapshot whose event hash is not the event's at its position is not used by `state`."""
    rows = snapshot_rows(snapshotted)
    position = rows[-1][0]
    forge_snapshot(snapshotted, position, {"step": 99}, event_hash=rows[0][4])
    with snapshotted.ledger() as ledger:
        folded = fold_world_state(ledger, snapshotted.run_id, position, snapshots=True, every=None)
        assert folded.snapshot is not None
        assert folded.snapshot.position == rows[-2][0]
        assert folded.state == world_state(ledger, snapshotted.run_id, position)
        engine_for(ledger).dispose()
    status, out, _ = snapshotted.cli(capsys, "verify", "--deep", snapshotted.run_id)
    assert status == 1
    assert f"position {position}: snapshot event hash differs" in out
    assert f"position {position}: snapshot state differs" in out


def test_a_snapshot_past_the_end_shows_a_cut_tail(snapshotted: Recorded) -> None:
    """After the cut of the limit test, the snapshot beyond the new end still tells."""
    last_snapshot = snapshot_rows(snapshotted)[-1][0]
    kept = cut_tail(snapshotted, snapshotted.count - last_snapshot + 1)
    assert snapshotted.problems() == []
    with snapshotted.ledger() as ledger:
        [problem] = verify_snapshots(ledger).problems
        engine_for(ledger).dispose()
    assert (problem.position, problem.reason) == (last_snapshot, "snapshot past end")
    assert f"the run's events end at {kept}" in problem.detail


def test_old_snapshots_without_an_event_hash_are_still_read_and_re_folded(
    snapshotted: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows from before the event hash serve reads as before; --deep re-folds them."""
    snapshotted.db.execute("UPDATE agentledger_snapshots SET event_hash = NULL")
    position = snapshot_rows(snapshotted)[-1][0]
    status, out, err = snapshotted.cli(capsys, "state", snapshotted.run_id, "--at", str(position))
    assert status == 0
    assert "written before snapshots carried an event hash" in err
    status, out, _ = snapshotted.cli(capsys, "verify", "--deep")
    assert status == 0
    assert "snapshots intact: 4 snapshots re-folded from the events (4 written before" in out
    forge_snapshot(snapshotted, position, {"step": -1})
    status, out, _ = snapshotted.cli(capsys, "verify", "--deep")
    assert status == 1
    assert f"position {position}: snapshot state differs (/k0: the snapshot holds nothing" in out


def test_a_snapshot_table_from_before_the_event_hash_gains_the_column(sqlite_url: str) -> None:
    """An old table (no event_hash column) is migrated on first use; its rows still serve."""
    found = record(sqlite_url)
    with Ledger.open(sqlite_url) as ledger:
        position = found.deltas[3]
        state = world_state(ledger, found.run_id, position)
        text = canonical_json(state)
        found.db.execute(
            "CREATE TABLE agentledger_snapshots (run_id VARCHAR(64) NOT NULL, position INTEGER "
            "NOT NULL, deltas INTEGER NOT NULL, state TEXT NOT NULL, checksum VARCHAR(64) NOT "
            "NULL, created DATETIME, PRIMARY KEY (run_id, position))"
        )
        found.db.execute(
            "INSERT INTO agentledger_snapshots (run_id, position, deltas, state, checksum) "
            "VALUES (?, ?, 4, ?, ?)",
            [found.run_id, position, text.decode(), checksum_of(text)],
        )
        folded = fold_world_state(ledger, found.run_id, snapshots=True, every=None)
        assert folded.snapshot is not None
        assert (folded.snapshot.position, folded.snapshot.event_hash) == (position, None)
        assert folded.state == world_state(ledger, found.run_id)
        assert verify_snapshots(ledger).ok
        engine_for(ledger).dispose()
    found.db.close()


def test_state_says_nothing_when_no_snapshot_served(
    recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """A state folded from the events alone prints no note."""
    status, out, err = recorded.cli(capsys, "state", recorded.run_id)
    assert (status, err) == (0, "")
    assert json.loads(out)["step"] == 7


# Read models -----------------------------------------------------------------------------------


@pytest.fixture
def projected(recorded: Recorded) -> Recorded:
    """The recorded ledger with its read models caught up."""
    with recorded.ledger() as ledger, ReadModelProjector(ledger) as projector:
        projector.catch_up()
    return recorded


def test_untouched_read_models_match_a_rebuild(
    projected: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """`projections verify` exits 0 and says how much it compared."""
    status, out, _ = projected.cli(capsys, "projections", "verify")
    assert status == 0
    assert "read models match the events:" in out
    assert "up to notification" in out


def test_edited_read_model_rows_are_each_named(
    projected: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Changed, deleted and added rows are each one DIFFERS line; the tables stay as edited."""
    db, run_id = projected.db, projected.run_id
    db.execute("UPDATE al_rm_runs SET status = 'failed', agent = 'x' WHERE run_id = ?", [run_id])
    db.execute("DELETE FROM al_rm_run_tags WHERE run_id = ?", [run_id])
    db.execute("INSERT INTO al_rm_run_tags (run_id, tag) VALUES (?, 'vip')", [projected.bystander])
    with projected.ledger() as ledger, ReadModelProjector(ledger) as projector:
        before = projector.table_rows()
    status, out, _ = projected.cli(capsys, "projections", "verify")
    assert status == 1
    lines = [line for line in out.splitlines() if line.startswith("DIFFERS ")]
    assert sorted(lines) == sorted(
        [
            (
                f"DIFFERS al_rm_runs run_id={run_id}: agent: read model 'x', events 'auditee'; "
                "status: read model 'failed', events 'completed'"
            ),
            (
                f"DIFFERS al_rm_run_tags run_id={run_id}, tag=audit: missing from the read models "
                "(the events make this row)"
            ),
            (
                f"DIFFERS al_rm_run_tags run_id={projected.bystander}, tag=vip: "
                "in the read models, but the events make no such row"
            ),
        ]
    )
    assert "read models DIFFER from the events: 3 rows" in out
    with projected.ledger() as ledger, ReadModelProjector(ledger) as projector:
        assert projector.table_rows() == before, "verify never changes the read models"


def test_stats_say_they_come_from_unverified_read_models(
    projected: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """`stats` (and --json, which stays valid JSON) notes on stderr that nothing was re-verified."""
    for argv in (["stats"], ["stats", "--json"], ["runs", "--model", "m"]):
        status, _out, err = projected.cli(capsys, *argv)
        assert status == 0
        assert "from read models (derived data), not re-verified" in err
        assert "agentledger projections verify" in err
    assert json.loads(projected.cli(capsys, "stats", "--json")[1]) == []


def test_a_lagging_read_model_is_compared_up_to_its_position(projected: Recorded) -> None:
    """Events recorded after the last catch-up are not differences; --json says where it stood."""
    with projected.ledger() as ledger:
        with ledger.record_run("late", input="x") as run:
            run.answer("y")
        report = verify_read_models(ledger)
        assert report.ok
        assert report.position < report.max_notification_id == ledger.max_notification_id()
        engine_for(ledger).dispose()


def test_a_cut_tail_shows_in_the_read_models(projected: Recorded) -> None:
    """The read models still count the events the limit test's cut removed."""
    kept = cut_tail(projected, 3)
    with projected.ledger() as ledger:
        report = verify_read_models(ledger)
        engine_for(ledger).dispose()
    runs = [d for d in report.differences if d.table == "al_rm_runs"]
    assert [d.key for d in runs] == [(("run_id", projected.run_id),)]
    changed = {name: (ours, theirs) for name, ours, theirs in runs[0].columns}
    assert changed["event_count"] == (projected.count, kept)
    assert changed["status"] == ("completed", "running")


def test_projections_verify_on_a_database_without_read_models_compares_nothing(
    recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """No read models yet: nothing to distrust, and none are created."""
    status, out, _ = recorded.cli(capsys, "projections", "verify", "--json")
    assert status == 0
    assert json.loads(out)["note"].startswith("no read models")
    tables = (
        recorded.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if recorded.db.kind == "sqlite"
        else recorded.db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?",
            [recorded.db.schema],
        )
    )
    assert not [t for (t,) in tables if t.startswith("al_rm_")]


def test_verify_deep_on_a_ledger_that_never_took_a_snapshot_checks_zero(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ledger whose runs never folded world state has no snapshot table: --deep finds nothing.

    It used to fail with "no snapshot table (read-only)", since verify opens the file read-only.
    """
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with Ledger.open(url) as ledger, ledger.record_run("plain", input="q") as run:
        run.answer("a")
    status = main(["--db", url, "verify", "--deep"])
    out = capsys.readouterr().out
    assert status == 0
    assert "intact: 1 run" in out
    assert "snapshots intact: 0 snapshots re-folded" in out
