"""World state and time travel: `world_state` and `state_history` over every backend.

A run's world state after position N is the left fold, from ``{}``, of its DeltaApplied merge
patches up to N. These tests record real runs through the public recording API on memory,
SQLite and PostgreSQL, then read states back at every position, and check the errors a caller
gets for an unknown run, a position outside the run and a recorded delta that is not an object.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import pytest

from agentledger.ledger import Ledger, UnknownRunError
from agentledger.ledger.events import DeltaApplied
from agentledger.projections import (
    InvalidDeltaError,
    JSONValue,
    PositionOutOfRangeError,
    ProjectionError,
    SnapshotIntervalError,
    apply_patch,
    fold_patches,
    state_history,
    world_state,
)

# Deltas of a small research run: evidence keyed by id, a plan replaced, a key deleted.
DELTAS: list[dict[str, Any]] = [
    {"goal": "tidy the garage", "plan": ["sort", "shelve"]},
    {"evidence": {"e1": {"text": "shelves fit", "ok": True}}},
    {"evidence": {"e2": {"text": "bins are full"}}, "status": "working"},
    {"plan": ["sort", "bin", "shelve"], "evidence": {"e1": {"ok": None}}},
    {"status": None, "answer": "sort, bin, shelve"},
]


def record(ledger: Ledger, deltas: list[dict[str, Any]]) -> tuple[str, list[int]]:
    """Record a run: a plan before each delta; return its id and the deltas' positions."""
    positions = []
    with ledger.record_run("planner", input="tidy the garage") as run:
        for index, delta in enumerate(deltas):
            run.plan({"step": index})
            positions.append(run.delta(delta, step_id=f"s{index}"))
        return run.run_id, positions


def expected_states(deltas: list[dict[str, Any]]) -> list[JSONValue]:
    """The state after each delta, folded independently with `apply_patch`."""
    states: list[JSONValue] = []
    state: JSONValue = {}
    for delta in deltas:
        state = apply_patch(state, delta)
        states.append(state)
    return states


def test_world_state_is_the_fold_of_the_deltas_up_to_each_position(ledger: Ledger) -> None:
    """At every position the state is the fold of the deltas recorded at or before it."""
    run_id, positions = record(ledger, DELTAS)
    last = ledger.run(run_id).event_count
    states = expected_states(DELTAS)
    for at in range(last + 1):
        done = [i for i, p in enumerate(positions) if p <= at]
        want = states[done[-1]] if done else {}
        assert world_state(ledger, run_id, at) == want, at


def test_world_state_defaults_to_the_last_position(ledger: Ledger) -> None:
    """Without `at`, the state is the fold of every delta of the run."""
    run_id, _ = record(ledger, DELTAS)
    assert world_state(ledger, run_id) == {
        "goal": "tidy the garage",
        "plan": ["sort", "bin", "shelve"],
        "evidence": {"e1": {"text": "shelves fit"}, "e2": {"text": "bins are full"}},
        "answer": "sort, bin, shelve",
    }


def test_position_zero_and_positions_before_the_first_delta_are_empty(ledger: Ledger) -> None:
    """Before any delta (position 0, RunStarted, the plan) the world state is ``{}``."""
    run_id, positions = record(ledger, DELTAS)
    for at in range(positions[0]):
        assert world_state(ledger, run_id, at) == {}


def test_time_travel_sees_a_deleted_key_before_its_deletion(ledger: Ledger) -> None:
    """A key a later delta deletes is still there when reading an earlier position."""
    run_id, positions = record(ledger, DELTAS)
    assert world_state(ledger, run_id, positions[2])["status"] == "working"
    assert "status" not in world_state(ledger, run_id, positions[4])


def test_state_history_yields_each_delta_and_the_state_after_it(ledger: Ledger) -> None:
    """The history pairs every DeltaApplied position with `world_state` at that position."""
    run_id, positions = record(ledger, DELTAS)
    history = list(state_history(ledger, run_id))
    assert [position for position, _ in history] == positions
    assert [state for _, state in history] == expected_states(DELTAS)
    for position, state in history:
        assert world_state(ledger, run_id, position) == state


def test_state_history_is_lazy_and_its_states_are_independent(ledger: Ledger) -> None:
    """Mutating one yielded state changes neither the states after it nor the ledger's answer."""
    run_id, positions = record(ledger, DELTAS)
    history = state_history(ledger, run_id)
    first_position, first = next(history)
    assert first_position == positions[0]
    first["plan"].append("burn it all")  # type: ignore[union-attr]
    first["goal"] = "vandalise"
    rest = dict(history)
    assert rest[positions[1]]["plan"] == ["sort", "shelve"]
    assert rest[positions[1]]["goal"] == "tidy the garage"
    assert world_state(ledger, run_id, positions[0]) == expected_states(DELTAS)[0]


def test_a_returned_state_can_be_mutated_without_harm(ledger: Ledger) -> None:
    """A caller editing a state in place does not change the next read."""
    run_id, _ = record(ledger, DELTAS)
    state = world_state(ledger, run_id)
    state["evidence"]["e2"]["text"] = "changed"  # type: ignore[index]
    assert world_state(ledger, run_id)["evidence"] == {  # type: ignore[comparison-overlap]
        "e1": {"text": "shelves fit"},
        "e2": {"text": "bins are full"},
    }


def test_a_run_without_deltas_has_an_empty_state_and_history(ledger: Ledger) -> None:
    """A run that never applied a delta has ``{}`` as its state and nothing in its history."""
    with ledger.record_run("quiet", input="nothing to do") as run:
        run.plan({"steps": 0})
    assert world_state(ledger, run.run_id) == {}
    assert list(state_history(ledger, run.run_id)) == []


def test_unknown_runs_raise_the_ledgers_unknown_run_error(ledger: Ledger) -> None:
    """A run id the ledger does not hold (or that is not an id at all) is named in the error."""
    record(ledger, DELTAS)
    missing = "00000000-0000-4000-8000-000000000000"
    for run_id in (missing, "not-a-run-id"):
        with pytest.raises(UnknownRunError, match=run_id):
            world_state(ledger, run_id)
        with pytest.raises(UnknownRunError, match=run_id):
            state_history(ledger, run_id)  # raises at the call, before any next()


def test_a_position_past_the_end_or_below_zero_is_out_of_range(ledger: Ledger) -> None:
    """`at` must lie in 0..last; the error names the run, the position and the range."""
    run_id, _ = record(ledger, DELTAS)
    last = ledger.run(run_id).event_count
    for at in (last + 1, -1, 10**9):
        with pytest.raises(PositionOutOfRangeError) as caught:
            world_state(ledger, run_id, at)
        error = caught.value
        assert (error.run_id, error.position, error.last) == (run_id, at, last)
        assert f"position {at}" in str(error)
        assert run_id in str(error)
        assert f"0 to {last}" in str(error)
        assert isinstance(error, ProjectionError)
        assert isinstance(error, ValueError)
    assert world_state(ledger, run_id, last) == world_state(ledger, run_id)


def test_a_snapshot_interval_below_one_is_refused(ledger: Ledger) -> None:
    """`every` counts deltas between snapshots, so 0 and negatives are a caller's mistake."""
    run_id, _ = record(ledger, DELTAS)
    for every in (0, -5):
        with pytest.raises(SnapshotIntervalError, match=str(every)):
            world_state(ledger, run_id, snapshots=True, every=every)


def test_a_long_run_folds_across_read_pages() -> None:
    """A run longer than one read page (1,000 events) folds every delta, none twice."""
    ledger = Ledger.open("memory://")
    deltas: list[dict[str, Any]] = [
        {"count": i, f"k{i % 3}": {f"i{i % 40}": i}} for i in range(2_345)
    ]
    with ledger.record_run("long", input=None) as run, run.batch():
        for delta in deltas:
            run.delta(delta)
    assert world_state(ledger, run.run_id) == fold_patches(deltas)
    history = list(state_history(ledger, run.run_id))
    assert len(history) == len(deltas)
    assert history[999][1] == fold_patches(deltas[:1000])
    assert history[-1][1] == fold_patches(deltas)
    ledger.close()


# A delta that is not an object -------------------------------------------------------------


def record_with_bad_delta(ledger: Ledger, bad: JSONValue) -> tuple[str, list[int]]:
    """Record a run whose second delta is `bad`, past the recording API's schema check.

    The recording API and import refuse a non-object delta; an event built without validation
    (``model_construct``) by code that uses the low-level `RunRecorder.record` is how one can
    still reach a ledger, and the fold must then name it rather than fold garbage.
    """
    positions = []
    with ledger.record_run("planner", input="tidy the garage") as run:
        positions.append(run.delta(DELTAS[0]))
        with warnings.catch_warnings():  # pydantic warns when it dumps the unvalidated field
            warnings.simplefilter("ignore")
            positions.append(run.record(DeltaApplied.model_construct(patch=bad)))
        positions.append(run.delta(DELTAS[2]))
    return run.run_id, positions


@pytest.mark.parametrize("bad", [["a", "list"], "a string", 7, None])
def test_a_recorded_delta_that_is_not_an_object_is_named(ledger: Ledger, bad: JSONValue) -> None:
    """A non-object patch stops the fold with an error naming the run and the position."""
    run_id, positions = record_with_bad_delta(ledger, bad)
    assert world_state(ledger, run_id, positions[0]) == DELTAS[0]
    with pytest.raises(InvalidDeltaError) as caught:
        world_state(ledger, run_id)
    error = caught.value
    assert (error.run_id, error.position) == (run_id, positions[1])
    assert f"run {run_id}, position {positions[1]}" in str(error)
    assert "must be a JSON object" in str(error)
    with pytest.raises(InvalidDeltaError):
        list(state_history(ledger, run_id))


def test_projection_errors_pickle_with_their_fields() -> None:
    """The new errors cross process boundaries intact (fields and message)."""
    for error in (
        PositionOutOfRangeError("r1", 9, 4),
        InvalidDeltaError("r1", 3, "the patch must be a JSON object at top level, not a number"),
        SnapshotIntervalError(0),
    ):
        copy = pickle.loads(pickle.dumps(error))  # noqa: S301 -- our own bytes, made just above
        assert type(copy) is type(error)
        assert str(copy) == str(error)
        assert vars(copy) == vars(error)
