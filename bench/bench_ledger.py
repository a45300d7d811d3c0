"""Ledger write throughput and storage size on SQLite, against an idealised ledger and sqlite3.

a. events/s recording realistic runs through the public API, one transaction per step, vs the
   idealised ledger (below) writing the same rows in the same transactions. Target >= 0.7x.
b. events/s with one commit per event (no step, no batch) vs the idealised ledger committing
   the same rows one by one. Target >= 0.8x.
c. bytes on disk for a 200-call conversation whose context grows by 500 bytes a call, vs the
   size of its distinct message contents. Target <= 2x. Also, for information, what a naive
   store keeping every request's full message list would take, and what packing a run's blobs
   together as one stream would take (the bound for packing across messages).

The idealised ledger (bench/_ideal.py) does only the hashing, packing and statements the design
mandates and writes byte-identical rows: the ceiling of this design in Python. (a) and (b) were
first set against raw sqlite3 writing only the event rows (>= 0.5x and >= 0.8x), a baseline that
hashes, packs and validates nothing and writes no blobs; those ratios stay as information rows,
with raw sqlite3 writing the ledger's whole write set (events, blobs, runs index: the floor the
schema sets) and the idealised ledger against the same raw baseline.

Baselines run on a connection with the PRAGMAs read from the ledger's own writer connection,
in a fresh database file in a fresh directory (under ``build/bench-tmp``, or
``$AGENTLEDGER_BENCH_TMP``), on the real file system. Timings are the best of 3, ledger and
baseline interleaved so drift hits both alike.

Run: ``python -m bench --only ledger [--quick]``; ``python -m bench --only ledger --profile``
prints where the time of (a) goes.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from agentledger.ledger import Ledger, RunRecorder
from agentledger.ledger._codec import unpack_blob
from agentledger.ledger.events import StepCompleted, StepStarted
from bench._ideal import ideal_pass, logical_sets, write_transaction
from bench._workload import (
    ASSISTANT_BYTES,
    SEED,
    STEPS_PER_RUN,
    USER_BYTES,
    Conversation,
    RunPlan,
    StepPlan,
    make_conversation,
    make_run_plans,
    unique_content_bytes,
)

REPEATS = 3
TARGET_BATCHED = 0.7
TARGET_PER_EVENT = 0.8
RAW_TARGETS = {"[a]": 0.5, "[b]": 0.8}
"""The first targets of (a) and (b), against raw sqlite3 (information rows now, see the doc)."""
TARGET_BYTES = 2.0

FULL_RUNS, QUICK_RUNS = 120, 12
FULL_PER_EVENT, QUICK_PER_EVENT = 2_000, 300

EVENTS_TABLE = "agentledger_events"
INSERT = f"INSERT INTO {EVENTS_TABLE} VALUES (?,?,?,?)"
PRAGMAS = (
    "page_size",
    "journal_mode",
    "synchronous",
    "cache_size",
    "temp_store",
    "locking_mode",
    "wal_autocheckpoint",
    "busy_timeout",
    "mmap_size",
    "foreign_keys",
)
PARAMS = {"temperature": 0.2, "max_tokens": 1024, "top_p": 1.0}
TMP_ROOT = Path(
    os.environ.get("AGENTLEDGER_BENCH_TMP")
    or Path(__file__).resolve().parent.parent / "build" / "bench-tmp"
)

Row = tuple[str, int, str, bytes]


def _record_step(run: RunRecorder, step: StepPlan, messages: list[Any], prompt: Any) -> None:
    """The step's events, in the order an agent would record them."""
    with run.step(step.name, args=step.args) as step_id:
        messages.append(step.observation)
        call = run.model_call(
            provider="bench",
            model="bench-model-1",
            messages=messages,
            response=step.response,
            params=PARAMS,
            usage=step.usage,
            latency_ms=812.5,
            finish_reason="stop",
            prompt=prompt,
            step_id=step_id,
        )
        messages.append(step.response)
        if step.plan is not None:
            run.plan(step.plan, step_id=step_id, caused_by=call.position)
        for tool, arguments, result in step.tools:
            run.tool(tool, arguments, result=result, latency_ms=42.0, step_id=step_id)
        run.delta(step.patch, step_id=step_id, source="bench", caused_by=call.position)
        if step.answer is not None:
            run.answer(step.answer, evidence_ids=step.evidence, step_id=step_id)


def record_batched(ledger: Ledger, plans: Sequence[RunPlan]) -> None:
    """Record every run, one transaction per step (the public API's normal use)."""
    for plan in plans:
        with ledger.record_run("bench-agent", input=plan.question, tags=["bench"]) as run:
            prompt = run.prompt("system", "1", plan.system)
            messages: list[Any] = [{"role": "system", "content": plan.system}]
            for step in plan.steps:
                _record_step(run, step, messages, prompt)


def _record_unbatched_step(run: RunRecorder, step: StepPlan, messages: list[Any]) -> None:
    step_id = run.new_id("step")
    run.record(StepStarted(step_id=step_id, name=step.name, args=step.args))
    messages.append(step.observation)
    call = run.model_call(
        provider="bench",
        model="bench-model-1",
        messages=messages,
        response=step.response,
        params=PARAMS,
        usage=step.usage,
        latency_ms=812.5,
        finish_reason="stop",
        step_id=step_id,
    )
    messages.append(step.response)
    if step.plan is not None:
        run.plan(step.plan, step_id=step_id, caused_by=call.position)
    for tool, arguments, result in step.tools:
        call_id, position = run.tool_call(tool, arguments, step_id=step_id)
        run.tool_result(call_id, ok=True, type=tool, data=result, caused_by=position)
    run.delta(step.patch, step_id=step_id, source="bench", caused_by=call.position)
    if step.answer is not None:
        run.answer(step.answer, evidence_ids=step.evidence, step_id=step_id)
    run.record(StepCompleted(step_id=step_id, status="ok"))


def record_unbatched(ledger: Ledger, plans: Sequence[RunPlan], events: int) -> None:
    """Record about `events` events, each flushed (committed) on its own."""
    with ledger.record_run("bench-agent", input="per-event commits") as run:
        messages: list[Any] = []
        for plan in plans:
            for step in plan.steps:
                if run.position >= events - 1:
                    return
                _record_unbatched_step(run, step, messages)


# SQLite helpers --------------------------------------------------------------------------------


@contextmanager
def fresh_dir() -> Iterator[Path]:
    """A new empty directory on the real file system, removed afterwards."""
    TMP_ROOT.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="bench-ledger-", dir=TMP_ROOT))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def open_ledger(directory: Path) -> tuple[Ledger, Path]:
    """A new SQLite ledger in `directory`, and its database file."""
    db = directory / "ledger.db"
    return Ledger.open(f"sqlite:///{db}"), db


def ledger_pragmas(ledger: Ledger) -> dict[str, Any]:
    """The PRAGMAs of the ledger's writer connection, as the baselines must copy them."""
    with ledger.recorder.datastore.transaction(commit=True) as c:
        values = {}
        for name in PRAGMAS:
            c.execute(f"PRAGMA {name}")
            values[name] = c.fetchone()[0]
        return values


def raw_connect(db: Path, pragmas: dict[str, Any]) -> sqlite3.Connection:
    """A plain sqlite3 connection (autocommit, explicit BEGIN/COMMIT) with the given PRAGMAs."""
    conn = sqlite3.connect(db, isolation_level=None)
    for name in PRAGMAS:  # page_size first: it must precede WAL and the first table
        if name in pragmas:
            conn.execute(f"PRAGMA {name}={pragmas[name]}")
    return conn


def read_events(db: Path) -> tuple[str, list[Row]]:
    """The events table's CREATE statement and its rows, as stored, in insertion order."""
    with sqlite3.connect(db) as conn:
        (create,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", [EVENTS_TABLE]
        ).fetchone()
        rows = conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM "
            f"{EVENTS_TABLE} ORDER BY rowid"
        ).fetchall()
    conn.close()
    return create, rows


def blob_stats(db: Path) -> tuple[int, int]:
    """How many blob rows the ledger wrote, and their stored bytes."""
    with sqlite3.connect(db) as conn:
        count, size = conn.execute(
            "SELECT count(*), coalesce(sum(length(data)), 0) FROM agentledger_blobs"
        ).fetchone()
    conn.close()
    return count, size


def step_batches(rows: Sequence[Row]) -> list[list[Row]]:
    """Split rows into the transactions the ledger committed them in.

    A step (StepStarted..StepCompleted) is one transaction; anything outside a step was flushed
    on its own.
    """
    batches: list[list[Row]] = []
    current: list[Row] | None = None
    for row in rows:
        if current is None:
            if row[2] == "StepStarted":
                current = [row]
            else:
                batches.append([row])
        else:
            current.append(row)
            if row[2] == "StepCompleted":
                batches.append(current)
                current = None
    assert current is None, "a step was left open"
    return batches


def raw_insert(
    directory: Path, create: str, pragmas: dict[str, Any], batches: Sequence[Sequence[Row]]
) -> float:
    """Seconds to insert `batches` into a fresh table of the same shape, one commit each."""
    db = directory / "raw.db"
    conn = raw_connect(db, pragmas)
    conn.execute(create)
    gc.collect()
    started = time.perf_counter()
    for batch in batches:
        conn.execute("BEGIN")
        if len(batch) == 1:
            conn.execute(INSERT, batch[0])
        else:
            conn.executemany(INSERT, batch)
        conn.execute("COMMIT")
    seconds = time.perf_counter() - started
    (count,) = conn.execute(f"SELECT count(*) FROM {EVENTS_TABLE}").fetchone()
    conn.close()
    assert count == sum(len(b) for b in batches)
    return seconds


def checkpointed_size(db: Path) -> tuple[int, dict[str, int]]:
    """File size after ``PRAGMA wal_checkpoint(TRUNCATE)`` (db + wal), and bytes per table."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    per_table = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
    conn.close()
    wal = db.with_name(db.name + "-wal")
    return db.stat().st_size + (wal.stat().st_size if wal.exists() else 0), per_table


# a. and b.: throughput -------------------------------------------------------------------------


@dataclass
class WriteSet:
    """One ledger transaction as its recorder received it: event rows, blob rows, index rows."""

    events: list[Row]
    blobs: list[tuple[str, int, str, bytes]]
    runs: list[tuple[str, tuple[Any, ...], list[str]]]


@dataclass
class Throughput:
    """Best-of-N seconds for the ledger and its raw baselines, and what was written."""

    ledger_s: float = float("inf")
    raw_s: float = float("inf")
    full_s: float = float("inf")
    ideal_s: float = float("inf")
    events: int = 0
    batches: list[int] = field(default_factory=list)
    sizes: dict[str, list[int]] = field(default_factory=dict)
    blobs: tuple[int, int] = (0, 0)
    pragmas: dict[str, Any] = field(default_factory=dict)


def _index_row(update: Any) -> tuple[str, tuple[Any, ...], list[str]]:
    """The runs-index statement a save makes: ("insert", row, tags) or ("update", params, [])."""
    ended = update.updated_at if update.status != "running" else None
    t = update.totals
    if update.started is None:
        params = (update.last_position, update.head_hash, update.status, ended, update.updated_at)
        params += (t.input_tokens, t.output_tokens, t.cost_usd, t.cost_usd)
        params += (t.model_latency_ms, t.tool_latency_ms)
        return "update", (*params, update.run_id), []
    started = update.started
    row: tuple[Any, ...] = (update.run_id, started.get("agent", ""), update.status)
    row += (update.updated_at, ended, update.last_position, update.head_hash)
    row += (str(started.get("input"))[:120], started.get("parent_run_id"), update.updated_at)
    row += (t.input_tokens, t.output_tokens, t.cost_usd, t.model_latency_ms, t.tool_latency_ms)
    return "insert", row, list(update.tags)


def capture_pass(record: Any) -> tuple[str, list[str], list[Row], list[WriteSet], Throughput]:
    """Record once, untimed, keeping every transaction's write set; read the events back.

    Returns the events table's CREATE statement, the database's whole schema, the events as
    stored in its agentledger_events table (in insertion order), the write sets, and what was
    written.
    """
    result = Throughput()
    sets: list[WriteSet] = []
    with fresh_dir() as directory:
        ledger, db = open_ledger(directory)
        result.pragmas = ledger_pragmas(ledger)
        recorder = ledger.recorder
        insert = recorder.insert_events

        def capture(stored: Sequence[Any], **kwargs: Any) -> Any:
            sets.append(
                WriteSet(
                    [(s.originator_id.hex, s.originator_version, s.topic, s.state) for s in stored],
                    [(b.ref, b.size, b.encoding, b.data) for b in kwargs.get("blobs", ())],
                    [_index_row(u) for u in kwargs.get("runs", ())],
                )
            )
            return insert(stored, **kwargs)

        recorder.insert_events = capture
        record(ledger)
        ledger.close()
        create, rows = read_events(db)
        result.blobs = blob_stats(db)
        with sqlite3.connect(db) as conn:
            schema = [
                sql
                for (sql,) in conn.execute(
                    "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
                )
            ]
        conn.close()
    if [r for w in sets for r in w.events] != rows:
        msg = "the events read back differ from those the ledger's recorder was given"
        raise AssertionError(msg)
    return create, schema, rows, sets, result


def _ledger_pass(record: Any) -> float:
    """Seconds for one ledger recording into a fresh database."""
    with fresh_dir() as directory:
        ledger, _ = open_ledger(directory)
        gc.collect()
        started = time.perf_counter()
        record(ledger)
        seconds = time.perf_counter() - started
        ledger.close()
        return seconds


def raw_write_sets(
    directory: Path, schema: Sequence[str], pragmas: dict[str, Any], sets: Sequence[WriteSet]
) -> float:
    """Seconds for raw sqlite3 to write the ledger's whole write sets into the same schema.

    For information: the floor the current schema puts under the ledger (events, blobs and the
    runs index, one transaction per write set). The DML mirrors ledger/_backends.py.
    """
    conn = raw_connect(directory / "full.db", pragmas)
    for statement in schema:
        conn.execute(statement)
    gc.collect()
    started = time.perf_counter()
    for write in sets:
        write_transaction(conn, INSERT, write.blobs, write.events, write.runs)
    seconds = time.perf_counter() - started
    conn.close()
    return seconds


def timed_ideal(
    directory: Path,
    schema: Sequence[str],
    result: Throughput,
    logical: Sequence[Any],
    rows: Sequence[Row],
) -> float:
    """Seconds for the idealised ledger (bench/_ideal.py) to write `logical` into a fresh file.

    Its event rows must be the ledger's, byte for byte: the ceiling is then measured against the
    same baseline.
    """
    conn = raw_connect(directory / "ideal.db", result.pragmas)
    for statement in schema:
        conn.execute(statement)
    seconds, written = ideal_pass(conn, INSERT, logical)
    conn.close()
    if written != list(rows):
        msg = "the idealised ledger wrote other event bytes than the ledger"
        raise AssertionError(msg)
    return seconds


def measure_throughput(record: Any, *, per_event: bool) -> Throughput:
    """Best of `REPEATS` for the ledger and for its raw baselines.

    The ledger runs `record(ledger)`; the baseline writes the same event rows in the same
    transactions; for information, raw sqlite3 also writes the ledger's whole write sets.
    """
    create, schema, rows, sets, result = capture_pass(record)
    batches = [[r] for r in rows] if per_event else step_batches(rows)
    if [len(b) for b in batches] != [len(w.events) for w in sets]:
        msg = "the baseline's batches differ from the ledger's transactions"
        raise AssertionError(msg)
    logical = logical_sets(sets)
    for _ in range(REPEATS):  # interleaved, best of each, so drift hits all alike
        result.ledger_s = min(result.ledger_s, _ledger_pass(record))
        with fresh_dir() as directory:
            ideal = timed_ideal(directory, schema, result, logical, rows)
            result.ideal_s = min(result.ideal_s, ideal)
        with fresh_dir() as directory:
            result.raw_s = min(result.raw_s, raw_insert(directory, create, result.pragmas, batches))
        with fresh_dir() as directory:
            result.full_s = min(
                result.full_s, raw_write_sets(directory, schema, result.pragmas, sets)
            )
    result.events = len(rows)
    result.batches = [len(b) for b in batches]
    for row in rows:
        result.sizes.setdefault(row[2], []).append(len(row[3]))
    return result


def _size_note(result: Throughput) -> str:
    every = [n for sizes in result.sizes.values() for n in sizes]
    kinds = ", ".join(
        f"{kind} {sum(s) // len(s)}" for kind, s in sorted(result.sizes.items(), key=lambda i: i[0])
    )
    return f"stored state mean {sum(every) // len(every)} B ({kinds})"


def _throughput_rows(
    name: str, result: Throughput, target: float, note: str, tag: str
) -> list[dict[str, Any]]:
    """The gated row (the ledger vs the idealised ledger) and the information rows around it."""
    value = result.events / result.ledger_s
    raw = result.events / result.raw_s
    full = result.events / result.full_s
    ideal = result.events / result.ideal_s
    what = tag.strip("[]")
    main = {
        "name": f"{tag} {name}, vs the idealised ledger",
        "value": round(value),
        "baseline": round(ideal),
        "ratio": round(value / ideal, 3),
        "target": target,
        "unit": "events/s",
        "higher_is_better": True,
        "note": f"baseline: bench/_ideal.py writing byte-identical rows (canonical JSON, SHA-256 "
        f"of every envelope and blob, the ledger's packing and statements; no validation, no "
        f"redaction, no objects), measured in the same run; {note}",
        "details": {
            "events": result.events,
            "ledger_seconds": round(result.ledger_s, 4),
            "ideal_seconds": round(result.ideal_s, 4),
            "raw_seconds": round(result.raw_s, 4),
            "raw_full_write_set_seconds": round(result.full_s, 4),
            "transactions": len(result.batches),
            "blob_rows": result.blobs[0],
            "blob_bytes": result.blobs[1],
            "mean_state_bytes_by_kind": {
                k: sum(v) // len(v) for k, v in sorted(result.sizes.items())
            },
            "pragmas": result.pragmas,
        },
    }
    against_raw = _info_row(
        f"{tag} {name}, vs raw sqlite3 writing the same event rows (info)",
        value,
        raw,
        f"({what}, info) the first anchoring of this figure (target >= {RAW_TARGETS[tag]}x): "
        f"raw sqlite3 writing only the event rows, in the same transactions, same PRAGMAs",
    )
    floor = _info_row(
        f"{tag} raw sqlite3 writing the ledger's whole write set (info)",
        full,
        raw,
        f"({what}, info) the floor the schema sets: the ledger's exact transactions (events + "
        f"blobs + runs index) written by raw sqlite3, same PRAGMAs; the ledger reaches "
        f"{value / full:.3f}x of it (the rest of the gap is the ledger's own work)",
    )
    ceiling = _info_row(
        f"{tag} idealised ledger: only the mandated hashing, packing and writes (info)",
        ideal,
        raw,
        f"({what}, info) the ceiling of this design in Python (bench/_ideal.py), against raw "
        f"sqlite3 writing the event rows",
    )
    return [main, against_raw, floor, ceiling]


def _info_row(name: str, value: float, baseline: float, note: str) -> dict[str, Any]:
    """An information row in events/s against the same baseline (no target)."""
    return {
        "name": name,
        "value": round(value),
        "baseline": round(baseline),
        "ratio": round(value / baseline, 3),
        "target": None,
        "unit": "events/s",
        "higher_is_better": True,
        "note": note,
    }


def bench_batched(quick: bool) -> list[dict[str, Any]]:
    """(a) a step per transaction vs raw executemany of the same rows in the same batches."""
    plans = make_run_plans(QUICK_RUNS if quick else FULL_RUNS)
    result = measure_throughput(lambda ledger: record_batched(ledger, plans), per_event=False)
    steps = [n for n in result.batches if n > 1]
    pragmas = ", ".join(f"{k}={v}" for k, v in result.pragmas.items())
    note = (
        f"(a) {result.events:,} events in {len(plans)} runs, {len(result.batches):,} "
        f"transactions (steps of {min(steps)}-{max(steps)} events, mean "
        f"{sum(steps) / len(steps):.1f}; RunStarted/RunCompleted alone); ledger also wrote "
        f"{result.blobs[0]:,} blob rows ({result.blobs[1]:,} B) and the runs index, which the "
        f"baseline does not; {_size_note(result)}; PRAGMAs: {pragmas}"
    )
    return _throughput_rows(
        "record realistic runs, one transaction per step", result, TARGET_BATCHED, note, "[a]"
    )


def bench_per_event(quick: bool) -> list[dict[str, Any]]:
    """(b) one commit per event vs raw one INSERT + COMMIT per event of the same rows."""
    events = QUICK_PER_EVENT if quick else FULL_PER_EVENT
    plans = make_run_plans(max(1, events // (STEPS_PER_RUN * 6)) + 1, seed=SEED + 1)
    result = measure_throughput(
        lambda ledger: record_unbatched(ledger, plans, events), per_event=True
    )
    note = (
        f"(b) {result.events:,} events, each its own transaction (record() outside any "
        f"step/batch); ledger also wrote {result.blobs[0]:,} blob rows and updated the runs "
        f"index in those transactions; same PRAGMAs as (a)"
    )
    return _throughput_rows("one commit per event", result, TARGET_PER_EVENT, note, "[b]")


# c.: bytes on disk -----------------------------------------------------------------------------


def record_conversation(ledger: Ledger, conversation: Conversation) -> None:
    """Record the conversation as one run, one model call per turn."""
    with ledger.record_run("bench-chat", input="a long conversation") as run:
        history: list[dict[str, str]] = []
        for message, answer in conversation:
            history.append(message)
            run.model_call(
                provider="bench",
                model="bench-model-1",
                messages=history,
                response=answer,
                params=PARAMS,
                usage={"input_tokens": 100, "output_tokens": 25, "total_tokens": 125},
                latency_ms=640.0,
                finish_reason="stop",
            )
            history.append(answer)


def ledger_conversation_size(
    conversation: Conversation,
) -> tuple[int, dict[str, int], tuple[int, int]]:
    """Record the conversation and measure the file."""
    with fresh_dir() as directory:
        ledger, db = open_ledger(directory)
        record_conversation(ledger, conversation)
        ledger.close()
        blobs = blob_stats(db)
        size, per_table = checkpointed_size(db)
        return size, per_table, blobs


def stream_packed_size(conversation: Conversation, pragmas: dict[str, Any]) -> tuple[int, int]:
    """(c, info) The ledger's own event rows with all its blobs packed as one Zstandard stream.

    What packing across messages could reach if a run's content were compressed together (a
    storage-format v2): returns (file bytes, packed blob bytes). The ledger packs each blob on
    its own, because each must be readable by its ref and written in its event's transaction.
    """
    _, schema, rows, sets, _ = capture_pass(lambda led: record_conversation(led, conversation))
    content = b"".join(unpack_blob(enc, data) for w in sets for _, _, enc, data in w.blobs)
    packed = zstandard.ZstdCompressor(level=3).compress(content)
    with fresh_dir() as directory:
        db = directory / "stream.db"
        conn = raw_connect(db, pragmas)
        for statement in schema:
            conn.execute(statement)
        write_transaction(conn, INSERT, [("stream", len(content), "zstd", packed)], rows, [])
        conn.close()
        size, _ = checkpointed_size(db)
    return size, len(packed)


def naive_conversation_size(conversation: Conversation, pragmas: dict[str, Any]) -> tuple[int, int]:
    """A store keeping every request's full message list: (file bytes, logical bytes)."""
    with fresh_dir() as directory:
        db = directory / "naive.db"
        conn = raw_connect(db, pragmas)
        conn.execute(
            "CREATE TABLE calls (call INTEGER PRIMARY KEY, request BLOB NOT NULL, "
            "response BLOB NOT NULL)"
        )
        history: list[dict[str, str]] = []
        logical = 0
        for index, (message, answer) in enumerate(conversation):
            history.append(message)
            request = json.dumps(history, separators=(",", ":")).encode()
            response = json.dumps(answer, separators=(",", ":")).encode()
            logical += len(request) + len(response)
            conn.execute("BEGIN")
            conn.execute("INSERT INTO calls VALUES (?, ?, ?)", (index, request, response))
            conn.execute("COMMIT")
            history.append(answer)
        conn.close()
        size, _ = checkpointed_size(db)
        return size, logical


def bench_bytes() -> list[dict[str, Any]]:
    """(c) file bytes for a growing conversation vs its distinct content; naive for scale."""
    conversation = make_conversation()
    unique = unique_content_bytes(conversation)
    size, per_table, (blob_rows, blob_bytes) = ledger_conversation_size(conversation)
    with fresh_dir() as directory:
        ledger, _ = open_ledger(directory)
        pragmas = ledger_pragmas(ledger)
        ledger.close()
    naive, naive_logical = naive_conversation_size(conversation, pragmas)
    stream, stream_blobs = stream_packed_size(conversation, pragmas)
    tables = Counter[str]()
    for name, pages in per_table.items():
        if name.startswith("sqlite_autoindex_agentledger_events"):
            tables["events PK index"] += pages
        elif name in {EVENTS_TABLE, "agentledger_blobs"}:
            tables[name.removeprefix("agentledger_")] += pages
        else:
            tables["other tables/indexes/schema"] += pages
    breakdown = ", ".join(f"{k} {v:,} B" for k, v in tables.most_common())
    calls = len(conversation)
    return [
        {
            "name": f"[c] bytes on disk, {calls}-call growing conversation",
            "value": size,
            "baseline": unique,
            "ratio": round(size / unique, 3),
            "target": TARGET_BYTES,
            "unit": "B",
            "higher_is_better": False,
            "note": (
                f"(c) file after wal_checkpoint(TRUNCATE) vs distinct message contents "
                f"({calls} x {USER_BYTES} B + {calls} x {ASSISTANT_BYTES} B); pages: {breakdown};"
                f" {blob_rows} blob rows holding {blob_bytes:,} B"
            ),
            "details": {"pages_by_table": per_table, "blob_rows": blob_rows},
        },
        {
            "name": f"[c] same events, every blob packed as one stream ({calls} calls, info)",
            "value": stream,
            "baseline": unique,
            "ratio": round(stream / unique, 3),
            "target": None,
            "unit": "B",
            "higher_is_better": False,
            "note": (
                f"(c, info) the ledger's event rows as stored plus its {blob_rows} blobs packed "
                f"together as one Zstandard stream (level 3): {stream_blobs:,} B against "
                f"{blob_bytes:,} B packed one by one; the bound for packing across messages, "
                f"which needs a storage-format v2 (blobs readable by ref from a run's stream)"
            ),
        },
        {
            "name": f"[c] naive store, full message list per call ({calls} calls, info)",
            "value": naive,
            "baseline": unique,
            "ratio": round(naive / unique, 3),
            "target": None,
            "unit": "B",
            "higher_is_better": False,
            "note": (
                f"(c, info) what the O(n^2) layout takes: {naive_logical:,} B of JSON, "
                f"{naive / size:.1f}x the ledger's file"
            ),
        },
    ]


# Entry points ----------------------------------------------------------------------------------


def run(quick: bool = False) -> list[dict[str, Any]]:
    """All three measurements, as harness rows."""
    return [*bench_batched(quick), *bench_per_event(quick), *bench_bytes()]


def profile(quick: bool = False, top: int = 25) -> None:
    """Profile the ledger side of (a) with cProfile: top `top` by cumulative, then own time."""
    plans = make_run_plans(QUICK_RUNS if quick else FULL_RUNS)
    profiler = cProfile.Profile()
    with fresh_dir() as directory:
        ledger, _ = open_ledger(directory)
        gc.collect()
        profiler.enable()
        record_batched(ledger, plans)
        profiler.disable()
        ledger.close()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main(argv: list[str]) -> int:
    """``python -m bench.bench_ledger [--quick] [--profile]``."""
    from bench._harness import main as harness_main

    args = ["--only", "ledger", *argv]
    return harness_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
