"""Report page open time: `agentledger report` of a 10,000-event run opened in headless Chromium.

A run of agent steps (each a StepStarted, a model call, a tool call with its result, a delta, a
StepCompleted; the model calls continue one conversation for ten steps, then start the next,
and every 25th tool returns a long document) is recorded into a SQLite ledger under
``build/bench-tmp``, and its report is written the way ``agentledger report RUN -o FILE`` writes
it. Chromium then opens it with ``--dump-dom`` (which returns once the page has loaded and its
script has run), best of 3; the baseline is the same Chromium opening a trivial page, measured
in the same run, so browser start-up is not charged to the report. Target: the report's own
work (report open time minus blank open time) is at most 3 s; the ratio is that difference
divided by 3 s, so PASS means under 3 s.

A second row is the page's bytes per event, against the same figure for a run a tenth the size
(same shape): the page must stay linear in the run's length (target <= 1.25x).

Run: ``python -m bench --only report [--quick]``; ``--profile`` prints where rendering goes.
"""

from __future__ import annotations

import cProfile
import pstats
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentledger.cli._report import build_report
from agentledger.cli._report_html import render_report
from agentledger.ledger import Ledger, RunRecorder
from bench._workload import TextMaker
from bench.bench_ledger import fresh_dir

FULL_EVENTS, QUICK_EVENTS = 10_000, 2_000
EVENTS_PER_STEP = 6
CONVERSATION_STEPS = 10
LONG_EVERY = 25
REPEATS = 3
BUDGET_SECONDS = 3.0
LINEAR_TARGET = 1.25
SEED = 3003
CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
BLANK_PAGE = (
    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>blank</title></head>'
    "<body><p>blank</p></body></html>\n"
)


def _step(run: RunRecorder, tm: TextMaker, index: int, messages: list[dict[str, Any]]) -> None:
    """One agent step: a model call continuing `messages`, a tool and its result, a delta."""
    tool = ("search", "fetch", "calculator")[index % 3]
    arguments = {"query": tm.text(120), "top_k": 3}
    with run.step("act", {"index": index, "tool": tool}) as step_id:
        response = {
            "role": "assistant",
            "content": tm.text(200),
            "tool_calls": [{"id": f"c{index}", "name": tool, "arguments": arguments}],
        }
        call = run.model_call(
            provider="bench",
            model="bench-model-1",
            messages=messages,
            response=response,
            params={"temperature": 0.2},
            usage={"input_tokens": 400 + 120 * len(messages), "output_tokens": 60},
            cost_usd=0.0004,
            latency_ms=640.0,
            step_id=step_id,
            actor="executor",
        )
        body = tm.text(8_000 if index % LONG_EVERY == LONG_EVERY - 1 else 300)
        result = {"evidence_id": f"{tool}:{index}", "text": body, "score": 0.5}
        call_id, position = run.tool_call(tool, arguments, step_id=step_id)
        run.tool_result(
            call_id, ok=True, type=tool, data=result, latency_ms=42.0, caused_by=position
        )
        run.delta(
            {"steps": {f"s{index % 50}": {"tool": tool, "index": index}}, "last": index},
            step_id=step_id,
            caused_by=call.position,
        )
    messages.append(response)
    messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": body})


def record_run(ledger: Ledger, events: int) -> str:
    """Record one run of about `events` events; return its id."""
    tm = TextMaker(SEED)
    system = {"role": "system", "content": tm.text(1_200)}
    steps = (events - 4) // EVENTS_PER_STEP  # besides: RunStarted, the plan, answer, RunCompleted
    with ledger.record_run("bench-report", input={"question": tm.text(200)}) as run:
        run.plan({"steps": steps, "goal": tm.text(200)})
        messages: list[dict[str, Any]] = []
        for index in range(steps):
            if index % CONVERSATION_STEPS == 0:
                messages = [system, {"role": "user", "content": tm.text(300)}]
            _step(run, tm, index, messages)
        run.answer(tm.text(600), evidence_ids=[f"search:{i}" for i in range(0, steps, 300)])
    return run.run_id


def write_report(ledger: Ledger, run_id: str, path: Path) -> tuple[int, float]:
    """Write the run's page as ``agentledger report -o`` does; its bytes and the seconds taken."""
    started = time.perf_counter()
    page = render_report(build_report(ledger, run_id))
    path.write_text(page, encoding="utf-8")
    return len(page.encode()), time.perf_counter() - started


def open_seconds(page: Path, profile: Path) -> float:
    """Best-of-`REPEATS` wall time for headless Chromium to load `page` and dump its DOM."""
    assert CHROMIUM is not None
    command = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom"]
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        done = subprocess.run(
            [*command, page.as_uri()], capture_output=True, timeout=300, check=True
        )
        best = min(best, time.perf_counter() - started)
        if b"</html>" not in done.stdout:
            msg = f"chromium printed no DOM for {page}"
            raise AssertionError(msg)
    return best


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure the report's open time against a blank page, and its bytes per event."""
    target_events = QUICK_EVENTS if quick else FULL_EVENTS
    with fresh_dir() as directory, Ledger.open(f"sqlite:///{directory / 'ledger.db'}") as ledger:
        run_id = record_run(ledger, target_events)
        small_id = record_run(ledger, target_events // 10)
        events = ledger.run(run_id).event_count
        small_events = ledger.run(small_id).event_count
        page = directory / "report.html"
        size, render = write_report(ledger, run_id, page)
        small_size, _ = write_report(ledger, small_id, directory / "small.html")
        per_event, small_per_event = size / events, small_size / small_events
        rows: list[dict[str, Any]] = [
            {
                "name": f"page bytes per event, {events:,}-event run vs {small_events:,}",
                "value": round(per_event),
                "baseline": round(small_per_event),
                "ratio": round(per_event / small_per_event, 3),
                "target": LINEAR_TARGET,
                "unit": "B",
                "higher_is_better": False,
                "note": (
                    f"page {size / 1e6:.2f} MB, rendered in {render:.2f} s; baseline: the same "
                    f"workload at {small_events:,} events; a ratio near 1 means linear"
                ),
            }
        ]
        name = f"open the report of a {events:,}-event run in headless chromium"
        if CHROMIUM is None:
            rows.append(
                {
                    "name": name,
                    "value": 0,
                    "note": "SKIPPED: chromium is not installed (apt-get install -y chromium)",
                }
            )
            return rows
        blank = directory / "blank.html"
        blank.write_text(BLANK_PAGE, encoding="utf-8")
        profile = directory / "chromium-profile"
        open_seconds(blank, profile)  # warm the profile and the file cache alike
        base = open_seconds(blank, profile)
        ours = open_seconds(page, profile)
    rows.append(
        {
            "name": name,
            "value": round(ours, 3),
            "baseline": round(base, 3),
            "ratio": round((ours - base) / BUDGET_SECONDS, 3),
            "target": 1.0,
            "unit": "s",
            "higher_is_better": False,
            "note": (
                "--dump-dom wall time, best of 3; baseline: a blank page in the same chromium; "
                f"ratio = (report - blank) / {BUDGET_SECONDS:g} s, so PASS means the report's "
                f"own load takes under {BUDGET_SECONDS:g} s"
            ),
        }
    )
    return rows


def profile(quick: bool = False) -> None:
    """Print a cProfile of building and rendering the report (not the browser's share)."""
    target_events = QUICK_EVENTS if quick else FULL_EVENTS
    with fresh_dir() as directory, Ledger.open(f"sqlite:///{directory / 'ledger.db'}") as ledger:
        run_id = record_run(ledger, target_events)
        profiler = cProfile.Profile()
        profiler.enable()
        write_report(ledger, run_id, directory / "report.html")
        profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def main(argv: list[str]) -> int:
    """Print each row (a measurement, not a gate)."""
    for row in run(quick="--quick" in argv):
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
