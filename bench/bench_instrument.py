"""Instrumented SDK calls: a call through `run.instrument(client)` vs the bare SDK call.

The real ``openai`` and ``anthropic`` SDK clients call the loopback server
(`agentledger.agents.loopback`, a thread of this process answering a 240-character text, 30
stream chunks of 8 characters) with no think time: the bare call is the cheapest a model call
gets, so every row shows the whole cost of recording. For each SDK, sync and async, plain and
streamed (every chunk read): the baseline is the bare client; measured is the same client
instrumented into a run recorded in a SQLite file with the ledger's default durability
(``normal``: written to the write-ahead log without waiting for the disk; see docs/storage.md).
Instrumented calls are committed write-behind (several calls per transaction, within 5 ms), so
each round's time ends with the run's flush: every call's commit is counted. Target: per-call
time ratio <= 1.3x (lower is better). An information row gives the sync create recorded with
``durability="full"`` (an fsync per call).

Information rows: the same instrumented calls through a port that records nothing (the
instrumentation's own work alone), recording into an in-memory ledger (plus the recorder's
work, no disk), creates recorded to SQLite by a ledger with no redaction policy (what the
default policy's search for personal data and secrets costs), and calls to a server that
takes 50 ms to answer (a fast real model), where the recording cost is a small share of the
call.

Rounds interleave the variants (bare, SQLite, memory, nothing recorded) so drift hits them
alike; each figure is the best over rounds of the mean per-call time (the least disturbed by
other load on the machine). Run: ``python -m bench --only instrument
[--quick]``; ``--profile`` prints where an instrumented streamed call's time goes.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic  # noqa: TID251 - the benchmark drives the real SDKs
import openai  # noqa: TID251 - the benchmark drives the real SDKs

from agentledger.agents.loopback import LoopbackServer, Reply
from agentledger.ledger import CallRecord, Ledger, RunRecorder, ServedCall, instrumentation_for

TARGET_RATIO = 1.3
TEXT = "The weather in Paris is sunny with a light breeze; 24 C in the afternoon. " * 3 + "ok"
MESSAGES = [{"role": "user", "content": "What is the weather in Paris today?"}]
KEY = "sk-bench-0000000000000000"
FULL, QUICK = (7, 60), (3, 15)  # (rounds, calls per round and variant)
THINK_S = 0.05


def _answer(vendor: str, body: Mapping[str, Any]) -> Reply:
    del vendor, body
    return Reply(text=TEXT, chunk_chars=8)


def _clients(url: str) -> dict[str, Callable[[], Any]]:
    """A factory per SDK (async clients are made inside the event loop that uses them)."""
    return {
        "openai": lambda: openai.OpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0),
        "openai-async": lambda: openai.AsyncOpenAI(
            api_key=KEY, base_url=f"{url}/v1", max_retries=0
        ),
        "anthropic": lambda: anthropic.Anthropic(api_key=KEY, base_url=url, max_retries=0),
        "anthropic-async": lambda: anthropic.AsyncAnthropic(
            api_key=KEY, base_url=url, max_retries=0
        ),
    }


def _call(client: Any, sdk: str, stream: bool) -> Any:
    """One call's coroutine (async clients) or result; streams read to the end."""
    if sdk.startswith("openai"):
        return client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=stream)
    return client.messages.create(
        model="claude-haiku", max_tokens=256, messages=MESSAGES, stream=stream
    )


def _sync_calls(client: Any, sdk: str, stream: bool, count: int) -> None:
    for _ in range(count):
        result = _call(client, sdk, stream)
        if stream:
            for _chunk in result:
                pass


async def _async_calls(
    ledger: Variant, make: Callable[[], Any], sdk: str, stream: bool, count: int
) -> float:
    async with make() as client:
        await _call(client, sdk, False)  # connect outside the timed calls
        with _recording(ledger, client) as (target, run):
            started = time.perf_counter()
            for _ in range(count):
                result = await _call(target, sdk, stream)
                if stream:
                    async for _chunk in result:
                        pass
            if run is not None:
                await run.aflush()  # the calls' write-behind commits are part of their cost
            return time.perf_counter() - started


class _Discard:
    """A live port that records nothing: what remains is the instrumentation's own work."""

    replaying = False

    def record_call(self, call: CallRecord) -> int:
        del call
        return 0

    async def arecord_call(self, call: CallRecord) -> int:
        del call
        return 0

    def serve_call(self, call: CallRecord) -> ServedCall:
        raise NotImplementedError(call.model)


Variant = Ledger | _Discard | None
"""Bare client (None), instrumented into a run of a ledger, or through a discarding port."""


@contextmanager
def _recording(variant: Variant, client: Any) -> Iterator[tuple[Any, RunRecorder | None]]:
    """``client`` bare, instrumented into a fresh run, or instrumented through a discarding port.

    Yields the client to call and the run it records into (None when there is none), whose
    flush the timed calls end with: their write-behind commits are part of what they cost.
    """
    if variant is None:
        yield client, None
    elif isinstance(variant, _Discard):
        yield instrumentation_for(client).wrap(client, variant), None
    else:
        with variant.record_run("bench-instrument") as run:
            yield run.instrument(client), run


def _round(ledger: Variant, client: Any, sdk: str, stream: bool, count: int) -> float:
    """Mean seconds per call over ``count`` calls (``client``: a factory for async SDKs)."""
    if sdk.endswith("async"):
        return asyncio.run(_async_calls(ledger, client, sdk, stream, count)) / count
    with _recording(ledger, client) as (target, run):
        started = time.perf_counter()
        _sync_calls(target, sdk, stream, count)
        if run is not None:
            run.flush()  # the calls' write-behind commits are part of their cost
        return (time.perf_counter() - started) / count


def _measure(
    variants: Mapping[str, Variant],
    client: Any,
    sdk: str,
    stream: bool,
    sizes: tuple[int, int],
) -> dict[str, float]:
    rounds, count = sizes
    times: dict[str, list[float]] = {name: [] for name in variants}
    _round(None, client, sdk, stream, 3)  # warm connections and lazy imports
    for _ in range(rounds):
        for name, ledger in variants.items():
            times[name].append(_round(ledger, client, sdk, stream, count))
    return {name: min(values) for name, values in times.items()}


def _row(
    name: str, value: float, baseline: float, *, target: float | None, note: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "value": round(value * 1000, 3),
        "baseline": round(baseline * 1000, 3),
        "ratio": round(value / baseline, 3),
        "target": target,
        "unit": "ms",
        "higher_is_better": False,
        "note": note,
    }


def _cases(server: LoopbackServer) -> Iterator[tuple[str, bool, Any]]:
    """(SDK, stream, client or async factory) for each measured case."""
    for sdk, make in _clients(server.url).items():
        client = make if sdk.endswith("async") else make()
        for stream in (False, True):
            yield sdk, stream, client


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Per-call time of instrumented calls (SQLite, memory) vs bare SDK calls."""
    sizes = QUICK if quick else FULL
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-instrument-") as directory:
        sqlite = Ledger.open(f"sqlite:///{Path(directory) / 'instrument.db'}")
        full = Ledger.open(f"sqlite:///{Path(directory) / 'full.db'}", durability="full")
        memory = Ledger.open("memory://")
        plain = Ledger.open(f"sqlite:///{Path(directory) / 'plain.db'}", redaction=None)
        variants: dict[str, Variant] = {
            "bare": None,
            "sqlite": sqlite,
            "memory": memory,
            "discard": _Discard(),
        }
        try:
            with LoopbackServer(responder=_answer) as server:
                for sdk, stream, client in _cases(server):
                    kind = f"{sdk} {'stream' if stream else 'create'}"
                    chosen = dict(variants)
                    if sdk == "openai" and not stream:
                        chosen["full"] = full
                    if not stream:
                        chosen["plain"] = plain
                    times = _measure(chosen, client, sdk, stream, sizes)
                    rows.append(
                        _row(
                            f"{kind}: instrumented, recorded to SQLite, vs bare (ms/call)",
                            times["sqlite"],
                            times["bare"],
                            target=TARGET_RATIO,
                            note="loopback server, no think time: bare call = HTTP + SDK only; "
                            "instrumented = the same plus its ModelCalled, committed write-behind "
                            "(durability normal: no fsync)"
                            if sdk == "openai" and not stream
                            else "",
                        )
                    )
                    if "full" in times:
                        rows.append(
                            _row(
                                f"{kind}: instrumented, recorded to SQLite opened "
                                "durability='full', vs bare",
                                times["full"],
                                times["bare"],
                                target=None,
                                note="information: an fsync per call (the disk's flush time, "
                                "which other processes' writes can stretch to milliseconds)",
                            )
                        )
                    if "plain" in times:
                        rows.append(
                            _row(
                                f"{kind}: instrumented, recorded to SQLite with no redaction "
                                "policy, vs bare",
                                times["plain"],
                                times["bare"],
                                target=None,
                                note="information: the ledger opened with redaction=None; the "
                                "default policy looks for personal data and secrets in every "
                                "request and response"
                                if sdk == "openai"
                                else "",
                            )
                        )
                    rows.append(
                        _row(
                            f"{kind}: instrumented, recording nothing (the wrapper alone), vs bare",
                            times["discard"],
                            times["bare"],
                            target=None,
                            note="information: a port that keeps nothing; what is left is the "
                            "instrumentation's own work (request and response as JSON, secrets "
                            "scrubbed, chunks timed and assembled)"
                            if sdk == "openai" and not stream
                            else "",
                        )
                    )
                    rows.append(
                        _row(
                            f"{kind}: instrumented, recorded to a memory ledger, vs bare",
                            times["memory"],
                            times["bare"],
                            target=None,
                            note="information: the instrumentation and the recorder's work "
                            "without the database"
                            if sdk == "openai" and not stream
                            else "",
                        )
                    )
            think = (max(2, sizes[0] // 2), max(5, sizes[1] // 4))
            with LoopbackServer(responder=_answer, delay_s=THINK_S) as server:
                for sdk, stream, client in _cases(server):
                    if sdk != "openai":
                        continue
                    kind = f"{sdk} {'stream' if stream else 'create'}"
                    times = _measure({"bare": None, "sqlite": sqlite}, client, sdk, stream, think)
                    rows.append(
                        _row(
                            f"{kind}, server answering in {THINK_S * 1000:.0f} ms: "
                            "instrumented (SQLite) vs bare",
                            times["sqlite"],
                            times["bare"],
                            target=None,
                            note="information: a fast real model's latency; recording is the "
                            "same absolute cost",
                        )
                    )
        finally:
            sqlite.close()
            full.close()
            memory.close()
            plain.close()
    return rows


def profile(quick: bool = False) -> None:
    """Print a cProfile of instrumented streamed OpenAI calls recorded to SQLite."""
    count = QUICK[1] if quick else FULL[1]
    with (
        tempfile.TemporaryDirectory(prefix="agentledger-bench-instrument-") as directory,
        Ledger.open(f"sqlite:///{Path(directory) / 'instrument.db'}") as ledger,
        LoopbackServer(responder=_answer) as server,
    ):
        client = _clients(server.url)["openai"]()
        profiler = cProfile.Profile()
        profiler.enable()
        _round(ledger, client, "openai", True, count)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def main(argv: list[str]) -> int:
    """Print each row (``python -m bench.bench_instrument [--quick]``)."""
    for row in run(quick="--quick" in argv):
        print(f"{row['name']}: {row['value']} vs {row['baseline']} = {row['ratio']}x")
    return 0
