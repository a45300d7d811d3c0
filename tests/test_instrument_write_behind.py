"""Sync instrumented calls are recorded write-behind: ordered, durable at every durability point."""

from __future__ import annotations

from collections.abc import Iterator

import openai  # noqa: TID251 - these tests drive the real SDK through its instrumentation
import pytest

from agentledger.agents.loopback import LoopbackServer
from agentledger.ledger import Ledger

KEY = "sk-test-openai-0123456789abcdefghij"


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A loopback OpenAI-compatible server echoing every question."""
    with LoopbackServer() as running:
        yield running


def ask(client: object, text: str) -> str:
    """One chat completion through ``client``; its answer's text."""
    reply = client.chat.completions.create(  # type: ignore[attr-defined]
        model="gpt-4o-mini", messages=[{"role": "user", "content": text}]
    )
    return str(reply.choices[0].message.content)


def test_calls_and_sync_methods_keep_program_order(server: LoopbackServer, ledger: Ledger) -> None:
    """Write-behind calls and committed-at-once methods take positions in the order they ran."""
    with (
        openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0) as sdk,
        ledger.record_run("ordered") as run,
    ):
        client = run.instrument(sdk)
        ask(client, "first")
        run.delta({"seen": 1})
        ask(client, "second")
        ask(client, "third")
        run.answer("done")
        run_id = run.run_id
    kinds = [e.kind for e in ledger.events(run_id)]
    assert kinds == [
        "RunStarted",
        "ModelCalled",
        "DeltaApplied",
        "ModelCalled",
        "ModelCalled",
        "SynthesisProduced",
        "RunCompleted",
    ]
    assert ledger.verify().ok


def test_flush_makes_a_call_visible_to_another_reader(
    server: LoopbackServer, sqlite_url: str
) -> None:
    """After ``run.flush()`` (a durability point) a second handle on the file reads the call."""
    with (
        openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0) as sdk,
        Ledger.open(sqlite_url) as ledger,
        ledger.record_run("visible") as run,
    ):
        ask(run.instrument(sdk), "is it recorded?")
        run.flush()
        with Ledger.open(sqlite_url, read_only=True) as reader:
            events = reader.events(run.run_id)
        assert [e.kind for e in events] == ["RunStarted", "ModelCalled"]
        assert events[1].payload["model"] == "gpt-4o-mini"


def test_many_threads_calling_one_run_leave_a_whole_chain(
    server: LoopbackServer, ledger: Ledger
) -> None:
    """Four threads share one run's client: every call is recorded once and the chain verifies."""
    from concurrent.futures import ThreadPoolExecutor

    with (
        openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0) as sdk,
        ledger.record_run("threads") as run,
    ):
        client = run.instrument(sdk)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda n: ask(client, f"question {n}"), range(24)))
        run_id = run.run_id
    assert answers == [f"echo: question {n}" for n in range(24)]
    events = ledger.events(run_id)
    assert [e.position for e in events] == list(range(1, 27))
    assert sum(e.kind == "ModelCalled" for e in events) == 24
    assert ledger.verify().ok


def test_threads_mixing_calls_steps_and_sync_methods_keep_each_threads_order(
    ledger: Ledger,
) -> None:
    """Four threads each call, record a tool, call in a step, batch a delta and answer.

    Every thread's events take positions in the order it recorded them, the step's events
    stay inside its StepStarted and StepCompleted, and the chain is whole.
    """
    import threading

    from agentledger.agents.testing import ScriptedClient

    def echo(messages: list[dict[str, object]]) -> str:
        return f"echo: {messages[-1]['content']}"

    with ledger.record_run("mixed") as run:
        client = run.instrument(ScriptedClient(echo))

        def work(name: str) -> None:
            for turn in range(3):
                ask(client, f"{name}/{turn}/a")
                run.tool("lookup", {"who": f"{name}/{turn}/b"}, result={"ok": True})
                with run.step(f"{name}/{turn}/step"):
                    ask(client, f"{name}/{turn}/c")
                ask(client, f"{name}/{turn}/d")
                with run.batch():
                    run.delta({name: turn})
                    ask(client, f"{name}/{turn}/e")
                run.answer(f"{name}/{turn}/f")

        threads = [threading.Thread(target=work, args=(f"t{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        run_id = run.run_id
    events = ledger.events(run_id)
    assert [e.position for e in events] == list(range(1, len(events) + 1))
    assert ledger.verify().ok
    seen: dict[str, list[str]] = {f"t{n}": [] for n in range(4)}
    for e in events:
        text = None
        if e.kind == "ModelCalled":
            text = ledger.conversation(e.payload["messages_ref"])[-1]["content"]
        elif e.kind == "ToolCalled":
            text = e.payload["arguments"]["who"]
        elif e.kind == "SynthesisProduced":
            text = e.payload["answer"]
        if text is not None:
            seen[text.split("/")[0]].append(text.split("/", 1)[1])
    for steps in seen.values():
        assert steps == [f"{turn}/{part}" for turn in range(3) for part in "abcdef"]
    names = {e.payload["step_id"]: e.payload["name"] for e in events if e.kind == "StepStarted"}
    starts = {e.payload["step_id"]: e.position for e in events if e.kind == "StepStarted"}
    for e in events:
        if e.kind == "StepCompleted":
            inside = events[starts[e.payload["step_id"]] : e.position - 1]
            asked = [
                ledger.conversation(i.payload["messages_ref"])[-1]["content"]
                for i in inside
                if i.kind == "ModelCalled"
            ]
            assert names[e.payload["step_id"]].replace("/step", "/c") in asked


def test_a_call_whose_commit_fails_is_raised_by_the_next_sync_method(ledger: Ledger) -> None:
    """A write-behind commit refused (another writer took the position) is never lost."""
    from agentledger.agents.testing import ScriptedClient
    from agentledger.ledger import ConcurrencyError, RunRecorder

    run = ledger.record_run("refused")
    client = run.instrument(ScriptedClient(["one", "two"]))
    RunRecorder(ledger, ledger.load(run.run_id)).delta({"first": True})
    ask(client, "recorded write-behind, refused")
    with pytest.raises(ConcurrencyError):
        run.delta({"late": True})  # raised before it records anything
    other = ledger.record_run("refused at the end")
    client = other.instrument(ScriptedClient(["three"]))
    RunRecorder(ledger, ledger.load(other.run_id)).delta({"first": True})
    ask(client, "recorded write-behind, refused")
    with pytest.raises(ConcurrencyError):
        other.__exit__(None, None, None)  # the end of ``with ledger.record_run(...)``
    for run_id in (run.run_id, other.run_id):
        assert [e.kind for e in ledger.events(run_id)] == ["RunStarted", "DeltaApplied"]


def test_flush_makes_a_call_visible_to_another_postgres_reader(
    server: LoopbackServer, pg_url: str
) -> None:
    """As on SQLite: after ``run.flush()`` a second PostgreSQL handle reads the call."""
    test_flush_makes_a_call_visible_to_another_reader(server, pg_url)


def test_a_stream_dropped_after_a_failed_commit_leaves_the_failure_to_the_next_call(
    server: LoopbackServer, ledger: Ledger
) -> None:
    """A stream recorded from its finalizer does not swallow an earlier commit's failure."""
    import gc
    import time
    import warnings

    from agentledger.ledger import ConcurrencyError, RunRecorder

    run = ledger.record_run("dropped stream")
    with openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0) as sdk:
        client = run.instrument(sdk)
        RunRecorder(ledger, ledger.load(run.run_id)).delta({"first": True})
        ask(client, "recorded write-behind, refused")
        deadline = time.monotonic() + 10
        while run._failure is None and time.monotonic() < deadline:  # the refusal is in
            time.sleep(0.005)
        stream = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "drop me"}], stream=True
        )
        next(iter(stream))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del stream
            gc.collect()
        assert not [w for w in caught if "Unraisable" in type(w.message).__name__]
        with pytest.raises(ConcurrencyError):
            run.delta({"late": True})
    assert [e.kind for e in ledger.events(run.run_id)] == ["RunStarted", "DeltaApplied"]


def _hold_write_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Write-behind commits wait for a durability point (a window far longer than the test)."""
    from agentledger.ledger import _committer

    monkeypatch.setattr(_committer, "BEHIND_WINDOW_S", 60.0)


def test_a_runs_calls_within_one_window_share_one_commit(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls faster than the window are queued as one commit, up to its cap; all land in order."""
    from agentledger.agents.testing import ScriptedClient
    from agentledger.ledger._committer import BEHIND_BATCH

    _hold_write_behind(monkeypatch)
    calls = BEHIND_BATCH + 6
    with ledger.record_run("one window") as run:
        client = run.instrument(ScriptedClient([f"answer {i}" for i in range(calls + 1)]))
        for i in range(calls):
            ask(client, f"question {i}")
        queued = [len(request.events) for request in ledger._committer._queue]
        assert queued == [BEHIND_BATCH, 6]
        run.flush()
        assert not ledger._committer._queue
        ask(client, "after the flush")  # a new commit: the flushed one is closed
        run.delta({"after": True})
        run_id = run.run_id
    events = ledger.events(run_id)
    assert [e.position for e in events] == list(range(1, calls + 5))
    assert [e.kind for e in events[1:-2]] == ["ModelCalled"] * (calls + 1)
    answers = [ledger.conversation(e.payload["response_ref"])[-1] for e in events[1:-3]]
    texts = [a["choices"][0]["message"]["content"] for a in answers]
    assert texts == [f"answer {i}" for i in range(calls)]
    assert ledger.verify().ok


def test_a_shared_commit_refused_loses_every_call_in_it_and_says_so_once(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three calls queued as one commit, refused together: the run goes on from what committed."""
    from agentledger.agents.testing import ScriptedClient
    from agentledger.ledger import ConcurrencyError, RunRecorder

    _hold_write_behind(monkeypatch)
    run = ledger.record_run("refused together")
    client = run.instrument(ScriptedClient(["one", "two", "three", "four"]))
    RunRecorder(ledger, ledger.load(run.run_id)).delta({"first": True})  # takes position 2
    for text in ("one", "two", "three"):
        ask(client, text)
    assert [len(request.events) for request in ledger._committer._queue] == [3]
    assert run.position == 4
    with pytest.raises(ConcurrencyError):
        run.flush()
    run.flush()  # raised once
    assert run.position == 1  # none of the three is counted as being committed any more
    assert [e.kind for e in ledger.events(run.run_id)] == ["RunStarted", "DeltaApplied"]
    assert ledger.verify().ok
