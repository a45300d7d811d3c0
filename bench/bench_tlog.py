"""The transparency log: its cost on recording, integration, proofs and verification.

a. Recording with the log enabled vs without: events/s recording runs through the public API
   while another process integrates the log every 0.2 s (what a cron'd ``agentledger
   checkpoint`` does), with the stored-state form that keeps each hash raw (``0x02``), against
   the same recording with no integrator and the older ``0x01`` form. Target >= 0.95x.
b. Integrating 1,000,000 events (the tiles written to SQLite) and signing a checkpoint, against
   SHA-256 of the same leaves and interior nodes in a plain Python loop. Target <= 3x.
c. Inclusion and consistency proofs at 1,000,000 leaves from the stored tiles: mean ms per
   proof against the 5 ms budget (an absolute target: ratio <= 1), with the tile reads per
   proof in the note (O(log n)).
d. Full-ledger verify against a checkpoint vs full-ledger verify without one, same ledger of
   recorded runs. Target <= 1.2x.

The 1,000,000 events of (b) and (c) are written straight into a SQLite ledger's events table
(valid stored rows, 0x02 form; nothing else reads them), since recording a million events
through the API would take minutes and measure something else. Timings are the best of 3
(interleaved where there is a baseline). Files live under ``build/bench-tmp`` (or
``$AGENTLEDGER_BENCH_TMP``).

Run: ``python -m bench --only tlog [--quick]``.
"""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentledger.ledger import Ledger, _mapper
from agentledger.ledger._codec import PACKED_STATE_V1, _pack, pack_state
from agentledger.ledger.signed_note import generate_key

FULL_EVENTS = 1_000_000
QUICK_EVENTS = 100_000
FULL_RUNS = 300
QUICK_RUNS = 60
STEPS = 8
REPEATS = 3
PROOFS = 200
PROOF_BUDGET_MS = 5.0


@contextmanager
def scratch() -> Iterator[Path]:
    """A fresh directory on the real file system."""
    root = Path(os.environ.get("AGENTLEDGER_BENCH_TMP", "build/bench-tmp"))
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _v1_state(canonical: bytes) -> bytes:
    return PACKED_STATE_V1 + _pack(canonical)


def record(url: str, runs: int, *, v1: bool = False) -> int:
    """Record `runs` runs of STEPS deltas and a model call each; return the events written."""
    original = _mapper.pack_state
    if v1:
        _mapper.pack_state = _v1_state  # type: ignore[assignment]
    events = 0
    try:
        with Ledger.open(url) as ledger:
            for i in range(runs):
                with ledger.record_run("bench", input=f"question {i}") as run:
                    for j in range(STEPS):
                        with run.step("work"):
                            run.delta({"step": j, "note": "x" * 200})
                            run.model_call(
                                provider="scripted",
                                model="m",
                                messages=[{"role": "user", "content": f"q{i} s{j}"}],
                                response={"role": "assistant", "content": "ok " * 40},
                            )
                events += run.position
    finally:
        _mapper.pack_state = original
    return events


def _integrator(url: str, stop: Any) -> None:
    with Ledger.open(url) as ledger:
        while not stop.is_set():
            ledger.integrate()
            stop.wait(0.2)


def bench_recording(quick: bool) -> dict[str, Any]:
    """(a): recording with a concurrent integrator and 0x02 rows vs alone with 0x01 rows."""
    runs = QUICK_RUNS if quick else FULL_RUNS
    best_with = best_without = float("inf")
    events = 0
    context = multiprocessing.get_context("spawn")
    for _ in range(REPEATS):
        with scratch() as tmp:
            url = f"sqlite:///{tmp}/without.db"
            Ledger.open(url).close()
            gc.collect()
            start = time.perf_counter()
            events = record(url, runs, v1=True)
            best_without = min(best_without, time.perf_counter() - start)

            url = f"sqlite:///{tmp}/with.db"
            Ledger.open(url).close()
            stop = context.Event()
            worker = context.Process(target=_integrator, args=(url, stop))
            worker.start()
            time.sleep(1.0)  # the integrator is running before recording starts
            gc.collect()
            start = time.perf_counter()
            record(url, runs)
            best_with = min(best_with, time.perf_counter() - start)
            stop.set()
            worker.join()
            with Ledger.open(url) as ledger:
                if ledger.integrate().size != events:
                    msg = "the integrator did not cover every event"
                    raise AssertionError(msg)
    value, baseline = events / best_with, events / best_without
    return {
        "name": f"recording {runs} runs ({events:,} events) with the log on vs off (events/s)",
        "value": round(value),
        "baseline": round(baseline),
        "ratio": round(value / baseline, 3),
        "target": 0.95,
        "unit": "events/s",
        "note": "on: another process integrates every 0.2 s, rows in the 0x02 form; off: no "
        "integrator, the older 0x01 form; SQLite file, best of 3 interleaved",
    }


def fill_events(path: Path, count: int) -> list[bytes]:
    """Write `count` stored events straight into a new SQLite ledger; return their hashes."""
    url = f"sqlite:///{path}"
    Ledger.open(url).close()
    rest = _pack(b'{"id":"e","payload":{},"prev":"' + b"0" * 64 + b'","ts":"t","v":1}')
    hashes = [hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(count)]
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO agentledger_events (originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?)",
            (
                (f"{i // 1000:032x}", i % 1000 + 1, "RunAnnotated", b"\x02" + h + rest)
                for i, h in enumerate(hashes)
            ),
        )
    conn.close()
    assert pack_state(b'{"hash":"' + hashes[0].hex().encode() + b'",' + b'"v":1}')[:1] == b"\x02"
    return hashes


def plain_loop(hashes: list[bytes]) -> bytes:
    """SHA-256 of every leaf and interior node, level by level, in a plain loop."""
    sha = hashlib.sha256
    level = [sha(b"\x00" + h).digest() for h in hashes]
    while len(level) > 1:
        paired = [
            sha(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def bench_integration(quick: bool) -> list[dict[str, Any]]:
    """(b) and (c): integrate and sign a large log; prove from it."""
    count = QUICK_EVENTS if quick else FULL_EVENTS
    signer, _ = generate_key("bench.example/log")
    ours = base = float("inf")
    rows: list[dict[str, Any]] = []
    with scratch() as tmp:
        hashes = fill_events(tmp / "big.db", count)
        for attempt in range(REPEATS):
            copy = tmp / f"run{attempt}.db"
            shutil.copyfile(tmp / "big.db", copy)
            with Ledger.open(f"sqlite:///{copy}") as ledger:
                gc.collect()
                start = time.perf_counter()
                note = ledger.checkpoint(signer)
                ours = min(ours, time.perf_counter() - start)
            gc.collect()
            start = time.perf_counter()
            expected = plain_loop(hashes)
            base = min(base, time.perf_counter() - start)
            if f"\n{count}\n" not in note:
                raise AssertionError("the checkpoint does not cover every event")
        with Ledger.open(f"sqlite:///{copy}") as ledger:
            log = ledger.transparency_log
            if log.root(count) != expected:
                raise AssertionError("the log's root differs from the plain loop's")
            rows.append(
                {
                    "name": f"integrate {count:,} events + sign a checkpoint vs SHA-256 loop (s)",
                    "value": round(ours, 3),
                    "baseline": round(base, 3),
                    "ratio": round(ours / base, 3),
                    "target": 3.0,
                    "unit": "s",
                    "higher_is_better": False,
                    "note": "baseline: hashlib over the same leaves and nodes, level by level; "
                    "ours reads the events' hashes from SQLite and writes the tiles",
                }
            )
            rows += _proof_rows(log, count)
    return rows


def _proof_rows(log: Any, count: int) -> list[dict[str, Any]]:
    tables = log.tables
    reads = [0]
    original = tables.tiles

    def counting(keys: Any) -> Any:
        reads[0] += len(keys)
        return original(keys)

    tables.tiles = counting
    step = max(1, count // PROOFS)
    timings: dict[str, float] = {}
    for kind in ("inclusion", "consistency"):
        reads[0] = 0
        start = time.perf_counter()
        for i in range(0, count, step):
            if kind == "inclusion":
                log.inclusion_proof(i, count)
            else:
                log.consistency_proof(max(1, i), count)
        timings[kind] = (time.perf_counter() - start) * 1000 / len(range(0, count, step))
        timings[kind + "_reads"] = reads[0] / len(range(0, count, step))
    tables.tiles = original
    return [
        {
            "name": f"{kind} proof at {count:,} leaves vs the 5 ms budget (ms per proof)",
            "value": round(timings[kind], 3),
            "baseline": PROOF_BUDGET_MS,
            "ratio": round(timings[kind] / PROOF_BUDGET_MS, 3),
            "target": 1.0,
            "unit": "ms",
            "higher_is_better": False,
            "note": f"the baseline is the absolute budget, not a measurement; "
            f"{timings[kind + '_reads']:.1f} tile reads per proof (O(log n)); "
            f"{len(range(0, count, step))} proofs spread over the tree",
        }
        for kind in ("inclusion", "consistency")
    ]


def bench_verify(quick: bool) -> dict[str, Any]:
    """(d): verify with a checkpoint vs without, on one ledger of recorded runs."""
    runs = QUICK_RUNS if quick else FULL_RUNS
    signer, verifier = generate_key("bench.example/log")
    with_cp = without = float("inf")
    with scratch() as tmp:
        url = f"sqlite:///{tmp}/verify.db"
        events = record(url, runs)
        with Ledger.open(url) as ledger:
            note = ledger.checkpoint(signer)
            for _ in range(REPEATS):
                gc.collect()
                start = time.perf_counter()
                plain = ledger.verify()
                without = min(without, time.perf_counter() - start)
                gc.collect()
                start = time.perf_counter()
                checked = ledger.verify(checkpoint=note, verifier_keys=[verifier])
                with_cp = min(with_cp, time.perf_counter() - start)
                if not (plain.ok and checked.ok):
                    raise AssertionError("the bench ledger does not verify")
    return {
        "name": f"verify {runs} runs ({events:,} events) against a checkpoint vs without (s)",
        "value": round(with_cp, 3),
        "baseline": round(without, 3),
        "ratio": round(with_cp / without, 3),
        "target": 1.2,
        "unit": "s",
        "higher_is_better": False,
        "note": "same SQLite ledger, best of 3 interleaved",
    }


def run(quick: bool = False) -> list[dict[str, Any]]:
    """All the log's rows."""
    return [bench_recording(quick), *bench_integration(quick), bench_verify(quick)]


if __name__ == "__main__":
    import json
    import sys

    for row in run(quick="--quick" in sys.argv):
        print(json.dumps(row))
