"""The ledger's library API vs LangGraph's SqliteSaver on the same 200-step run.

The workload of bench/_workload.py: 200 steps, each a model call whose context grows by ~500
bytes (a 400-byte user or tool message and a 100-byte answer). The ledger records each step as
`run.model_call(...)` with the whole message list (the recorder stores each message once, as a
node of a conversation chain); LangGraph's ``SqliteSaver`` stores each step as a checkpoint
whose ``messages`` channel holds the whole list, the state a LangGraph agent keeps. Each side
writes into a fresh SQLite file on the real file system (``build/bench-tmp`` or
``$AGENTLEDGER_BENCH_TMP``), one transaction per step, as each does by default. Figures:

a. write per step: the seconds spent recording a step, target <= 0.5x SqliteSaver's ``put``;
b. bytes on disk after the run (connections closed, so the WAL is folded into the file),
   target <= 1/50;
c. the state at every step, read by a new ledger/saver object (nothing cached): every step's
   message list, target >= 10x faster (ratio <= 0.1);
d. the state at the last step (the whole message list after the last answer), read by a new
   object, target <= 1x.

The ledger reads (c) as `Ledger.events` of the run plus `Ledger.conversations` of every call's
answer node (one batched read of the chains), and (d) as the run's last events plus
`Ledger.conversation` of its answer node; LangGraph reads (c) as ``list(saver.list(thread))`` and
(d) as ``saver.get_tuple(thread)``. Timings are the best of 3 runs, the two sides interleaved;
reads are repeated 5 times within a run and the best kept. This is the library-level row; the
same workload through a compiled LangGraph graph with `LedgerCheckpointSaver` is
``python -m bench --only langgraph``. Skipped with a message when ``langgraph`` and
``langgraph-checkpoint-sqlite`` are not installed (``pip install -e .[bench]``).

Run: ``python -m bench --only side_by_side [--quick]``.
"""

from __future__ import annotations

import gc
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentledger.ledger import Ledger
from bench._workload import CONVERSATION_CALLS, Conversation, make_conversation
from bench.bench_ledger import fresh_dir

REPEATS = 3
READ_REPEATS = 5
QUICK_STEPS = 40
TARGET_WRITE = 0.5
TARGET_BYTES = 1 / 50
TARGET_EVERY_STEP = 0.1
TARGET_LAST_STEP = 1.0
PARAMS = {"temperature": 0.2, "max_tokens": 1024}
USAGE = {"input_tokens": 100, "output_tokens": 25, "total_tokens": 125}
THREAD: dict[str, Any] = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}


@dataclass
class Measured:
    """One run of the workload on one side; `last` and `every` are what the reads returned."""

    write_s: float
    bytes_on_disk: int
    every_step_s: float
    last_step_s: float
    every: list[list[Any]]
    last: list[Any]


def _db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def _best_read(read: Callable[[], Any]) -> tuple[float, Any]:
    """The best time of `READ_REPEATS` reads, and what the last one returned."""
    best, value = float("inf"), None
    for _ in range(READ_REPEATS):
        gc.collect()
        started = time.perf_counter()
        value = read()
        best = min(best, time.perf_counter() - started)
    return best, value


# The ledger ---------------------------------------------------------------------------------


def ledger_every_step(ledger: Ledger, run_id: str) -> list[list[Any]]:
    """Every step's message list: the run's events, then every answer's chain in one batch.

    A call's ``response_ref`` is the node of its answer, whose parent is the request's chain:
    the chain at it is the whole message list after the step.
    """
    refs = [e.payload["response_ref"] for e in ledger.events(run_id) if e.kind == "ModelCalled"]
    chains = ledger.conversations(refs)
    return [chains[ref] for ref in refs]


def ledger_last_step(ledger: Ledger, run_id: str) -> list[Any]:
    """The message list after the last step: the last model call and its request's chain."""
    count = ledger.run(run_id).event_count
    events = ledger.events(run_id, after=max(count - 3, 0))
    call = next(e.payload for e in reversed(events) if e.kind == "ModelCalled")
    return ledger.conversation(call["response_ref"])


def measure_ledger(conversation: Conversation) -> Measured:
    """Record the conversation with `run.model_call`, then read it back with a new ledger."""
    with fresh_dir() as directory:
        db = directory / "ledger.db"
        gc.collect()
        write_s = 0.0
        with (
            Ledger.open(f"sqlite:///{db}") as ledger,
            ledger.record_run("bench-side-by-side", input="a long conversation") as run,
        ):
            history: list[dict[str, str]] = []
            for message, answer in conversation:
                history.append(message)
                started = time.perf_counter()
                run.model_call(
                    provider="bench",
                    model="bench-model-1",
                    messages=history,
                    response=answer,
                    params=PARAMS,
                    usage=USAGE,
                    latency_ms=640.0,
                    finish_reason="stop",
                )
                write_s += time.perf_counter() - started
                history.append(answer)
            run_id = run.run_id
        with Ledger.open(f"sqlite:///{db}") as ledger:
            every_s, every = _best_read(lambda: ledger_every_step(ledger, run_id))
        with Ledger.open(f"sqlite:///{db}") as ledger:
            last_s, last = _best_read(lambda: ledger_last_step(ledger, run_id))
        size = _db_bytes(db)
    return Measured(write_s, size, every_s, last_s, every, last)


# LangGraph's SqliteSaver --------------------------------------------------------------------


def measure_sqlite_saver(conversation: Conversation) -> Measured:
    """Put a checkpoint per step (the whole message list), then read with a new saver."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    with fresh_dir() as directory:
        db = directory / "checkpoints.db"
        conn = sqlite3.connect(db, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        config: dict[str, Any] = THREAD
        checkpoint: Any = empty_checkpoint()
        history: list[dict[str, str]] = []
        gc.collect()
        write_s = 0.0
        for step, (message, answer) in enumerate(conversation):
            history.append(message)
            history.append(answer)
            version = step + 1
            checkpoint = {
                **checkpoint,
                "id": empty_checkpoint()["id"],
                "channel_values": {"messages": list(history), "step": version},
                "channel_versions": {"messages": version, "step": version},
            }
            versions = {"messages": version, "step": version}
            metadata = {"source": "loop", "step": step, "parents": {}}
            started = time.perf_counter()
            config = saver.put(config, checkpoint, metadata, versions)
            write_s += time.perf_counter() - started
        conn.close()

        def every_step(reader: Any) -> list[list[Any]]:
            tuples = list(reader.list(THREAD))
            tuples.reverse()  # newest first as listed
            return [t.checkpoint["channel_values"]["messages"] for t in tuples]

        def last_step(reader: Any) -> list[Any]:
            found = reader.get_tuple(THREAD)
            return list(found.checkpoint["channel_values"]["messages"])

        conn = sqlite3.connect(db, check_same_thread=False)
        every_s, every = _best_read(lambda: every_step(SqliteSaver(conn)))
        conn.close()
        conn = sqlite3.connect(db, check_same_thread=False)
        last_s, last = _best_read(lambda: last_step(SqliteSaver(conn)))
        conn.close()
        size = _db_bytes(db)
    return Measured(write_s, size, every_s, last_s, every, last)


# Rows -----------------------------------------------------------------------------------------


def best(runs: list[Measured]) -> Measured:
    """The best of each timing across runs (sizes and values are the same in every run)."""
    return Measured(
        write_s=min(r.write_s for r in runs),
        bytes_on_disk=runs[0].bytes_on_disk,
        every_step_s=min(r.every_step_s for r in runs),
        last_step_s=min(r.last_step_s for r in runs),
        every=runs[0].every,
        last=runs[0].last,
    )


def _ms(seconds: float, per: int = 1) -> float:
    return round(1000 * seconds / per, 3)


def _check_same(ours: Measured, theirs: Measured) -> None:
    """Both sides must have read the same states, or the timings compare different work."""
    if ours.last != theirs.last or ours.every != theirs.every:
        raise AssertionError("the ledger and SqliteSaver read different states")


def run(quick: bool = False) -> list[dict[str, Any]]:
    """The four rows (write, bytes, every step, last step), ledger vs SqliteSaver."""
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        print(
            "side_by_side: skipped, langgraph-checkpoint-sqlite is not installed "
            "(pip install -e .[bench])"
        )
        return []
    steps = QUICK_STEPS if quick else CONVERSATION_CALLS
    repeats = 1 if quick else REPEATS
    conversation = make_conversation(steps)
    ours_runs: list[Measured] = []
    theirs_runs: list[Measured] = []
    for _ in range(repeats):
        ours_runs.append(measure_ledger(conversation))
        theirs_runs.append(measure_sqlite_saver(conversation))
    ours, theirs = best(ours_runs), best(theirs_runs)
    _check_same(ours, theirs)
    what = f"{steps}-step run (library API vs LangGraph SqliteSaver)"
    return [
        {
            "name": f"(a) write per step, {what}",
            "value": _ms(ours.write_s, steps),
            "baseline": _ms(theirs.write_s, steps),
            "ratio": round(ours.write_s / theirs.write_s, 3),
            "target": TARGET_WRITE,
            "unit": "ms",
            "higher_is_better": False,
            "note": "run.model_call vs SqliteSaver.put, one transaction each, SQLite file",
        },
        {
            "name": f"(b) bytes on disk, {what}",
            "value": ours.bytes_on_disk,
            "baseline": theirs.bytes_on_disk,
            "ratio": round(ours.bytes_on_disk / theirs.bytes_on_disk, 4),
            "target": TARGET_BYTES,
            "unit": "B",
            "higher_is_better": False,
        },
        {
            "name": f"(c) state at every step, new reader, {what}",
            "value": _ms(ours.every_step_s),
            "baseline": _ms(theirs.every_step_s),
            "ratio": round(ours.every_step_s / theirs.every_step_s, 3),
            "target": TARGET_EVERY_STEP,
            "unit": "ms",
            "higher_is_better": False,
            "note": "events + one batched read of every call's chain vs list(saver.list(...))",
        },
        {
            "name": f"(d) state at the last step, new reader, {what}",
            "value": _ms(ours.last_step_s),
            "baseline": _ms(theirs.last_step_s),
            "ratio": round(ours.last_step_s / theirs.last_step_s, 3),
            "target": TARGET_LAST_STEP,
            "unit": "ms",
            "higher_is_better": False,
            "note": "last events + the answer's chain vs saver.get_tuple(...)",
        },
    ]
