"""Build a large PostgreSQL ledger and measure it: the figures behind docs/scaling.md.

``python -m bench.scale_ledger --url postgresql://postgres@127.0.0.1:5432/scale --events N
[--writers W] [--clone K] [--measure-only]`` records realistic agent runs (bench/_workload.py: 25
steps of a plan, model calls, tool calls and deltas, ~1 KB events, every run's text distinct)
from W writer processes until the ledger holds N events, then measures what an operator feels
at that size: bytes on disk per table, the runs index, reading one run, verifying runs,
following the ledger-wide order (what projections and the transparency log read), and
integrating the transparency log. It prints progress and a JSON summary.

Without ``--clone`` the writers record through the public API into PostgreSQL: that is the write
rate to quote (about 1,500-3,000 events/s on this 2-core machine, so 10M events would take
hours). With ``--clone K`` the writers first record K distinct runs through the API, then fill
the ledger with copies of them under new run ids: each copy's events are re-sealed on a chain of
its own (new event ids, hashes and runs-index rows, so every copy verifies) and written with
``COPY``. The copies share the originals' blobs, so the blobs table stays at the originals' size
while the events, runs and tags tables grow as they would; the summary gives the blob bytes per
event of the distinct runs, to estimate a ledger whose every run is distinct.

Not a ``bench_*`` module: at 10M events it runs for a long time and fills ~10 GB, so
``python -m bench`` does not run it. ``--measure-only`` measures an existing ledger.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random  # noqa: TID251 - picks sample runs to read; a benchmark has no run context
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentledger.ledger import Ledger
from agentledger.ledger._codec import unpack_state
from agentledger.ledger._hashing import GENESIS
from agentledger.ledger._mapper import seal
from bench._workload import SEED, make_run_plans
from bench.bench_ledger import record_batched

CHUNK_RUNS = 50


def _writer(
    url: str, worker: int, *, writers: int, events: int, counter: Any, clone: int, barrier: Any
) -> None:
    """Record chunks of runs (seeds worker, worker + writers, ...) until `counter` reaches N.

    With `clone`, only the first `clone` runs are recorded; then copies of them are written.
    """
    with Ledger.open(url) as ledger:
        chunk = worker
        recorded = 0
        while counter.value < events and not (clone and recorded >= clone // writers):
            plans = make_run_plans(CHUNK_RUNS, seed=SEED + 1000 + chunk)
            record_batched(ledger, plans)
            recorded += len(plans)
            with counter.get_lock():
                counter.value = max(counter.value, ledger.max_notification_id())
            chunk += writers
        if clone:
            barrier.wait()  # copy only runs that every writer has finished recording
            if counter.value < events:
                _clone_until(ledger, worker, events, counter)


_CLONE_RUNS_PER_COPY = 300
_END_KINDS = frozenset({"RunCompleted", "RunFailed"})


def _clone_until(ledger: Ledger, worker: int, events: int, counter: Any) -> None:
    """Copy this ledger's runs under new run ids, `_CLONE_RUNS_PER_COPY` per transaction."""
    datastore = ledger.recorder.datastore
    schema = datastore.schema
    with datastore.transaction(commit=False) as curs:
        curs.execute(f"SELECT * FROM {schema}.agentledger_runs WHERE status <> 'running'")
        runs = [dict(r) for r in curs.fetchall()]
        curs.execute(
            "SELECT originator_id, originator_version, topic, state"
            f" FROM {schema}.agentledger_events ORDER BY originator_id, originator_version"
        )
        events_by_run: dict[str, list[tuple[int, str, bytes]]] = {}
        for row in curs.fetchall():
            events_by_run.setdefault(str(row["originator_id"]), []).append(
                (row["originator_version"], row["topic"], bytes(row["state"]))
            )
        curs.execute(f"SELECT tag, run_id FROM {schema}.agentledger_run_tags")
        tags: dict[str, list[str]] = {}
        for row in curs.fetchall():
            tags.setdefault(row["run_id"], []).append(row["tag"])
    sources = [
        (r, [e for e in events_by_run[r["run_id"]] if e[0] <= r["last_position"]])
        for r in runs
        if r["run_id"] in events_by_run
    ]
    columns = list(runs[0])
    rng = random.Random(worker)
    while counter.value < events:
        event_rows: list[tuple[Any, ...]] = []
        run_rows: list[tuple[Any, ...]] = []
        tag_rows: list[tuple[str, str]] = []
        for _ in range(_CLONE_RUNS_PER_COPY):
            if counter.value + len(event_rows) >= events:
                break  # the ledger holds what was asked for (other writers may add a copy)
            run, stored = sources[rng.randrange(len(sources))]
            new_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            prev = GENESIS
            for position, topic, state in stored:
                canonical = unpack_state(state)
                body = json.loads(canonical)
                start = canonical.index(b',"payload":') + len(b',"payload":')
                end = canonical.rindex(b',"prev":"')
                event_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                payload_jcs = canonical[start:end]
                if topic in _END_KINDS:  # its head hash names the copy's chain, not the original's
                    payload_jcs = payload_jcs.replace(body["prev"].encode(), prev.encode())
                prev, new_state = seal(
                    run_id=new_id,
                    position=position,
                    kind=topic,
                    version=body["v"],
                    timestamp=body["ts"],
                    event_id=event_id,
                    prev=prev,
                    payload_jcs=payload_jcs,
                )
                event_rows.append((new_id, position, topic, new_state))
            copy = {**run, "run_id": new_id, "head_hash": prev}
            run_rows.append(tuple(copy[c] for c in columns))
            tag_rows += [(t, new_id) for t in tags.get(run["run_id"], [])]
        if not event_rows:
            break
        with datastore.transaction(commit=True) as curs:
            table = f"{schema}.agentledger_events"
            cols = "originator_id, originator_version, topic, state"
            with curs.copy(f"COPY {table} ({cols}) FROM STDIN") as out:
                for row in event_rows:
                    out.write_row(row)
            with curs.copy(
                f"COPY {schema}.agentledger_runs ({', '.join(columns)}) FROM STDIN"
            ) as out:
                for row in run_rows:
                    out.write_row(row)
            with curs.copy(f"COPY {schema}.agentledger_run_tags (tag, run_id) FROM STDIN") as out:
                for tag_row in tag_rows:
                    out.write_row(tag_row)
        with counter.get_lock():
            counter.value += len(event_rows)


def write(url: str, events: int, writers: int, *, clone: int = 0) -> dict[str, Any]:
    """Fill the ledger to `events` events from `writers` processes; the rate."""
    with Ledger.open(url) as ledger:
        start_events = _count_events(ledger)
    counter = multiprocessing.Value("q", start_events)
    barrier = multiprocessing.Barrier(writers)
    started = time.perf_counter()
    settings = {
        "writers": writers,
        "events": events,
        "counter": counter,
        "clone": clone,
        "barrier": barrier,
    }
    procs = [
        multiprocessing.Process(target=_writer, args=(url, w), kwargs=settings)
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    last = 0.0
    while any(p.is_alive() for p in procs):
        time.sleep(2)
        if time.perf_counter() - last > 60:
            last = time.perf_counter()
            done = counter.value - start_events
            rate = done / (last - started)
            print(f"  ... {counter.value:,} events ({rate:,.0f} events/s)", flush=True)
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"a writer failed with exit code {p.exitcode}")
    with Ledger.open(url) as ledger:  # as autovacuum would, before anything is measured
        datastore = ledger.recorder.datastore
        with datastore.transaction(commit=True) as curs:
            for table in ("agentledger_events", "agentledger_runs", "agentledger_run_tags"):
                curs.execute(f"ANALYZE {datastore.schema}.{table}")
    elapsed = time.perf_counter() - started
    with Ledger.open(url) as ledger:
        total = _count_events(ledger)
    written = total - start_events
    return {
        "writers": writers,
        "clone": clone,
        "events_written": written,
        "seconds": round(elapsed, 1),
        "events_per_s": round(written / elapsed) if elapsed else 0,
    }


def _timed(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - started)
    return best, value


def sizes(ledger: Ledger) -> dict[str, int]:
    """Bytes per table (with its indexes and TOAST) in the ledger's schema."""
    recorder = ledger.recorder
    schema = recorder.datastore.schema
    with recorder.datastore.transaction(commit=False) as curs:
        curs.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY 2 DESC",
            (schema,),
        )
        return {str(row["relname"]): int(row["pg_total_relation_size"]) for row in curs.fetchall()}


def _count_events(ledger: Ledger) -> int:
    recorder = ledger.recorder
    with recorder.datastore.transaction(commit=False) as curs:
        curs.execute(f"SELECT count(*) AS n FROM {recorder.datastore.schema}.agentledger_events")
        return int(curs.fetchone()["n"])


def measure(url: str) -> dict[str, Any]:
    """The read-side figures at the ledger's present size."""
    out: dict[str, Any] = {}
    with Ledger.open(url) as ledger:
        events = _count_events(ledger)
        out["events"] = events
        table_bytes = sizes(ledger)
        out["bytes_by_table"] = table_bytes
        total = sum(table_bytes.values())
        out["bytes_total"] = total
        out["bytes_per_event"] = round(total / max(events, 1), 1)
        s, runs = _timed(lambda: ledger.runs(limit=20))
        out["runs_limit_20_ms"] = round(1000 * s, 2)
        s, count = _timed(ledger.count_runs, repeat=3)
        out["runs"] = count
        out["count_runs_ms"] = round(1000 * s, 1)
        s, _ = _timed(lambda: ledger.runs(tag="bench", limit=20))
        out["runs_by_tag_limit_20_ms"] = round(1000 * s, 2)
        sample_ids = [r.run_id for r in runs]
        rng = random.Random(7)
        ids = ledger.run_ids() if count <= 200_000 else sample_ids
        picks = rng.sample(ids, min(20, len(ids)))
        s, _ = _timed(lambda: [ledger.events(r) for r in picks], repeat=3)
        out["read_one_run_ms"] = round(1000 * s / len(picks), 2)
        s, _ = _timed(lambda: [ledger.verify(r) for r in picks], repeat=3)
        out["verify_one_run_ms"] = round(1000 * s / len(picks), 2)
        mid = events // 2
        s, got = _timed(lambda: ledger.notifications(after=mid, limit=10_000), repeat=3)
        out["follow_10k_events_ms"] = round(1000 * s, 1)
        out["follow_events_per_s"] = round(len(got) / s)
        started = time.perf_counter()
        head = ledger.integrate()
        out["integrate_s"] = round(time.perf_counter() - started, 1)
        out["log_size"] = head.size if hasattr(head, "size") else str(head)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_ledger", description=__doc__)
    parser.add_argument("--url", required=True, help="a postgresql:// URL (a schema of its own)")
    parser.add_argument("--events", type=int, default=10_000_000, help="fill up to N events")
    parser.add_argument("--writers", type=int, default=2, help="writer processes")
    parser.add_argument(
        "--clone",
        type=int,
        default=0,
        metavar="K",
        help="record K distinct runs, then fill with verified copies of them",
    )
    parser.add_argument("--measure-only", action="store_true", help="do not write")
    args = parser.parse_args(argv)
    if not args.url.startswith("postgresql://"):
        parser.error("--url must be a postgresql:// URL")
    summary: dict[str, Any] = {}
    if not args.measure_only:
        summary["write"] = write(args.url, args.events, args.writers, clone=args.clone)
        print(f"write: {summary['write']}", flush=True)
    summary["read"] = measure(args.url)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
