"""Run diff cost: `diff_runs` on two 1,000-event runs vs only reading them.

Two pipeline-shaped runs (a planning step, ~165 execute steps of StepStarted, ModelCalled,
ToolCalled, ToolReturned, DeltaApplied, StepCompleted, a synthesis) are recorded through the
public recording API into a SQLite file in a temporary directory. Run b differs from run a in
five places: one tool's arguments (and so its result and delta), one model answer, one
inserted step, one removed step and the final answer.

Baseline: reading both runs the way any consumer would, ``ledger.events`` for each plus every
blob their payloads refer to (transitively: message chains included), in one batched query per
level. Measured: ``diff_runs(ledger, a, b)`` from scratch (it reads the events itself). Target:
diff time / read time <= 3x (lower is better). A second row diffs two identical runs.

Run: ``python -m bench --only diff [--quick]``; ``--profile`` prints where the diff's time goes.
"""

from __future__ import annotations

import cProfile
import gc
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentledger.ledger import Ledger, RunRecorder, blob_refs_in
from agentledger.replay import diff_runs

REPEATS = 5
TARGET_RATIO = 3.0
FULL_STEPS, QUICK_STEPS = 165, 40
SYSTEM = "You execute one step of a plan by calling exactly one tool. " * 12
TOOLS = ("weather", "transit", "geocode", "find_pois", "calculator")


def _step(run: RunRecorder, index: int, *, tool: str | None = None, variant: str = "") -> None:
    """One execute step: model call answering a tool call, the tool, a delta."""
    tool = tool or TOOLS[index % len(TOOLS)]
    arguments = {"place": f"place-{index}", "day": index % 7, "variant": variant or None}
    task = json.dumps({"step": index, "tool": tool, "args": arguments}, sort_keys=True)
    with run.step("execute", {"plan_index": index, "tool": tool}) as step_id:
        run.model_call(
            provider="scripted",
            model="executor",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}],
            response={
                "role": "assistant",
                "content": f"calling {tool}{variant}",
                "tool_calls": [{"id": f"c{index}", "name": tool, "arguments": arguments}],
            },
            usage={"input_tokens": 180 + index % 13, "output_tokens": 20},
            cost_usd=0.0004,
            latency_ms=250.0 + index % 17,
            step_id=step_id,
            actor="executor",
        )
        result = {"value": index * 3, "unit": "x", "evidence_id": f"{tool}:{index}{variant}"}
        call_id = run.tool(tool, arguments, result=result, latency_ms=12.5, step_id=step_id)
        run.delta(
            {"results": {step_id: {"tool": tool, "data": result}}, "evidence": {call_id: [index]}},
            step_id=step_id,
        )


def record_run(ledger: Ledger, steps: int, *, changed: bool) -> str:
    """Record one run of `steps` execute steps; `changed` makes run b's five differences."""
    with ledger.record_run("bench-pipeline", {"question": "bench"}) as run:
        with run.step("plan") as step_id:
            run.model_call(
                provider="scripted",
                model="planner",
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "go"}],
                response={"role": "assistant", "content": json.dumps({"steps": steps})},
                usage={"input_tokens": 300, "output_tokens": 40},
                step_id=step_id,
                actor="planner",
            )
            run.plan({"steps": steps}, step_id=step_id)
        for index in range(steps):
            if changed and index == steps * 3 // 4:
                continue  # removed step
            if changed and index == steps // 2:
                _step(run, 10_000, tool="find_pois")  # inserted step
            if changed and index == steps // 4:
                _step(run, index, variant="-b")  # changed arguments, result, answer
            else:
                _step(run, index)
        with run.step("synthesize") as step_id:
            run.model_call(
                provider="scripted",
                model="synthesizer",
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "?"}],
                response={"role": "assistant", "content": "b answer" if changed else "a answer"},
                usage={"input_tokens": 900, "output_tokens": 60},
                step_id=step_id,
                actor="synthesizer",
            )
        run.answer("b answer" if changed else "a answer", step_id=step_id)
    return run.run_id


def read_runs(ledger: Ledger, run_ids: tuple[str, str]) -> int:
    """The baseline: every event of both runs and every blob they refer to, transitively."""
    values = 0
    for run_id in run_ids:
        records = ledger.events(run_id)
        values += len(records)
        refs = {ref for record in records for ref in blob_refs_in(record.payload)}
        seen: set[str] = set()
        while refs:
            blobs = ledger.blobs(sorted(refs))
            seen |= refs
            values += len(blobs)
            refs = {ref for blob in blobs.values() for ref in blob_refs_in(blob)} - seen
    return values


def read_events(ledger: Ledger, run_ids: tuple[str, str]) -> int:
    """Events only, no blobs: the floor under any diff (information row)."""
    return sum(len(ledger.events(run_id)) for run_id in run_ids)


def _best(fn: Callable[[], Any]) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _measure(
    ledger: Ledger, a: str, b: str, reader: Callable[[Ledger, tuple[str, str]], int] = read_runs
) -> tuple[float, float]:
    ours = base = float("inf")
    for _ in range(REPEATS):  # interleaved, best of each, so drift hits both alike
        base = min(base, _best(lambda: reader(ledger, (a, b))))
        ours = min(ours, _best(lambda: diff_runs(ledger, a, b)))
    return ours, base


def _setup(directory: str, steps: int) -> tuple[Ledger, str, str, str]:
    ledger = Ledger.open(f"sqlite:///{Path(directory) / 'diff.db'}")
    a = record_run(ledger, steps, changed=False)
    same = record_run(ledger, steps, changed=False)
    b = record_run(ledger, steps, changed=True)
    return ledger, a, same, b


def run(quick: bool = False) -> list[dict[str, object]]:
    """Measure diff time against read time for a differing and an identical pair."""
    steps = QUICK_STEPS if quick else FULL_STEPS
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-diff-") as directory:
        ledger, a, same, b = _setup(directory, steps)
        try:
            events = (len(ledger.events(a)), len(ledger.events(b)))
            diff = diff_runs(ledger, a, b)
            assert not diff.identical
            assert diff_runs(ledger, a, same).identical
            changed = len(diff.changed_units)
            for label, other in ((f"differing in {changed} steps", b), ("identical", same)):
                ours, base = _measure(ledger, a, other)
                rows.append(
                    {
                        "name": f"diff_runs, two runs of {events[0]:,}/{events[1]:,} events, "
                        f"{label} (ms)",
                        "value": round(ours * 1000, 2),
                        "baseline": round(base * 1000, 2),
                        "ratio": round(ours / base, 3),
                        "target": TARGET_RATIO,
                        "unit": "ms",
                        "higher_is_better": False,
                        "note": "baseline: ledger.events for both runs + every blob they "
                        "refer to (transitively); SQLite file in a temp dir"
                        if label == "identical"
                        else "",
                    }
                )
            ours, base = _measure(ledger, a, b, read_events)
            rows.append(
                {
                    "name": f"diff_runs vs ledger.events only (no blobs), {changed} steps differ",
                    "value": round(ours * 1000, 2),
                    "baseline": round(base * 1000, 2),
                    "ratio": round(ours / base, 3),
                    "unit": "ms",
                    "higher_is_better": False,
                    "note": "information: the diff's own work on top of decoding the events",
                }
            )
        finally:
            ledger.close()
    return rows


def profile(quick: bool = False) -> None:
    """Print a cProfile of `diff_runs` on the differing pair."""
    steps = QUICK_STEPS if quick else FULL_STEPS
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-diff-") as directory:
        ledger, a, _same, b = _setup(directory, steps)
        try:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(REPEATS):
                diff_runs(ledger, a, b)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        finally:
            ledger.close()


def main(argv: list[str]) -> int:
    """Print each row (``python -m bench.bench_diff [--quick]``)."""
    for row in run(quick="--quick" in argv):
        print(f"{row['name']}: {row['value']} vs {row['baseline']} = {row['ratio']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
