"""A read-model projector SIGKILLed mid-batch, then restarted, loses and duplicates nothing.

A real child process (``sys.executable -c CHILD``) catches up over a ledger of many runs in small
batches. Its `before_commit` hook prints the batch's new position, then sleeps: briefly for
most batches, for a minute at the batch the test chose, so the kill lands while that batch's
rows are written but not committed. After each kill the tracked position must be the last
COMMITTED batch's and the rows must be exactly those of the events up to it; other kills land
at an unsynchronised moment (reading, writing, between batches). Finally a fresh projector
catches up the rest and the rows equal a rebuild. On a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest

from agentledger.ledger import Ledger, RunRecorder, SequentialIds, StepClock
from agentledger.ledger.events import ErrorInfo, ToolErrorInfo
from agentledger.projections import ReadModelProjector

pytestmark = pytest.mark.slow

CHILD = r"""
import sys, time
from agentledger.ledger import Ledger
from agentledger.projections import ReadModelProjector

url, batch, stall_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
batches = 0

def before_commit(position):
    global batches
    batches += 1
    print(position, flush=True)
    time.sleep(60.0 if batches == stall_at else 0.002)

with Ledger.open(url) as ledger, ReadModelProjector(ledger) as projector:
    projector.catch_up(batch_size=batch, before_commit=before_commit)
print("done", flush=True)
"""

BATCH = 7
READ_TIMEOUT_S = 60.0


def record_runs(ledger: Ledger, count: int) -> None:
    """`count` runs with model calls, tool calls (some failing), trips and both endings."""
    for i in range(count):
        run = ledger.record_run("crash", f"question {i}", tags=[f"t{i % 3}"])
        with run.batch():
            _record_calls(run, i)
        if i % 7 == 0:
            run.fail(ErrorInfo(type="E", message="failed"))
        else:
            run.complete()


def _record_calls(run: RunRecorder, i: int) -> None:
    for j in range(i % 3 + 1):
        recorded = run.model_call(
            provider="fake",
            model=f"m{i % 2}",
            messages=[{"role": "user", "content": f"q{i}.{j}"}],
            response={"role": "assistant", "content": "a"},
            usage={"input_tokens": 10 + j, "output_tokens": 3, "total_tokens": 13 + j},
            cost_usd=0.001 * (j + 1),
            latency_ms=5.0 * (j + 1),
            actor="planner",
        )
        ok = (i + j) % 4 != 0
        with run.batch():
            call_id, position = run.tool_call("lookup", {"i": i}, caused_by=recorded.position)
            error = None if ok else ToolErrorInfo(code="e", message="m")
            run.tool_result(call_id, ok=ok, type="x", error=error, caused_by=position)
    if i % 5 == 0:
        run.guardrail("tool_cap", action="stop", message="cap")


class Child:
    """The projector in a child process, read line by line."""

    def __init__(self, url: str, stall_at: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, url, str(BATCH), str(stall_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)

    def line(self) -> str:
        """The child's next line (fails with its stderr if it ends or stays silent)."""
        assert self.process.stdout is not None
        if not self._selector.select(READ_TIMEOUT_S):
            self.kill()
            pytest.fail("the projector child printed nothing for a minute")
        text = self.process.stdout.readline()
        if not text:
            self.process.wait()
            stderr = self.process.stderr.read() if self.process.stderr else ""
            pytest.fail(f"the projector child ended early: {stderr}")
        return text.strip()

    def kill(self) -> None:
        """SIGKILL the child and reap it."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        assert self.process.returncode == -signal.SIGKILL
        self.close()

    def close(self) -> None:
        """Close the pipes."""
        self._selector.close()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def kinds_up_to(ledger: Ledger, position: int) -> Counter[str]:
    """How many events of each kind have notification ids up to `position`."""
    counts: Counter[str] = Counter()
    after = 0
    while after < position and (page := ledger.notifications(after, 500, stop=position)):
        counts.update(record.kind for _, record in page)
        after = page[-1][0]
    return counts


def assert_rows_are_exactly_the_events_up_to(ledger: Ledger, position: int) -> None:
    """Every row the events up to `position` imply is present once; nothing else is."""
    kinds = kinds_up_to(ledger, position)
    with ReadModelProjector(ledger) as projector:
        assert projector.position() == position
        tables = projector.table_rows()
    runs = tables["al_rm_runs"]
    assert len(runs) == kinds["RunStarted"]
    assert len(tables["al_rm_model_calls"]) == kinds["ModelCalled"]
    assert len(tables["al_rm_tool_calls"]) == kinds["ToolCalled"]
    returned = [t for t in tables["al_rm_tool_calls"] if t["ok"] is not None]
    assert len(returned) == kinds["ToolReturned"]
    assert len(tables["al_rm_guardrail_trips"]) == kinds["GuardrailTripped"]
    assert sum(r["event_count"] for r in runs) == sum(kinds.values())
    assert sum(r["model_calls"] for r in runs) == kinds["ModelCalled"]
    assert sum(r["tool_errors"] for r in runs) == sum(t["ok"] is False for t in returned)
    statuses = Counter(r["status"] for r in runs)
    assert (statuses["completed"], statuses["failed"]) == (
        kinds["RunCompleted"],
        kinds["RunFailed"],
    )


def stalled_kill(ledger: Ledger, url: str, stall_at: int, committed: int) -> int:
    """Kill a child while its `stall_at`-th batch is written but uncommitted; new position."""
    child = Child(url, stall_at)
    printed = [int(child.line()) for _ in range(stall_at)]
    child.kill()
    expected = printed[-2] if stall_at > 1 else committed
    assert printed[-1] > expected
    assert_rows_are_exactly_the_events_up_to(ledger, expected)
    return expected


def loose_kill(ledger: Ledger, url: str, lines: int, pause_s: float) -> int:
    """Kill a child at an unsynchronised moment, `pause_s` after its `lines`-th batch."""
    child = Child(url, stall_at=0)
    for _ in range(lines):
        child.line()
    time.sleep(pause_s)
    child.kill()
    with ReadModelProjector(ledger) as projector:
        position = projector.position()
    assert_rows_are_exactly_the_events_up_to(ledger, position)
    return position


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_projector_killed_mid_batch_loses_and_duplicates_nothing(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """SIGKILL at several points, restart, catch up: every row once, equal to a rebuild."""
    url = str(request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url"))
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds("crash")) as ledger:
        record_runs(ledger, 30)
        total = ledger.max_notification_id()
        assert total > 20 * BATCH
        position = 0
        for stall_at in (1, 3, 2):
            position = stalled_kill(ledger, url, stall_at, position)
        position = loose_kill(ledger, url, lines=2, pause_s=0.002)
        assert 0 < position < total

        with ReadModelProjector(ledger) as projector:
            assert projector.lag() == total - position
            remaining = sum(kinds_up_to(ledger, total).values())
            remaining -= sum(kinds_up_to(ledger, position).values())
            assert projector.catch_up(batch_size=BATCH) == remaining
            assert projector.lag() == 0
        assert_rows_are_exactly_the_events_up_to(ledger, total)
        with ReadModelProjector(ledger) as projector:
            survived: dict[str, list[dict[str, Any]]] = projector.table_rows()
            projector.rebuild()
            assert projector.table_rows() == survived
