"""Verify: recomputing every hash of one long run and of many short runs, vs reading them.

Two SQLite ledgers are recorded with the realistic workload of ``bench_ledger`` (a step is a
model call over a growing conversation, a plan, one or two tools, a delta, sometimes an
answer): one long run, and many short runs. ``ledger.verify()`` is timed against the baseline
any consumer pays: reading every run's events (``ledger.events``) and every blob they name,
transitively (conversation chains included). Throughput is reported in MB/s of canonical bytes
(events' envelopes plus blobs), the unit of the targets: verify >= 60 MB/s on one core, and
<= 1.5x the cost of reading and decoding the same events, for one long run and for many short
ones. Best of ``REPEATS``, verify and read interleaved.
"""

from __future__ import annotations

import time
from typing import Any

from agentledger.ledger import Ledger, blob_refs_in, canonical_json
from bench._workload import make_run_plans
from bench.bench_ledger import fresh_dir, record_batched

LONG_STEPS, QUICK_LONG_STEPS = 2_000, 300
SHORT_RUNS, QUICK_SHORT_RUNS = 1_000, 150
REPEATS = 3
TARGET_RATIO = 1.5
TARGET_MB_S = 60.0


def _read_all(ledger: Ledger, *, count: bool = False) -> int:
    """Read every run's events and every blob they name, transitively.

    With ``count`` (outside the timing), the canonical bytes of what was read.
    """
    total = 0
    for run_id in ledger.run_ids():
        records = ledger.events(run_id)
        if count:
            total += sum(len(canonical_json(r.envelope())) for r in records)
        refs = {ref for r in records for ref in blob_refs_in(r.payload)}
        seen: set[str] = set()
        while refs:
            found = ledger.blob_bytes(sorted(refs))
            seen |= refs
            total += sum(len(data) for data in found.values()) if count else 0
            nested: set[str] = set()
            for ref in found:
                nested |= set(blob_refs_in(ledger.blob(ref)))
            refs = nested - seen
    return total


def _best(fn: Any) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(REPEATS):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def _measure(label: str, runs: int, steps: int) -> list[dict[str, Any]]:
    with fresh_dir() as directory, Ledger.open(f"sqlite:///{directory / 'l.db'}") as ledger:
        record_batched(ledger, make_run_plans(runs, steps=steps))
        size = _read_all(ledger, count=True)
        read_s, _ = _best(lambda: _read_all(ledger))
        verify_s, report = _best(ledger.verify)
        if not report.ok:
            msg = f"the {label} ledger does not verify: {report.problems[:3]}"
            raise AssertionError(msg)
    mb = size / 1e6
    return [
        {
            "name": f"verify {label} vs reading its events and blobs ({mb:.1f} MB canonical)",
            "value": round(verify_s * 1000, 1),
            "baseline": round(read_s * 1000, 1),
            "target": TARGET_RATIO,
            "unit": "ms",
            "higher_is_better": False,
            "note": "baseline: ledger.events + every named blob, transitively",
        },
        {
            "name": f"verify {label}: canonical MB/s",
            "value": round(mb / verify_s, 1),
            "baseline": TARGET_MB_S,
            "ratio": round(mb / verify_s / TARGET_MB_S, 3),
            "target": 1.0,
            "unit": "MB/s",
            "note": "ratio = throughput / the 60 MB/s target",
        },
    ]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Verify one long run and many short runs."""
    long_steps = QUICK_LONG_STEPS if quick else LONG_STEPS
    short_runs = QUICK_SHORT_RUNS if quick else SHORT_RUNS
    return [
        *_measure(f"one {long_steps:,}-step run", 1, long_steps),
        *_measure(f"{short_runs:,} short runs", short_runs, 8),
    ]
