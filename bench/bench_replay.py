"""Offline replay of a corpus of recorded runs vs only reading and decoding them.

A corpus of 1,000 runs (``--quick``: 100) is recorded with scripted models into a SQLite file
ledger in a temporary directory: half are the bundled demo pipeline scenario, the rest are
reasoning, coordinator, tool-agent and router runs (an eighth each); every run's question
carries its number, so no two runs are byte-identical.

Baseline: reading and decoding each run the way any consumer would: ``ledger.events(run_id)``,
each event decoded into its catalogue class (``RecordedEvent.event``: upcast and validated),
plus every blob its payloads refer to (transitively: conversation chains included) through
``ledger.blobs``, one batched query per level. Measured: ``replay_run(ledger, run_id)`` for
every run (it reads the run itself, re-executes the agent with models and tools answering from
the record, and compares every event; each must come back identical). Target: replay time /
read time <= 3x (lower is better). An information row compares replay with reading the events
and only their direct blobs (what replay itself needs).

Timings are the best of ``REPEATS`` passes over the whole corpus, read and replay interleaved
so drift hits both alike. Run: ``python -m bench --only replay [--quick]``;
``python -m bench --only replay --profile`` prints where the replay's time goes.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentledger.agents import AgentConfig, run_agent
from agentledger.agents.models import ScriptedModel
from agentledger.agents.testing import (
    coordinator_script,
    load_scenario,
    reasoning_script,
    router_script,
    tool_agent_script,
)
from agentledger.ledger import Ledger, blob_refs_in
from agentledger.replay import replay_run

FULL_RUNS, QUICK_RUNS = 1_000, 100
REPEATS = 3
TARGET_RATIO = 3.0

RunSpec = tuple[str, str, dict[str, ScriptedModel], AgentConfig]
SCOUT: dict[str, Any] = {"name": "scout", "description": "finds places", "tools": ["find_pois"]}


# The corpus -----------------------------------------------------------------------------------


def pipeline_run(n: int) -> RunSpec:
    """The bundled demo pipeline scenario (plan, three tool steps, a cited answer)."""
    scenario = load_scenario()
    question = f"{scenario.question} (run {n})"
    return scenario.agent, question, scenario.models, scenario.config


def reasoning_run(n: int) -> RunSpec:
    """REASON/THINK/TOOL with a failed tool call, a repair, bad JSON and an evidence reask."""
    models = reasoning_script(
        plan=["plan?", {"plan": ["TOOL", "ANSWER"]}],
        choices=[{"tool": "geocode", "args": {"place": "Olde"}}, {"tool": ""}],
        repairs=[{"tool": "geocode", "args": {"place": "Old Town"}}],
        answer=["Here [poi:nope].", "Here [place:old-town]."],
    )
    return "reasoning", f"Where is Olde? (run {n})", models, AgentConfig(seed=n)


def coordinator_run(n: int) -> RunSpec:
    """A coordinator delegating one calculation to a worker."""
    models = coordinator_script(
        decisions=[
            {"Action": "DELEGATE", "Agent": "utility", "Task": "6*7"},
            {"Action": "DONE", "Summary": "42"},
        ],
        workers={"utility": [("calculator", {"expression": "6*7"})]},
    )
    return "coordinator", f"What is 6*7? (run {n})", models, AgentConfig()


def tools_run(n: int) -> RunSpec:
    """A tool agent asking a sub-agent, which calls find_pois."""
    models = tool_agent_script(
        turns=[("ask_scout", {"task": "cafe near Old Town"}), "See [poi:cafe-brasa]."],
        sub_agents={"scout": [("find_pois", {"near": "Old Town", "category": "cafe"}), "found"]},
    )
    return "tools", f"Coffee? (run {n})", models, AgentConfig(options={"sub_agents": [SCOUT]})


def router_run(n: int) -> RunSpec:
    """A router run that goes over its budget."""
    step = {"agent": "geo", "args": {"place": "Old Town"}}
    models = router_script(plan={"router_plan": [step, step]}, answer="At [place:old-town].")
    return "router", f"Where is Old Town? (run {n})", models, AgentConfig(options={"budget": 1})


MIX: tuple[Callable[[int], RunSpec], ...] = (
    pipeline_run,
    pipeline_run,
    pipeline_run,
    pipeline_run,
    reasoning_run,
    coordinator_run,
    tools_run,
    router_run,
)
"""Run n is ``MIX[n % 8]``: half pipeline, an eighth each of the other orchestrations."""


def record_corpus(ledger: Ledger, count: int) -> list[str]:
    """Record ``count`` runs of the mix; return their ids."""
    ids: list[str] = []
    for n in range(count):
        agent, question, models, config = MIX[n % len(MIX)](n)
        ids.append(run_agent(ledger, agent, question, models=models, config=config).run_id)
    return ids


@contextmanager
def corpus(count: int) -> Iterator[tuple[Ledger, list[str]]]:
    """A SQLite file ledger in a fresh temporary directory holding ``count`` recorded runs."""
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-replay-") as directory:
        ledger = Ledger.open(f"sqlite:///{Path(directory) / 'replay.db'}")
        try:
            yield ledger, record_corpus(ledger, count)
        finally:
            ledger.close()


# What is timed --------------------------------------------------------------------------------


def read_all(ledger: Ledger, run_ids: list[str]) -> int:
    """The baseline: each run's events, decoded, and every blob they refer to, transitively."""
    values = 0
    for run_id in run_ids:
        records = ledger.events(run_id)
        values += len([record.event for record in records])
        refs = {ref for record in records for ref in blob_refs_in(record.payload)}
        seen: set[str] = set()
        while refs:
            blobs = ledger.blobs(sorted(refs))
            seen |= refs
            values += len(blobs)
            refs = {ref for blob in blobs.values() for ref in blob_refs_in(blob)} - seen
    return values


def read_direct(ledger: Ledger, run_ids: list[str]) -> int:
    """Each run's events and only the blobs their payloads name (information row)."""
    values = 0
    for run_id in run_ids:
        records = ledger.events(run_id)
        refs = sorted({ref for record in records for ref in blob_refs_in(record.payload)})
        values += len(records) + len(ledger.blobs(refs))
    return values


def replay_all(ledger: Ledger, run_ids: list[str]) -> int:
    """Replay every run; each must be identical. Returns the events compared."""
    compared = 0
    for run_id in run_ids:
        result = replay_run(ledger, run_id)
        if not result.identical:
            msg = f"run {run_id} did not replay identically: {result.divergence}"
            raise AssertionError(msg)
        compared += result.events
    return compared


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _measure(ledger: Ledger, run_ids: list[str]) -> tuple[float, float, float]:
    """Best-of-``REPEATS`` seconds of (replay, full read, direct read), interleaved."""
    ours = full = direct = float("inf")
    for _ in range(REPEATS):  # interleaved, best of each, so drift hits all alike
        full = min(full, _timed(lambda: read_all(ledger, run_ids)))
        direct = min(direct, _timed(lambda: read_direct(ledger, run_ids)))
        ours = min(ours, _timed(lambda: replay_all(ledger, run_ids)))
    return ours, full, direct


def run(quick: bool = False) -> list[dict[str, object]]:
    """Replay vs read over the corpus: the target row and an information row."""
    count = QUICK_RUNS if quick else FULL_RUNS
    with corpus(count) as (ledger, run_ids):
        events = sum(len(ledger.events(run_id)) for run_id in run_ids)
        ours, full, direct = _measure(ledger, run_ids)
    per_run = round(ours * 1000 / count, 3)
    return [
        {
            "name": f"replay_run over {count:,} runs ({events:,} events) vs reading them (ms/run)",
            "value": per_run,
            "baseline": round(full * 1000 / count, 3),
            "ratio": round(ours / full, 3),
            "target": TARGET_RATIO,
            "unit": "ms",
            "higher_is_better": False,
            "note": "baseline: ledger.events, each event decoded into its catalogue class, + "
            "every blob the run refers to (transitively, conversation chains included); "
            "SQLite file in a temp dir; corpus: half demo "
            "pipeline, an eighth each reasoning/coordinator/tools/router",
        },
        {
            "name": "replay_run vs ledger.events + directly named blobs only (ms/run)",
            "value": per_run,
            "baseline": round(direct * 1000 / count, 3),
            "ratio": round(ours / direct, 3),
            "unit": "ms",
            "higher_is_better": False,
            "note": "information: replay's own work on top of the reading it needs",
        },
    ]


def profile(quick: bool = False, top: int = 30) -> None:
    """Print a cProfile of replaying the corpus: top ``top`` by cumulative, then own time."""
    count = QUICK_RUNS if quick else FULL_RUNS
    with corpus(count) as (ledger, run_ids):
        profiler = cProfile.Profile()
        gc.collect()
        profiler.enable()
        replay_all(ledger, run_ids)
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)


def main(argv: list[str]) -> int:
    """Print each row (``python -m bench.bench_replay [--quick]``)."""
    for row in run(quick="--quick" in argv):
        print(f"{row['name']}: {row['value']} vs {row['baseline']} = {row['ratio']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
