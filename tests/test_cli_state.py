"""``agentledger state RUN [--at N] [--diff-from M]``: world state and diffs as JSON.

Runs the CLI in-process through `agentledger.cli._main.main` on a SQLite file recorded with the
public API, checking stdout (parsed as JSON), stderr and the exit status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from agentledger.cli._main import main
from agentledger.ledger import Ledger
from agentledger.projections import SnapshotStore, apply_patch, take_snapshots
from agentledger.projections._sql import engine_for

DELTAS: list[dict[str, Any]] = [
    {"goal": "tidy", "evidence": {"e1": "shelves fit"}},
    {"evidence": {"e2": "bins full"}, "status": "working"},
    {"status": None, "answer": "sort, bin, shelve", "evidence": {"e1": None}},
]


@dataclass
class Output:
    """What one CLI invocation returned and printed."""

    status: int
    out: str
    err: str

    def json(self) -> Any:
        """Stdout parsed as JSON."""
        return json.loads(self.out)


@dataclass
class Recorded:
    """A recorded run on a SQLite file: its URL, id and the positions of its deltas."""

    url: str
    run_id: str
    positions: list[int]
    last: int


@pytest.fixture
def recorded(sqlite_url: str) -> Recorded:
    """A completed run of three deltas (a plan event before each) in a SQLite file."""
    with Ledger.open(sqlite_url) as ledger:
        with ledger.record_run("planner", input="tidy the garage") as run:
            positions = []
            for index, delta in enumerate(DELTAS):
                run.plan({"step": index})
                positions.append(run.delta(delta))
        last = ledger.run(run.run_id).event_count
        engine_for(ledger).dispose()
    return Recorded(sqlite_url, run.run_id, positions, last)


@pytest.fixture
def state(recorded: Recorded, capsys: pytest.CaptureFixture[str]) -> Any:
    """Call ``agentledger --db URL state ARGS`` in-process."""

    def call(*args: str) -> Output:
        capsys.readouterr()
        status = main(["--db", recorded.url, "state", *args])
        captured = capsys.readouterr()
        return Output(status, captured.out, captured.err)

    return call


def fold(deltas: list[dict[str, Any]]) -> Any:
    """The state after `deltas`."""
    doc: Any = {}
    for delta in deltas:
        doc = apply_patch(doc, delta)
    return doc


def test_state_prints_the_final_world_state_as_json(state: Any, recorded: Recorded) -> None:
    """With no position, the state after the run's last event is printed."""
    done = state(recorded.run_id)
    assert (done.status, done.err) == (0, "")
    assert done.json() == {
        "goal": "tidy",
        "evidence": {"e2": "bins full"},
        "answer": "sort, bin, shelve",
    }


def test_state_at_a_position_travels_back_in_time(state: Any, recorded: Recorded) -> None:
    """``--at N`` prints the state after position N, including before any delta."""
    for index, position in enumerate(recorded.positions):
        assert state(recorded.run_id, "--at", str(position)).json() == fold(DELTAS[: index + 1])
    assert state(recorded.run_id, "--at", "0").json() == {}
    assert state(recorded.run_id, "--at", str(recorded.positions[0] - 1)).json() == {}


def test_state_accepts_a_unique_prefix_of_the_run_id(state: Any, recorded: Recorded) -> None:
    """A run may be named by the first characters of its id."""
    assert state(recorded.run_id[:8]).json() == state(recorded.run_id).json()


def test_diff_from_prints_the_merge_patch_between_two_positions(
    state: Any, recorded: Recorded
) -> None:
    """``--diff-from M --at N`` prints the RFC 7386 patch from the state at M to that at N."""
    first, _, third = recorded.positions
    done = state(recorded.run_id, "--diff-from", str(first), "--at", str(third))
    assert done.status == 0
    patch = done.json()
    assert patch == {
        "evidence": {"e1": None, "e2": "bins full"},
        "answer": "sort, bin, shelve",
    }
    assert apply_patch(fold(DELTAS[:1]), patch) == fold(DELTAS)


def test_diff_from_defaults_to_the_last_position_and_can_go_backwards(
    state: Any, recorded: Recorded
) -> None:
    """Without ``--at`` the diff ends at the last event; M after N gives the undoing patch."""
    assert state(recorded.run_id, "--diff-from", str(recorded.last)).json() == {}
    back = state(recorded.run_id, "--diff-from", str(recorded.last), "--at", "0").json()
    assert back == {"goal": None, "evidence": None, "answer": None}


def test_output_is_identical_with_snapshots_or_without(state: Any, recorded: Recorded) -> None:
    """Sorted keys: a state restored from a snapshot prints byte for byte like a full fold."""
    plain = state(recorded.run_id, "--no-snapshots").out
    with Ledger.open(recorded.url) as ledger:
        take_snapshots(ledger, recorded.run_id, every=1)
        assert len(SnapshotStore(ledger).positions(recorded.run_id)) == 3
        engine_for(ledger).dispose()
    assert state(recorded.run_id).out == plain
    assert state(recorded.run_id, "--no-snapshots").out == plain


def test_a_position_past_the_end_is_an_error_naming_the_range(
    state: Any, recorded: Recorded
) -> None:
    """An out-of-range position exits 2 with the run, the position and the valid range."""
    for flag in ("--at", "--diff-from"):
        done = state(recorded.run_id, flag, str(recorded.last + 5))
        assert (done.status, done.out) == (2, "")
        assert "PositionOutOfRangeError" in done.err
        assert f"position {recorded.last + 5}" in done.err
        assert f"0 to {recorded.last}" in done.err
        assert recorded.run_id in done.err


def test_an_unknown_run_is_an_error(state: Any) -> None:
    """A prefix that matches no run exits 2 and says so."""
    done = state("ffffffff")
    assert (done.status, done.out) == (2, "")
    assert "no run matches 'ffffffff'" in done.err


def test_an_answer_from_a_snapshot_says_so_on_stderr(state: Any, recorded: Recorded) -> None:
    """When a snapshot served, stderr says it is derived data not re-verified; stdout is JSON."""
    with Ledger.open(recorded.url) as ledger:
        take_snapshots(ledger, recorded.run_id, every=2)
        engine_for(ledger).dispose()
    done = state(recorded.run_id, "--diff-from", "0")
    assert done.status == 0
    assert done.json() == fold(DELTAS)
    [note] = done.err.splitlines()
    assert f"started from the snapshot at position {recorded.positions[1]}" in note
    assert "not re-verified" in note
    assert f"agentledger verify --deep {recorded.run_id}" in note
    assert state(recorded.run_id, "--no-snapshots").err == ""
