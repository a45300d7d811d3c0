"""Replay of threaded code whose events stop coming: reported at once, and never falsely.

A served call waits for the events recorded before it; when the code changed so that they never
come, replay reports a stall. With every thread of the function waiting (for its turn, for a
thread pool's futures, on a join, idle in the pool) it reports it at once, well before the stall
timeout; with a thread still at work (a slow unrecorded step) it waits for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from user_code import agents

from agentledger.ledger import Ledger
from agentledger.replay import STALL_TIMEOUT_S, replay_run


@pytest.fixture(autouse=True)
def pool_knobs() -> Iterator[None]:
    """Each test starts (and ends) with `pooled` waiting by map, skipping and pausing nothing."""
    yield
    agents.POOL_WAIT, agents.POOL_SKIP, agents.POOL_PAUSE = "map", "", {}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("wait", ["map", "result", "wait", "as_completed", "threads"])
def test_a_stalled_thread_pool_is_reported_well_before_the_stall_timeout(
    ledger: Ledger, wait: str
) -> None:
    """A worker that no longer asks its first question: the stall is named in well under 5 s.

    The main thread waits in the pool (``map``, ``Future.result``, ``wait``, ``as_completed``)
    or joins plain threads; the workers wait for their turns.
    """
    agents.POOL_WAIT = wait
    _, run_id = ledger.record_function(agents.pooled, "Weather in")
    assert replay_run(ledger, run_id).identical
    agents.POOL_SKIP = "Lima"
    began = time.monotonic()
    found = replay_run(ledger, run_id, raise_on_divergence=False).divergence
    took = time.monotonic() - began
    assert found is not None
    assert "replay stalled" in found.reason
    assert STALL_TIMEOUT_S == 5.0
    assert took < 2.5, f"the stall took {took:.2f} s to report"


def test_a_slow_pool_worker_is_waited_for_not_reported_as_a_stall(ledger: Ledger) -> None:
    """Oslo's worker works 0.5 s before each question while the others wait for its events.

    Recorded with Oslo first, replayed with Oslo slow: the other workers wait for their turns
    and the main thread for the pool, but Oslo's thread is at work (before it has recorded
    anything, then between its calls), so nothing is reported and the replay is identical.
    """
    agents.POOL_PAUSE = {"Lima": 0.2, "Pune": 0.2, "Nuuk": 0.2}
    _, run_id = ledger.record_function(agents.pooled, "Weather in")
    oslo_first = [
        ledger.conversation(e.payload["messages_ref"])[-1]["content"]
        for e in ledger.events(run_id)
        if e.kind == "ModelCalled"
    ][:2]
    assert oslo_first == ["Weather in Oslo #0", "Weather in Oslo #1"]
    agents.POOL_PAUSE = {"Oslo": 0.5}
    began = time.monotonic()
    result = replay_run(ledger, run_id, raise_on_divergence=False)
    assert result.divergence is None
    assert result.identical
    assert time.monotonic() - began >= 1.0  # it did wait for Oslo's worker
