"""PostgreSQL at scale: concurrent opens and concurrent writers on different runs.

a. Eight processes open an existing ledger at the same moment, against one process opening it
   alone: the slowest of the eight opens over the median single open. Target <= 3x, and no
   open may fail (a row of its own: failures, target 0). For information, the same for a plain
   psycopg connection and ``SELECT 1``: the floor the server and the cores set.
b. Writer processes recording different runs through the public API (one transaction per
   step, as `bench_ledger` records them): events/s of 4 processes together against 1 process
   alone. Target >= 1.2x: writers on different runs must not serialise on one table lock.
c. The same 4 writer processes against 4 processes writing the same write sets (events, blobs,
   the runs index and its tags, same statements, same transactions) with plain psycopg into a fresh
   ledger schema. Target >= 0.6x.

Every process builds its runs and connects before a start flag, so the figures time only the
opens (a) or the writes (b, c); the events/s of a round is all events over the time from the
first process's start to the last one's end (``time.monotonic`` is one clock for every process
on Linux). The machine's core count is in the notes: on 2 cores, 4 writer processes and the
server share them. Each round measures every figure back to back; a ratio is taken within each
round (paired), and the row gives the median over `REPEATS` rounds with their range.

The server is ``$AGENTLEDGER_BENCH_PG_URL``, else ``$AGENTLEDGER_TEST_PG_URL``, else
``postgresql://postgres@127.0.0.1:5432/test``; each round uses a fresh schema, dropped after.
Without a server the benchmark prints why and returns no rows.

Run: ``python -m bench --only pg_writers [--quick]``.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier

from agentledger.ledger import Ledger
from agentledger.ledger._backends import (
    _RUN_COLUMNS,
    _TOTAL_COLUMNS,
    _TOTALS_SET,
    _run_insert_params,
    _run_insert_totals,
    _run_update_params,
)
from bench._workload import RunPlan, make_run_plans
from bench.bench_ledger import _record_step

OPENERS = 8
WRITERS = 4
REPEATS = 3
FULL_RUNS, QUICK_RUNS = 10, 2
STEPS = 12
TARGET_OPEN = 3.0
TARGET_SCALE = 1.2
TARGET_RAW = 0.6
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server_url() -> str:
    """The PostgreSQL server the benchmark uses."""
    return (
        os.environ.get("AGENTLEDGER_BENCH_PG_URL")
        or os.environ.get("AGENTLEDGER_TEST_PG_URL")
        or DEFAULT_URL
    )


def reachable(url: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        with psycopg.connect(url, connect_timeout=3):
            return None
    except psycopg.Error as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


@contextmanager
def fresh_schema(base: str) -> Iterator[str]:
    """A ledger URL in a new schema, dropped afterwards."""
    schema = f"bench_pgw_{os.urandom(5).hex()}"
    try:
        yield f"{base}?schema={schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


# Worker processes ----------------------------------------------------------------------------


def _wait(go: Path) -> None:
    """Say this process is ready, then wait for the start flag."""
    (go.parent / f"ready-{os.getpid()}").touch()
    while not go.exists():
        time.sleep(0.002)


def worker_open(url: str, go: Path) -> dict[str, Any]:
    """Open the ledger once the flag is there (modules imported before: CPU, not the server)."""
    importlib.import_module("agentledger.ledger._backends_pg")
    _wait(go)
    start = time.monotonic()
    Ledger.open(url).close()
    return {"start": start, "end": time.monotonic(), "events": 0}


def worker_connect(url: str, go: Path) -> dict[str, Any]:
    """A plain psycopg connection and one query once the flag is there: the floor of an open."""
    base = url.split("?schema=", maxsplit=1)[0]
    _wait(go)
    start = time.monotonic()
    with psycopg.connect(base) as conn:
        conn.execute("SELECT 1").fetchone()
    return {"start": start, "end": time.monotonic(), "events": 0}


def record_runs(ledger: Ledger, plans: Sequence[RunPlan], agent: str) -> None:
    """`bench_ledger.record_batched` under this process's own agent name."""
    for plan in plans:
        with ledger.record_run(agent, input=plan.question, tags=["bench"]) as run:
            prompt = run.prompt("system", "1", plan.system)
            messages: list[Any] = [{"role": "system", "content": plan.system}]
            for step in plan.steps:
                _record_step(run, step, messages, prompt)


def worker_ledger(url: str, go: Path, seed: int, runs: int) -> dict[str, Any]:
    """Record `runs` runs through the public API once the flag is there."""
    plans = make_run_plans(runs, STEPS, seed=seed)
    agent = f"bench-writer-{seed}"
    with Ledger.open(url) as ledger:
        _wait(go)
        start = time.monotonic()
        record_runs(ledger, plans, agent)
        end = time.monotonic()
        events = sum(info.event_count for info in ledger.runs(agent=agent))
    return {"start": start, "end": end, "events": events}


def capture(url: str, seed: int, runs: int) -> list[tuple[list[Any], list[Any], list[Any]]]:
    """Record once (untimed) and keep every transaction's write set."""
    sets: list[tuple[list[Any], list[Any], list[Any]]] = []
    with Ledger.open(url) as ledger:
        recorder = ledger.recorder
        insert = recorder.insert_events

        def keep(stored: Sequence[Any], **kwargs: Any) -> Any:
            sets.append((list(stored), list(kwargs.get("blobs", ())), list(kwargs.get("runs", ()))))
            return insert(stored, **kwargs)

        recorder.insert_events = keep
        record_runs(ledger, make_run_plans(runs, STEPS, seed=seed), f"bench-writer-{seed}")
    return sets


def worker_raw(url: str, go: Path, seed: int, runs: int, scratch: str) -> dict[str, Any]:
    """Write the ledger's write sets with plain psycopg once the flag is there."""
    sets = capture(scratch, seed, runs)
    schema = Identifier(url.split("?schema=")[1])
    events = SQL(
        "INSERT INTO {}.agentledger_events (originator_id, originator_version, topic, "
        "state) VALUES (%s, %s, %s, %s)"
    ).format(schema)
    blobs = SQL(
        "INSERT INTO {}.agentledger_blobs (ref, size, encoding, data) VALUES "
        "(%s, %s, %s, %s) ON CONFLICT (ref) DO NOTHING"
    ).format(schema)
    insert_run = SQL(
        "INSERT INTO {}.agentledger_runs (" + _RUN_COLUMNS + ", " + _TOTAL_COLUMNS + ") VALUES "
        "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    ).format(schema)
    tags = SQL(
        "INSERT INTO {}.agentledger_run_tags (tag, run_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
    ).format(schema)
    update_run = SQL(
        "UPDATE {}.agentledger_runs SET last_position = %s, head_hash = %s, status = %s, "
        "ended_at = COALESCE(ended_at, %s), updated_at = %s, "
        + _TOTALS_SET.format(m="%s")
        + " WHERE run_id = %s"
    ).format(schema)
    with psycopg.connect(url.split("?schema=", maxsplit=1)[0]) as conn:
        _wait(go)
        start = time.monotonic()
        for stored, blob_rows, run_rows in sets:  # pipelined, as eventsourcing's insert is
            with conn.pipeline(), conn.transaction(), conn.cursor() as curs:
                if blob_rows:
                    curs.executemany(
                        blobs, [(b.ref, b.size, b.encoding, b.data) for b in blob_rows]
                    )
                for update in run_rows:
                    if update.started is not None:
                        curs.execute(
                            insert_run, _run_insert_params(update) + _run_insert_totals(update)
                        )
                        for tag in update.tags:
                            curs.execute(tags, (tag, update.run_id))
                    else:
                        curs.execute(update_run, _run_update_params(update))
                if stored:
                    curs.executemany(
                        events,
                        [(s.originator_id, s.originator_version, s.topic, s.state) for s in stored],
                    )
        end = time.monotonic()
    return {"start": start, "end": end, "events": sum(len(s[0]) for s in sets)}


def _worker(argv: list[str]) -> None:
    mode, url, go = argv[0], argv[1], Path(argv[2])
    if mode == "open":
        found = worker_open(url, go)
    elif mode == "connect":
        found = worker_connect(url, go)
    elif mode == "ledger":
        found = worker_ledger(url, go, int(argv[3]), int(argv[4]))
    else:
        found = worker_raw(url, go, int(argv[3]), int(argv[4]), argv[5])
    print(json.dumps(found))


# Rounds --------------------------------------------------------------------------------------


def together(args: Sequence[Sequence[str]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Start one worker per argument list, release them at once; their reports and failures."""
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.bench_pg_writers", a[0], a[1], str(go), *a[2:]],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
            for a in args
        ]
        deadline = time.monotonic() + 600
        while len(list(go.parent.glob("ready-*"))) < len(procs) and time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        time.sleep(0.2)  # every process built its runs and connected: nothing else runs
        go.touch()
        reports: list[dict[str, Any]] = []
        failures: list[str] = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                failures.append(err.strip().splitlines()[-1] if err.strip() else "no output")
            else:
                reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports, failures


def rate(reports: Sequence[dict[str, Any]]) -> float:
    """Events/s of a round: every event over first start to last end."""
    span = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    return sum(r["events"] for r in reports) / span


def open_round(base: str, mode: str = "open") -> tuple[float, float, int, list[str]]:
    """Median single open (s), slowest of OPENERS concurrent opens (s), failures, messages.

    `mode` "connect" times a plain psycopg connection and ``SELECT 1`` instead.
    """
    with fresh_schema(base) as url:
        Ledger.open(url).close()
        singles = []
        for _ in range(5):
            reports, failures = together([(mode, url)])
            if failures:
                return 0.0, 0.0, len(failures), failures
            singles.append(reports[0]["end"] - reports[0]["start"])
        reports, failures = together([(mode, url)] * OPENERS)
        slowest = max((r["end"] - r["start"] for r in reports), default=0.0)
    return statistics.median(singles), slowest, len(failures), failures


def write_round(base: str, mode: str, writers: int, runs: int) -> float:
    """Events/s of `writers` processes of `mode` (ledger or raw), each on its own runs."""
    with fresh_schema(base) as url, fresh_schema(base) as scratch:
        Ledger.open(url).close()
        Ledger.open(scratch).close()
        extra = [scratch] if mode == "raw" else []
        reports, failures = together(
            [(mode, url, str(1000 + w), str(runs), *extra) for w in range(writers)]
        )
    if failures:
        msg = f"{len(failures)} {mode} writer(s) failed: {failures[0]}"
        raise RuntimeError(msg)
    return rate(reports)


def _range(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    return f"{fmt.format(min(values))}..{fmt.format(max(values))}"


def run(quick: bool = False) -> list[dict[str, Any]]:
    base = server_url()
    why = reachable(base)
    if why is not None:
        print(f"pg_writers: skipped, PostgreSQL is not reachable at {base}: {why}")
        return []
    cores = os.cpu_count() or 1
    runs = QUICK_RUNS if quick else FULL_RUNS
    failed, messages = 0, []
    singles: list[float] = []
    slowest: list[float] = []
    ones: list[float] = []
    fours: list[float] = []
    raws: list[float] = []
    connects: list[float] = []
    for _ in range(1 if quick else REPEATS):  # each round measures everything back to back
        c_single, c_slow, _, _ = open_round(base, "connect")
        connects.append(c_slow / c_single)
        single, slow, f, m = open_round(base)
        failed, messages = failed + f, messages + m
        if not f:
            singles.append(single)
            slowest.append(slow)
        ones.append(write_round(base, "ledger", 1, runs))
        fours.append(write_round(base, "ledger", WRITERS, runs))
        raws.append(write_round(base, "raw", WRITERS, runs))
    opens = [w / s for w, s in zip(slowest, singles, strict=True)]
    scale = [f / o for f, o in zip(fours, ones, strict=True)]
    raw = [f / r for f, r in zip(fours, raws, strict=True)]
    at = len(opens) // 2
    events_note = f"{runs} runs x {STEPS} steps per process, one transaction per step"
    return [
        {
            "name": f"{OPENERS} concurrent opens of an existing ledger (slowest / single open)",
            "value": round(sorted(slowest)[at] * 1000, 1) if slowest else 0,
            "baseline": round(sorted(singles)[at] * 1000, 1) if singles else None,
            "ratio": round(statistics.median(opens), 3) if opens else None,
            "target": TARGET_OPEN,
            "unit": "ms",
            "higher_is_better": False,
            "note": f"median of {len(opens)} rounds, ratios {_range(opens, '{:.2f}')}; single "
            f"open {_range([s * 1000 for s in singles], '{:.0f}')} ms (after imports); "
            f"{cores} cores",
        },
        {
            "name": f"{OPENERS} concurrent plain psycopg connections + SELECT 1 (slowest / single)",
            "value": round(statistics.median(connects), 2),
            "unit": "x",
            "note": f"the floor the server and {cores} cores set for the row above: ratios "
            f"{_range(connects, '{:.2f}')} over rounds",
        },
        {
            "name": f"failed opens among {OPENERS} concurrent processes (all rounds)",
            "value": failed,
            "ratio": failed,
            "target": 0,
            "higher_is_better": False,
            "note": messages[0] if messages else "every open succeeded",
        },
        {
            "name": f"{WRITERS} writer processes vs 1 (different runs, {cores} cores)",
            "value": round(statistics.median(fours)),
            "baseline": round(statistics.median(ones)),
            "ratio": round(statistics.median(scale), 3),
            "target": TARGET_SCALE,
            "unit": "ev/s",
            "note": f"median of {len(scale)} paired rounds, ratios {_range(scale, '{:.2f}')}; "
            f"{WRITERS} writers {_range(fours)} ev/s, 1 writer {_range(ones)} ev/s; "
            f"{events_note}",
        },
        {
            "name": f"{WRITERS} writer processes vs raw psycopg, same write sets ({cores} cores)",
            "value": round(statistics.median(fours)),
            "baseline": round(statistics.median(raws)),
            "ratio": round(statistics.median(raw), 3),
            "target": TARGET_RAW,
            "unit": "ev/s",
            "note": f"median of {len(raw)} paired rounds, ratios {_range(raw, '{:.2f}')}; raw "
            f"{_range(raws)} ev/s (events, blobs and runs index: the ledger's statements and "
            "transactions, no eventsourcing)",
        },
    ]


if __name__ == "__main__":
    _worker(sys.argv[1:])
