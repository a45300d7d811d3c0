"""Long runs: record and replay a tools-agent run of 10k events against one of 1k events.

The tools agent calls a tool every turn, so its conversation grows by two messages a turn and
each model call re-sends the whole history: the work the ledger does per call must not grow with
the history, or a run's cost grows with the square of its length. The runs are recorded into a
``memory://`` ledger and into a SQLite file, with a scripted model, and replayed with
``replay_run``; each figure is the
process's CPU time (``time.process_time``: what other work on a shared machine takes does not
count), the best of 3 (short run) or 2 (long run). Target: time(10k) / time(1k) <= 12 for
both (10x the events, within noise of linear).

What keeps it linear: the agents hand the recorder read-only dumps of their (immutable) messages,
dumped once per message, so the recorder compares the history it stored by identity and stores
only what is new; the scripted model counts the prompt's characters for its token estimate once
per message (the same figures as counting the whole prompt). What is left per call is a few
C-level passes over the list of messages (building the request), a few percent of the time at
10k events, and Python's cyclic garbage collector, whose full collections walk a heap that grows
with the run: a ``memory://`` ledger holds the whole run as Python objects, so its ratios sit
above SQLite's (with the collector off, both ``memory://`` ratios measured ~10x). The scripted
model keeps only its last request, as a remote model keeps none.
"""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from agentledger.agents import AgentConfig, run_agent
from agentledger.agents.testing import tool_agent_script
from agentledger.ledger import Ledger
from agentledger.replay import replay_run

TURNS, QUICK_TURNS = (200, 2000), (100, 1000)
TARGET = 12.0
SHORT_REPEATS, LONG_REPEATS = 3, 2
STORES = ("memory", "sqlite")


def _record(ledger: Ledger, turns: int) -> tuple[str, float]:
    """Record a tools-agent run of ``turns`` tool calls: (its id, CPU seconds).

    The scripted model stands in for a remote model: it keeps only its last request (keeping
    every one, each holding the history so far, would grow with the square of the run's length
    and charge the collector's walks over it to the ledger).
    """
    calls = [
        ("weather", {"place": "Harbour Front", "date": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}"})
        for i in range(turns)
    ]
    models = tool_agent_script(turns=[*calls, "Done."], keep_requests=1)
    config = AgentConfig.model_validate(
        {
            "limits": {
                "max_steps": turns + 5,
                "tool_call_cap": turns + 5,
                "token_budget": 10**9,
                "repeat_limit": 10**6,
                "tool_fail_cap": 10**6,
            },
            "options": {"max_iterations": turns + 2},
        }
    )
    started = time.process_time()
    run_id = run_agent(ledger, "tools", "Weather?", models=models, config=config).run_id
    return run_id, time.process_time() - started


def _once(turns: int, store: str) -> tuple[int, float, float]:
    """(events, record seconds, replay seconds) of a tools-agent run of ``turns`` tool calls."""
    with tempfile.TemporaryDirectory() as folder:
        url = "memory://" if store == "memory" else f"sqlite:///{Path(folder) / 'long.db'}"
        return _timed(url, turns)


def _timed(url: str, turns: int) -> tuple[int, float, float]:
    with Ledger.open(url) as ledger:
        run_id, recorded = _record(ledger, turns)
        events = ledger.run(run_id).event_count
        gc.collect()
        started = time.process_time()
        if not replay_run(ledger, run_id, raise_on_divergence=False).identical:
            msg = f"the {turns}-turn run did not replay identically"
            raise AssertionError(msg)
        replayed = time.process_time() - started
    return events, recorded, replayed


def _best(turns: int, repeats: int, store: str) -> tuple[int, float, float]:
    """The fastest record and the fastest replay of ``repeats`` runs (a shared machine is noisy)."""
    runs = [_once(turns, store) for _ in range(repeats)]
    return runs[0][0], min(r[1] for r in runs), min(r[2] for r in runs)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time the short run (best of 3) and the long run (best of 2); ratios long / short."""
    short_turns, long_turns = QUICK_TURNS if quick else TURNS
    rows = []
    for store in STORES:
        short = _best(short_turns, SHORT_REPEATS, store)
        long = _best(long_turns, LONG_REPEATS, store)
        for index, what in ((1, "record"), (2, "replay")):
            name = f"{what} a tools-agent run of {long[0]:,} events vs {short[0]:,} events"
            rows.append(
                {
                    "name": f"{name}, {store}",
                    "value": round(long[index], 3),
                    "baseline": round(short[index], 3),
                    "target": TARGET,
                    "unit": "s CPU",
                    "higher_is_better": False,
                    "note": "linear would be ~10x; scripted model; best of 3 (1k) / 2 (10k)",
                }
            )
    return rows


def profile(quick: bool = False) -> None:
    """Profile recording and replaying the long run (``--profile``): its top functions."""
    import cProfile
    import pstats

    turns = (QUICK_TURNS if quick else TURNS)[1]
    profiler = cProfile.Profile()
    profiler.enable()
    _once(turns, "memory")
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
