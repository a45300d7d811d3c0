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
