"""Verify: recomputing every hash of one long run and of many short runs, vs reading them.

Two SQLite ledgers are recorded with the realistic workload of ``bench_ledger`` (a step is a
model call over a growing conversation, a plan, one or two tools, a delta, sometimes an
answer): one long run, and many short runs (10,000 at full size). ``ledger.verify()`` is timed
against the baseline any consumer pays: reading every run's events (``ledger.events``) and every
blob they name, transitively (conversation chains included), in one ``ledger.blobs`` query per
level. Throughput is reported in MB/s of canonical bytes (events' envelopes plus blobs), the
unit of the targets: verify >= 60 MB/s on one core, and <= 1.5x the cost of reading and decoding
the same events, for one long run and for many short ones. Best of ``REPEATS``, verify and read
interleaved. An information row gives the reading baseline's own MB/s: where it is below 60,
the 60 MB/s target asks verify to beat reading alone, which it cannot (verify reads too).

Memory: one long run (about 100,000 events at full size) is verified in a fresh process; the row
is its peak RSS above the RSS once the ledger is open (Linux: the peak is reset through
``/proc/self/clear_refs`` first). Target <= 40 MB, whatever the length of the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentledger.ledger import Ledger, blob_refs_in, canonical_json
from bench._workload import make_run_plans
from bench.bench_ledger import fresh_dir, record_batched

LONG_STEPS, QUICK_LONG_STEPS = 2_000, 300
SHORT_RUNS, QUICK_SHORT_RUNS = 10_000, 150
MEMORY_STEPS, QUICK_MEMORY_STEPS = 14_800, 3_000
"""About 100,000 and 20,000 events (a step records about 6.75)."""
REPEATS = 3
TARGET_RATIO = 1.5
TARGET_MB_S = 60.0
TARGET_RSS_MB = 40.0

_MEMORY_PROBE = """
import json, sys
from agentledger.ledger import Ledger

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no " + field)

with Ledger.open(sys.argv[1], read_only=True) as ledger:
    before = rss("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    report = ledger.verify()
    print(json.dumps({"before": before, "peak": rss("VmHWM"), "ok": report.ok,
                      "events": report.events_checked}))
"""


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
            found = ledger.blobs(sorted(refs))
            seen |= refs
            if count:
                total += sum(len(canonical_json(value)) for value in found.values())
            refs = {ref for value in found.values() for ref in blob_refs_in(value)} - seen
    return total


def _measure(label: str, runs: int, steps: int) -> list[dict[str, Any]]:
    with fresh_dir() as directory, Ledger.open(f"sqlite:///{directory / 'l.db'}") as ledger:
        record_batched(ledger, make_run_plans(runs, steps=steps))
        size = _read_all(ledger, count=True)
        read_s = verify_s = float("inf")
        report = None
        for _ in range(REPEATS):
            started = time.perf_counter()
            _read_all(ledger)
            read_s = min(read_s, time.perf_counter() - started)
            started = time.perf_counter()
            report = ledger.verify()
            verify_s = min(verify_s, time.perf_counter() - started)
        assert report is not None
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
            "note": "baseline: ledger.events + every named blob, transitively (ledger.blobs)",
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
        {
            "name": f"reading {label} (the baseline above): canonical MB/s",
            "value": round(mb / read_s, 1),
            "baseline": TARGET_MB_S,
            "ratio": round(mb / read_s / TARGET_MB_S, 3),
            "target": None,
            "unit": "MB/s",
            "note": "information: below 1.0x, reading alone is slower than the verify target",
        },
    ]


def _memory(steps: int) -> list[dict[str, Any]]:
    """Peak RSS of verifying one long run, in a fresh process, above its RSS once open."""
    if not Path("/proc/self/clear_refs").exists():
        return []
    with fresh_dir() as directory:
        url = f"sqlite:///{directory / 'l.db'}"
        with Ledger.open(url) as ledger:
            record_batched(ledger, make_run_plans(1, steps=steps))
        done = subprocess.run(
            [sys.executable, "-c", _MEMORY_PROBE, url],
            check=True,
            capture_output=True,
            text=True,
        )
    probe = json.loads(done.stdout)
    if not probe["ok"]:
        msg = "the long run does not verify"
        raise AssertionError(msg)
    above = (probe["peak"] - probe["before"]) / 1e6
    return [
        {
            "name": f"verify one {probe['events']:,}-event run: peak RSS above the opened ledger",
            "value": round(above, 1),
            "baseline": TARGET_RSS_MB,
            "ratio": round(above / TARGET_RSS_MB, 3),
            "target": 1.0,
            "unit": "MB",
            "higher_is_better": False,
            "note": "fresh process; ratio = MB / the 40 MB target",
        }
    ]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Verify one long run and many short runs; the peak memory of verifying a longer one."""
    long_steps = QUICK_LONG_STEPS if quick else LONG_STEPS
    short_runs = QUICK_SHORT_RUNS if quick else SHORT_RUNS
    return [
        *_measure(f"one {long_steps:,}-step run", 1, long_steps),
        *_measure(f"{short_runs:,} short runs", short_runs, 8),
        *_memory(QUICK_MEMORY_STEPS if quick else MEMORY_STEPS),
    ]
