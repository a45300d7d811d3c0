"""One run written from many threads and tasks: positions in order, no ConcurrencyError."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agentledger.ledger import ConcurrencyError, Ledger, RunRecorder


def call(run: RunRecorder, label: str) -> int:
    """Record one small model call; its position."""
    return run.model_call(
        provider="p",
        model="m",
        messages=[{"role": "user", "content": label}],
        response={"role": "assistant", "content": f"re {label}"},
    ).position


def test_four_threads_write_one_run_without_a_concurrency_error(ledger: Ledger) -> None:
    """Every event lands at its own position; the run verifies; each thread's order is kept."""
    errors: list[BaseException] = []
    positions: dict[str, list[int]] = {}
    with ledger.record_run("threads") as run:

        def work(name: str) -> None:
            try:
                mine = positions.setdefault(name, [])
                for turn in range(10):
                    mine.append(call(run, f"{name}-{turn}"))
                    mine.append(run.delta({name: turn}))
                    run.tool("lookup", {"who": name, "turn": turn}, result={"ok": True})
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    events = ledger.events(run.run_id)
    assert len(events) == 1 + 4 * 10 * 4 + 1
    assert [e.position for e in events] == list(range(1, len(events) + 1))
    assert ledger.verify(run.run_id).ok
    for mine in positions.values():
        assert mine == sorted(mine)
    by_position = {e.position: e for e in events}
    for name, mine in positions.items():  # each position returned is the thread's own event
        assert all(
            by_position[p].kind == "ModelCalled" or by_position[p].payload["patch"] == {name: t}
            for t, p in enumerate(mine[1::2])
        )


def test_concurrent_tasks_record_one_run_in_completion_order(ledger: Ledger) -> None:
    """asyncio.gather: each ModelCalled is appended when its call completes."""

    async def main() -> str:
        async with ledger.arecord_run("gather", input="q") as run:

            async def task(name: str, delay: float) -> None:
                await asyncio.sleep(delay)
                await run.amodel_call(
                    provider="p",
                    model="m",
                    messages=[{"role": "user", "content": name}],
                    response={"role": "assistant", "content": "ok"},
                )
                await run.adelta({name: True})

            await asyncio.gather(task("slow", 0.03), task("fast", 0.0), task("mid", 0.015))
            await run.aanswer("done")
        return run.run_id

    run_id = asyncio.run(main())
    events = ledger.events(run_id)
    order = [e.payload["patch"] for e in events if e.kind == "DeltaApplied"]
    assert order == [{"fast": True}, {"mid": True}, {"slow": True}]
    assert events[-1].kind == "RunCompleted"
    assert ledger.verify(run_id).ok


def test_the_async_api_covers_the_recording_methods(ledger: Ledger) -> None:
    """Steps, tools, plans, policy, guardrails, clarifications: awaitable twins record the same."""

    async def main() -> str:
        run = await ledger.arecord_run("async-api", input={"q": 1})
        async with run:
            async with run.astep("plan", {"n": 1}) as step:
                await run.aplan({"steps": []}, step_id=step)
            await run.apolicy("allow")
            await run.aguardrail("budget", action="warn", message="close")
            call_id = await run.atool("search", {"q": "x"}, result=[1])
            called, position = await run.atool_call("fetch", {"u": "y"})
            await run.atool_result(called, ok=True, type="fetch", data={}, caused_by=position)
            await run.aclarify("which one?")
            await run.aflush()
            assert ledger.run(run.run_id).event_count == run.position
            assert call_id == "tool-1"
        return run.run_id

    run_id = asyncio.run(main())
    assert [e.kind for e in ledger.events(run_id)] == [
        "RunStarted",
        "StepStarted",
        "PlanProposed",
        "StepCompleted",
        "PolicyDecided",
        "GuardrailTripped",
        "ToolCalled",
        "ToolReturned",
        "ToolCalled",
        "ToolReturned",
        "ClarificationRequested",
        "RunCompleted",
    ]


def test_an_async_run_that_raises_records_run_failed(ledger: Ledger) -> None:
    """The block's exception closes the run as failed and propagates."""

    async def main() -> None:
        async with ledger.arecord_run("boom") as run:
            await run.adelta({"a": 1})
            raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        asyncio.run(main())
    (info,) = ledger.runs()
    assert info.status == "failed"
    assert [e.kind for e in ledger.events(info.run_id)][-1] == "RunFailed"


def test_many_async_runs_share_commits_and_all_verify(ledger: Ledger) -> None:
    """Fifty runs in one event loop, each with several calls: all complete and verify."""

    async def one(index: int) -> str:
        async with ledger.arecord_run("many", input=index) as run:
            for turn in range(3):
                await asyncio.sleep(0.001 * (index % 3))
                await run.amodel_call(
                    provider="p",
                    model="m",
                    messages=[{"role": "user", "content": f"{index}-{turn}"}],
                    response={"role": "assistant", "content": "ok"},
                )
        return run.run_id

    async def main() -> list[str]:
        return list(await asyncio.gather(*(one(i) for i in range(50))))

    ids = asyncio.run(main())
    assert len(set(ids)) == 50
    report = ledger.verify()
    assert report.ok, report.problems[:3]
    assert all(ledger.run(i).event_count == 5 for i in ids)


def test_a_second_writer_of_a_run_still_gets_a_concurrency_error(ledger: Ledger) -> None:
    """Two recorders of one run (two processes, say) race as before: the loser is told."""
    with ledger.record_run("race") as run:
        other = RunRecorder(ledger, ledger.load(run.run_id))
        run.delta({"a": 1})
        with pytest.raises(ConcurrencyError):
            other.delta({"b": 2})
    assert [e.kind for e in ledger.events(run.run_id)] == [
        "RunStarted",
        "DeltaApplied",
        "RunCompleted",
    ]


def test_a_stale_recorder_writes_nothing_after_its_refused_commit(ledger: Ledger) -> None:
    """A recorder whose position was taken is refused, and so is its closing event."""
    run = ledger.record_run("reported")
    other = RunRecorder(ledger, ledger.load(run.run_id))
    other.delta({"first": True})
    with pytest.raises(ConcurrencyError):
        run.delta({"late": True})
    with pytest.raises(ConcurrencyError):
        run.complete()
    events: list[Any] = ledger.events(run.run_id)
    assert [e.kind for e in events] == ["RunStarted", "DeltaApplied"]
