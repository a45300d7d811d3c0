"""User code recorded with ``record_function``: its replay, and async recording at scale.

(a) Replay of a corpus of recorded user-code runs vs reading and decoding them. 200 runs
(``--quick``: 40) of ``agent`` below (three calls through an instrumented ``ScriptedClient``
with a growing conversation, a recorded tool, a delta and an answer) are recorded into a SQLite
file ledger. Baseline: ``bench_replay.read_all`` (events decoded into their catalogue classes,
plus every blob they refer to, transitively). Measured: ``replay_run`` of every run (the
function imported, its client and tool served from the record, every event compared; each must
be identical). Target: replay / read <= 3x.

(b) Async recording, as the target words it: 100 concurrent runs in one event loop "against
the same loopback server". ``sdk_agent`` makes three calls with one real ``openai.AsyncOpenAI``
client to the loopback HTTP server (a thread of this process answering after 10 ms), then an
answer; the runs are recorded into a SQLite file ledger with ``arecord_function``. Baseline:
the same 100 coroutines with the ledger disabled (the same function given a stand-in run whose
``instrument`` returns the bare client and whose ``aanswer`` does nothing). Target: <= 1.5x.
Both sides pay the SDK's and the server's own work for 300 HTTP calls.

Information rows: ``async_agent``, the same three calls through an instrumented
``AsyncScriptedClient`` that sleeps 10 ms and makes no HTTP call, recorded into SQLite and into
``memory://`` (what is left is the CPU the events cost in Python, not database I/O), and with
50 ms answers. Their baseline mostly sleeps, so they show the recording's whole CPU cost
against no work at all: the row earlier runs gated on, kept to follow that cost.

Timings are the best of ``REPEATS`` interleaved passes. Run: ``python -m bench --only
user_code [--quick]``.
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai  # noqa: TID251 - the SDK rows drive the real SDK against the loopback server

from agentledger.agents.loopback import LoopbackServer, Reply
from agentledger.agents.testing import AsyncScriptedClient, ScriptedClient
from agentledger.ledger import Ledger, RunRecorder
from agentledger.replay import replay_run
from bench.bench_replay import read_all

FULL_RUNS, QUICK_RUNS = 200, 40
CONCURRENT = 100
REPEATS = 3
LATENCY_S = 0.01
SDK_KEY = "sk-bench-0000000000000000"


def answer(messages: list[dict[str, Any]]) -> str:
    """A scripted answer that depends on the request."""
    return f"noted: {messages[-1]['content']}"


def agent(run: RunRecorder, question: str) -> str:
    """Three calls with a growing conversation, a recorded tool, a delta and an answer."""
    client = run.instrument(ScriptedClient(answer))

    @run.recorded_tool
    def lookup(topic: str) -> dict[str, Any]:
        return {"topic": topic, "facts": [topic.upper(), len(topic)]}

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful research assistant."},
        {"role": "user", "content": question},
    ]
    for turn in range(3):
        reply = client.chat.completions.create(model="scripted-1", messages=messages)
        messages += [
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": f"and then? ({turn})"},
        ]
        if turn == 0:
            run.delta({"facts": lookup(question)})
    run.answer(str(messages[-2]["content"]))
    return str(messages[-2]["content"])


async def async_agent(run: Any, question: str) -> str:
    """Three calls through an async client that answers after ``LATENCY_S``, then an answer."""
    return await _three_calls(run, AsyncScriptedClient(answer, latency_s=LATENCY), question)


async def _three_calls(run: Any, sdk: Any, question: str) -> str:
    """Three calls through ``sdk`` instrumented, the conversation growing, then an answer."""
    client = run.instrument(sdk)
    messages = [{"role": "user", "content": question}]
    text = ""
    for _ in range(3):
        reply = await client.chat.completions.create(model="scripted-1", messages=messages)
        text = str(reply.choices[0].message.content)
        messages = [*messages, {"role": "assistant", "content": text}]
    await run.aanswer(text)
    return text


LATENCY = LATENCY_S


class Unrecorded:
    """The ledger disabled: the same function, its client bare, its answer dropped."""

    def instrument(self, client: Any) -> Any:
        """The client itself."""
        return client

    async def aanswer(self, text: str) -> None:
        """Nothing is recorded."""
        del text


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def replay_rows(quick: bool) -> list[dict[str, object]]:
    """(a): replay of the corpus vs reading it."""
    count = QUICK_RUNS if quick else FULL_RUNS
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-user-") as directory:
        ledger = Ledger.open(f"sqlite:///{Path(directory) / 'user.db'}")
        try:
            ids = [ledger.record_function(agent, f"topic {n}")[1] for n in range(count)]

            def replay() -> None:
                for run_id in ids:
                    if not replay_run(ledger, run_id).identical:
                        raise AssertionError(run_id)

            ours = base = float("inf")
            for _ in range(REPEATS):
                base = min(base, _timed(lambda: read_all(ledger, ids)))
                ours = min(ours, _timed(replay))
        finally:
            ledger.close()
    return [
        {
            "name": f"replay_run of {count} recorded user-code runs vs reading and decoding them",
            "value": round(ours * 1000 / count, 3),
            "baseline": round(base * 1000 / count, 3),
            "unit": "ms/run",
            "target": 3.0,
            "higher_is_better": False,
        }
    ]


async def _gather(ledger: Ledger | None) -> None:
    if ledger is None:
        await asyncio.gather(*(async_agent(Unrecorded(), f"q{i}") for i in range(CONCURRENT)))
    else:
        await asyncio.gather(
            *(ledger.arecord_function(async_agent, f"q{i}") for i in range(CONCURRENT))
        )


def _async_pair(url: str, latency: float) -> tuple[float, float]:
    global LATENCY  # noqa: PLW0603 - the benchmark's one knob, read by async_agent
    LATENCY = latency
    ledger = Ledger.open(url)
    try:
        asyncio.run(_gather(ledger))  # warm: tables, pools, the commit thread
        ours = base = float("inf")
        for _ in range(REPEATS):
            base = min(base, _timed(lambda: asyncio.run(_gather(None))))
            ours = min(ours, _timed(lambda: asyncio.run(_gather(ledger))))
    finally:
        ledger.close()
        LATENCY = LATENCY_S
    return ours, base


def async_rows() -> list[dict[str, object]]:
    """(b): 100 concurrent recorded runs vs the same with the ledger disabled."""
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-async-") as directory:
        cases = [
            ("SQLite", f"sqlite:///{Path(directory) / 'a.db'}", LATENCY_S, None),
            ("memory://", "memory://", LATENCY_S, None),
            ("SQLite", f"sqlite:///{Path(directory) / 'b.db'}", 0.05, None),
        ]
        for label, url, latency, target in cases:
            ours, base = _async_pair(url, latency)
            rows.append(
                {
                    "name": (
                        f"{CONCURRENT} concurrent async runs (3 calls of {latency * 1000:.0f} ms"
                        f" each) recorded into {label} vs the ledger disabled"
                    ),
                    "value": round(ours * 1000, 1),
                    "baseline": round(base * 1000, 1),
                    "unit": "ms",
                    "target": target,
                    "higher_is_better": False,
                }
            )
    return rows


_SDK: openai.AsyncOpenAI | None = None
"""The one client the SDK rows' runs share (made inside each pass's event loop)."""


async def sdk_agent(run: Any, question: str) -> str:
    """`async_agent` with the real ``openai`` SDK client, against the loopback server."""
    assert _SDK is not None
    return await _three_calls(run, _SDK, question)


async def _sdk_gather(ledger: Ledger | None, url: str) -> None:
    global _SDK  # noqa: PLW0603 - one client per pass, as user code shares one
    async with openai.AsyncOpenAI(api_key=SDK_KEY, base_url=url, max_retries=0) as client:
        _SDK = client
        try:
            if ledger is None:
                await asyncio.gather(*(sdk_agent(Unrecorded(), f"q{i}") for i in range(CONCURRENT)))
            else:
                await asyncio.gather(
                    *(ledger.arecord_function(sdk_agent, f"q{i}") for i in range(CONCURRENT))
                )
        finally:
            _SDK = None


def _sdk_reply(vendor: str, body: dict[str, Any]) -> Reply:
    del vendor
    return Reply(text=answer(body["messages"]), delay_s=LATENCY_S)


def sdk_rows() -> list[dict[str, object]]:
    """(b) as the target names it: the real SDK client against the loopback server."""
    with (
        tempfile.TemporaryDirectory(prefix="agentledger-bench-async-sdk-") as directory,
        LoopbackServer(responder=_sdk_reply) as server,
    ):
        ledger = Ledger.open(f"sqlite:///{Path(directory) / 'sdk.db'}")
        url = server.openai_url
        try:
            asyncio.run(_sdk_gather(ledger, url))  # warm: imports, tables, pools
            ours = base = float("inf")
            for _ in range(REPEATS):
                base = min(base, _timed(lambda: asyncio.run(_sdk_gather(None, url))))
                ours = min(ours, _timed(lambda: asyncio.run(_sdk_gather(ledger, url))))
        finally:
            ledger.close()
    return [
        {
            "name": (
                f"{CONCURRENT} concurrent async runs, the real openai SDK against the loopback "
                f"server (3 calls of {LATENCY_S * 1000:.0f} ms each), recorded into SQLite vs "
                "the ledger disabled"
            ),
            "value": round(ours * 1000, 1),
            "baseline": round(base * 1000, 1),
            "unit": "ms",
            "target": 1.5,
            "higher_is_better": False,
        }
    ]


def run(quick: bool = False) -> list[dict[str, object]]:
    """Both figures and their information rows."""
    return replay_rows(quick) + async_rows() + sdk_rows()
