"""World state at the end of a long run: from a snapshot vs a full fold.

Records one run of 100,000 small deltas (``--quick``: 10,000) through the public recording API
(``record_run`` and ``delta`` in ``batch()`` blocks of 1,000) on a SQLite file in a fresh
directory, writes its snapshots with ``take_snapshots(every=1000)``, then times
``world_state(ledger, run, snapshots=True)`` at the last position (the newest valid snapshot
plus the events after it) against ``world_state(ledger, run)`` (read and fold every event).
Target: the snapshot read is >= 50x faster; ratio = full-fold seconds / snapshot seconds.

Information rows: the worst case for a snapshot read (the position just before the next
snapshot falls due, so 999 deltas are folded after the snapshot) and the one-off cost of
writing the snapshots. Both reads are checked to give the same state. Timings are the best of
several (the worst case: one full fold), full fold and snapshot read interleaved so drift
hits both alike.

Run: ``python -m bench --only projections [--quick]``.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from typing import Any

from agentledger.ledger import Ledger
from agentledger.projections import take_snapshots, world_state
from agentledger.projections._sql import engine_for
from bench.bench_fold import make_deltas
from bench.bench_ledger import fresh_dir

FULL_DELTAS, QUICK_DELTAS = 100_000, 10_000
EVERY = 1_000
BATCH = 1_000
TARGET_SPEEDUP = 50.0
FULL_REPEATS = 3
SNAPSHOT_REPEATS = 20


def record_long_run(ledger: Ledger, deltas: list[dict[str, Any]]) -> str:
    """Record one run applying `deltas`, a batch (one transaction) per 1,000 deltas."""
    with ledger.record_run("bench-projections", input={"deltas": len(deltas)}) as run:
        for start in range(0, len(deltas), BATCH):
            with run.batch():
                for delta in deltas[start : start + BATCH]:
                    run.delta(delta)
        return run.run_id


def _best(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    gc.collect()
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def _compare(ledger: Ledger, run_id: str, at: int, repeats: int) -> tuple[float, float]:
    """Best full-fold and snapshot seconds for the state at `at`, interleaved; checks equality."""
    full = cached = float("inf")
    for _ in range(repeats):
        seconds, expected = _best(lambda: world_state(ledger, run_id, at), 1)
        full = min(full, seconds)
        seconds, got = _best(
            lambda: world_state(ledger, run_id, at, snapshots=True), SNAPSHOT_REPEATS
        )
        cached = min(cached, seconds)
        if got != expected:
            msg = f"the snapshot read disagrees with the full fold at position {at}"
            raise AssertionError(msg)
    return full, cached


def _row(name: str, full: float, cached: float, target: float | None, note: str) -> dict[str, Any]:
    return {
        "name": name,
        "value": round(cached * 1000, 3),
        "baseline": round(full * 1000, 1),
        "ratio": round(full / cached, 1),
        "target": target,
        "unit": "ms",
        "note": note,
    }


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure the snapshot read against a full fold; return the harness rows."""
    count = QUICK_DELTAS if quick else FULL_DELTAS
    deltas = make_deltas(count)
    with fresh_dir() as directory, Ledger.open(f"sqlite:///{directory / 'ledger.db'}") as ledger:
        started = time.perf_counter()
        run_id = record_long_run(ledger, deltas)
        record_seconds = time.perf_counter() - started
        started = time.perf_counter()
        written = take_snapshots(ledger, run_id, every=EVERY)
        snapshot_seconds = time.perf_counter() - started
        last = ledger.run(run_id).event_count
        full, cached = _compare(ledger, run_id, last, FULL_REPEATS)
        worst_at = count  # delta k is at position k + 1: this is the delta before the last
        worst_full, worst_cached = _compare(ledger, run_id, worst_at, 1)
        stored, canonical = _snapshot_bytes(ledger)
        engine_for(ledger).dispose()
    speedup_note = (
        "value = world_state(snapshots=True) in ms, baseline = full fold in ms (SQLite file); "
        "ratio = full fold seconds / snapshot seconds (speed-up)"
    )
    return [
        _row(
            f"state at the last position of a {count:,}-delta run, snapshot vs full fold",
            full,
            cached,
            TARGET_SPEEDUP,
            speedup_note,
        ),
        _row(
            f"worst case: {EVERY - 1} deltas folded after the snapshot (position {worst_at:,})",
            worst_full,
            worst_cached,
            None,
            "information: the longest tail a snapshot read folds with every=1000",
        ),
        {
            "name": f"take_snapshots(every={EVERY}) over the run: {written} snapshots",
            "value": round(snapshot_seconds, 2),
            "baseline": round(record_seconds, 2),
            "ratio": round(snapshot_seconds / record_seconds, 3),
            "target": None,
            "unit": "s",
            "note": "information: value = one-off snapshot cost, baseline = recording the run",
        },
        {
            "name": f"bytes of the {written} snapshots as stored vs their canonical JSON",
            "value": stored,
            "baseline": canonical,
            "ratio": round(stored / canonical, 3) if canonical else None,
            "target": None,
            "unit": "B",
            "higher_is_better": False,
            "note": "information: states over 1 KiB are stored packed (Zstandard, the ledger's "
            "dictionary); before, they were stored as their canonical JSON (ratio 1.0)",
        },
    ]


def _snapshot_bytes(ledger: Ledger) -> tuple[int, int]:
    """(bytes the snapshot states take as stored, bytes of their canonical JSON)."""
    from sqlalchemy import text

    from agentledger.ledger import unpack_blob

    stored = canonical = 0
    with engine_for(ledger).connect() as connection:
        for state, packed in connection.execute(
            text("SELECT state, state_packed FROM agentledger_snapshots")
        ):
            data = unpack_blob("zstd-d1", packed) if packed else state.encode("utf-8")
            stored += len(packed) if packed else len(data)
            canonical += len(data)
    return stored, canonical


def main(argv: list[str]) -> int:
    """``python -m bench.bench_projections [--quick]``."""
    from bench._harness import main as harness_main

    return harness_main(["--only", "projections", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
