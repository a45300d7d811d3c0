"""A LangGraph graph checkpointed on the ledger vs LangGraph's own SqliteSaver.

The 200-step workload of bench/_workload.py (each step a model call whose context grows by
~500 bytes: a 400-byte user or tool message and a 100-byte answer) run as one LangGraph thread:
a ``model`` node loops 200 times, each superstep appending the step's two messages to a
``messages`` channel (``operator.add``) and counting the step. The same graph is compiled with
`LedgerCheckpointSaver` on a SQLite ledger and with ``langgraph.checkpoint.sqlite.SqliteSaver``,
each in a fresh database file in a fresh directory on the real file system (``build/bench-tmp``
or ``$AGENTLEDGER_BENCH_TMP``), with ``durability="sync"`` so every checkpoint is written before
the next step runs. The ledger has its default durability, ``normal`` (a commit is not
synced to disk; see docs/storage.md), and SqliteSaver sqlite3's default, ``synchronous=FULL``
(an fsync per commit): an information row gives the ledger's write cost opened
``durability="full"``. Figures:

a. bytes on disk of the database after the run (all connections closed, so the WAL is folded
   into the file), target <= 1/20 of SqliteSaver's;
b. write cost per step: time spent inside the savers' ``put`` and ``put_writes``, per step,
   target <= 1x (information: the whole ``invoke`` per step);
c. ``get_state_history`` of the thread (every checkpoint with its state), read by a new saver
   object (nothing cached), target <= 1x (information: read again by the same saver).

Information rows repeat (a) to (c) on a thread three times as long (SqliteSaver stores the whole
state at every step, so its costs per step grow with the thread while the ledger's stay flat),
and with LangChain message objects (``add_messages``) instead of JSON dicts: values LangGraph's
serializer encodes, stored base64 in blobs.
Timings are the best of 3 runs, ledger and baseline interleaved.

Run: ``python -m bench --only langgraph [--quick]``.
"""

from __future__ import annotations

import gc
import operator
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from agentledger.ledger import Ledger
from bench._workload import CONVERSATION_CALLS, make_conversation

REPEATS = 3
QUICK_STEPS = 40
TARGET_BYTES = 1 / 20
TARGET_WRITE = 1.0
TARGET_HISTORY = 1.0
TMP_ROOT = Path(
    os.environ.get("AGENTLEDGER_BENCH_TMP")
    or Path(__file__).resolve().parent.parent / "build" / "bench-tmp"
)


@contextmanager
def fresh_dir() -> Iterator[Path]:
    """A new empty directory on the real file system, removed afterwards."""
    TMP_ROOT.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="bench-langgraph-", dir=TMP_ROOT))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# The graph ---------------------------------------------------------------------------------------


class JsonState(TypedDict):
    """Messages as JSON dicts, appended with ``operator.add``."""

    messages: Annotated[list[dict[str, str]], operator.add]
    step: int


def build_graph(steps: int, *, langchain: bool) -> Any:
    """The uncompiled graph: ``model`` runs `steps` times, appending two messages each time."""
    from langgraph.graph import END, START, StateGraph

    pairs = make_conversation(steps)
    state: Any = JsonState
    if langchain:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.graph.message import add_messages

        make_state: Any = TypedDict  # functional form: add_messages is imported lazily
        state = make_state(
            "LangChainState", {"messages": Annotated[list[Any], add_messages], "step": int}
        )

        def model(s: dict[str, Any]) -> dict[str, Any]:
            seen, answer = pairs[s["step"]]
            return {
                "messages": [
                    HumanMessage(seen["content"], id=f"m{2 * s['step']}"),
                    AIMessage(answer["content"], id=f"m{2 * s['step'] + 1}"),
                ],
                "step": s["step"] + 1,
            }

    else:

        def model(s: dict[str, Any]) -> dict[str, Any]:
            seen, answer = pairs[s["step"]]
            return {"messages": [dict(seen), dict(answer)], "step": s["step"] + 1}

    builder: Any = StateGraph(state)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: END if s["step"] >= steps else "model")
    return builder


@dataclass
class Measured:
    """One run of the workload on one saver."""

    bytes_on_disk: int
    write_s: float
    history_cold_s: float
    history_warm_s: float
    checkpoints: int


CONFIG: dict[str, Any] = {"configurable": {"thread_id": "bench"}}
Call = tuple[str, tuple[Any, ...]]


def capture_calls(builder: Any, steps: int) -> list[Call]:
    """The saver calls (``put``, ``put_writes``) the graph makes, with copies of their arguments.

    Captured in order from one run on LangGraph's InMemorySaver, before any timing.
    """
    import copy

    from langgraph.checkpoint.memory import InMemorySaver

    calls: list[Call] = []

    class Capturing(InMemorySaver):
        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            args = (_plain_config(config), checkpoint, metadata, new_versions)
            calls.append(("put", copy.deepcopy(args)))
            return super().put(config, checkpoint, metadata, new_versions)

        def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            args = (_plain_config(config), list(writes), task_id, task_path)
            calls.append(("put_writes", copy.deepcopy(args)))
            super().put_writes(config, writes, task_id, task_path)

    graph = builder.compile(checkpointer=Capturing())
    config = {"configurable": CONFIG["configurable"], "recursion_limit": 2 * steps + 10}
    graph.invoke({"messages": [], "step": 0}, config, durability="sync")
    return calls


def _plain_config(config: Any) -> dict[str, Any]:
    """A config with only what a saver reads (LangGraph adds runtime objects to it)."""
    keys = ("thread_id", "checkpoint_ns", "checkpoint_id")
    return {
        "configurable": {k: config["configurable"][k] for k in keys if k in config["configurable"]}
    }


def _write(saver: Any, calls: list[Call]) -> float:
    """Make the calls on `saver`; the seconds spent inside them."""
    gc.collect()
    spent = 0.0
    for method, args in calls:
        function = getattr(saver, method)
        started = time.perf_counter()
        function(*args)
        spent += time.perf_counter() - started
    return spent


def _db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def _history(builder: Any, saver: Any) -> tuple[float, int]:
    graph = builder.compile(checkpointer=saver)
    gc.collect()
    started = time.perf_counter()
    snapshots = list(graph.get_state_history(CONFIG))
    return time.perf_counter() - started, len(snapshots)


def measure_ledger(builder: Any, calls: list[Call], durability: str = "normal") -> Measured:
    """The calls on `LedgerCheckpointSaver` over a fresh SQLite ledger."""
    from agentledger.agents.integrations.langgraph import LedgerCheckpointSaver

    with fresh_dir() as directory:
        db = directory / "ledger.db"
        with Ledger.open(f"sqlite:///{db}", durability=durability) as ledger:
            saver = LedgerCheckpointSaver(ledger)
            write_s = _write(saver, calls)
            warm_s, _ = _history(builder, saver)
            cold_s, count = _history(builder, LedgerCheckpointSaver(ledger))
        size = _db_bytes(db)
    return Measured(size, write_s, cold_s, warm_s, count)


def measure_sqlite_saver(builder: Any, calls: list[Call]) -> Measured:
    """The calls on LangGraph's SqliteSaver over a fresh database file."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    with fresh_dir() as directory:
        db = directory / "checkpoints.db"
        conn = sqlite3.connect(db, check_same_thread=False)
        saver = SqliteSaver(conn)
        write_s = _write(saver, calls)
        warm_s, _ = _history(builder, saver)
        conn.close()
        conn = sqlite3.connect(db, check_same_thread=False)
        cold_s, count = _history(builder, SqliteSaver(conn))
        conn.close()
        size = _db_bytes(db)
    return Measured(size, write_s, cold_s, warm_s, count)


def best(runs: list[Measured]) -> Measured:
    """The best of each timing across runs (sizes are the same in every run)."""
    return Measured(
        bytes_on_disk=runs[0].bytes_on_disk,
        write_s=min(r.write_s for r in runs),
        history_cold_s=min(r.history_cold_s for r in runs),
        history_warm_s=min(r.history_warm_s for r in runs),
        checkpoints=runs[0].checkpoints,
    )


def compare(
    steps: int, *, langchain: bool, repeats: int, full: list[Measured] | None = None
) -> tuple[Measured, Measured]:
    """Ledger and baseline, interleaved `repeats` times; the best of each.

    With `full`, the ledger opened ``durability="full"`` is measured too and appended to it.
    """
    builder = build_graph(steps, langchain=langchain)
    calls = capture_calls(builder, steps)
    ours: list[Measured] = []
    theirs: list[Measured] = []
    for _ in range(repeats):
        ours.append(measure_ledger(builder, calls))
        theirs.append(measure_sqlite_saver(builder, calls))
        if full is not None:
            full.append(measure_ledger(builder, calls, durability="full"))
    return best(ours), best(theirs)


def _ms(seconds: float, steps: int = 1) -> float:
    return round(1000 * seconds / steps, 3)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """The rows: bytes, write per step and history, JSON messages; then LangChain messages."""
    steps = QUICK_STEPS if quick else CONVERSATION_CALLS
    repeats = 1 if quick else REPEATS
    full_runs: list[Measured] = []
    ours, theirs = compare(steps, langchain=False, repeats=repeats, full=full_runs)
    full = best(full_runs)
    what = f"{steps}-step thread, messages as JSON dicts, vs SqliteSaver"
    rows: list[dict[str, Any]] = [
        {
            "name": f"(a) bytes on disk, {what}",
            "value": ours.bytes_on_disk,
            "baseline": theirs.bytes_on_disk,
            "ratio": round(ours.bytes_on_disk / theirs.bytes_on_disk, 4),
            "target": TARGET_BYTES,
            "unit": "B",
            "higher_is_better": False,
        },
        {
            "name": f"(b) write per step (put + put_writes), {what}",
            "value": _ms(ours.write_s, steps),
            "baseline": _ms(theirs.write_s, steps),
            "ratio": round(ours.write_s / theirs.write_s, 3),
            "target": TARGET_WRITE,
            "unit": "ms",
            "higher_is_better": False,
        },
        {
            "name": "(b, info) write per step, the ledger opened durability='full' (an fsync "
            "per commit, as SqliteSaver's default synchronous=FULL)",
            "value": _ms(full.write_s, steps),
            "baseline": _ms(theirs.write_s, steps),
            "ratio": round(full.write_s / theirs.write_s, 3),
            "unit": "ms",
            "higher_is_better": False,
        },
        {
            "name": f"(c) get_state_history, new saver ({ours.checkpoints} checkpoints), {what}",
            "value": _ms(ours.history_cold_s),
            "baseline": _ms(theirs.history_cold_s),
            "ratio": round(ours.history_cold_s / theirs.history_cold_s, 3),
            "target": TARGET_HISTORY,
            "unit": "ms",
            "higher_is_better": False,
        },
        {
            "name": "(c, info) get_state_history again by the saver that wrote the thread",
            "value": _ms(ours.history_warm_s),
            "baseline": _ms(theirs.history_warm_s),
            "ratio": round(ours.history_warm_s / theirs.history_warm_s, 3),
            "unit": "ms",
            "higher_is_better": False,
        },
    ]
    if not quick:  # SqliteSaver's cost per step grows with the thread; the ledger's does not
        longer = 3 * steps
        ours_3, theirs_3 = compare(longer, langchain=False, repeats=1)
        rows += [
            {
                "name": f"(b, info) write per step, {longer}-step thread (JSON dicts)",
                "value": _ms(ours_3.write_s, longer),
                "baseline": _ms(theirs_3.write_s, longer),
                "ratio": round(ours_3.write_s / theirs_3.write_s, 3),
                "unit": "ms",
                "higher_is_better": False,
            },
            {
                "name": f"(c, info) get_state_history, new saver, {longer}-step thread",
                "value": _ms(ours_3.history_cold_s),
                "baseline": _ms(theirs_3.history_cold_s),
                "ratio": round(ours_3.history_cold_s / theirs_3.history_cold_s, 3),
                "unit": "ms",
                "higher_is_better": False,
            },
            {
                "name": f"(a, info) bytes on disk, {longer}-step thread",
                "value": ours_3.bytes_on_disk,
                "baseline": theirs_3.bytes_on_disk,
                "ratio": round(ours_3.bytes_on_disk / theirs_3.bytes_on_disk, 4),
                "unit": "B",
                "higher_is_better": False,
            },
        ]
    ours_lc, theirs_lc = compare(steps, langchain=True, repeats=repeats)
    rows += [
        {
            "name": "(a, info) bytes on disk, messages as LangChain objects (add_messages)",
            "value": ours_lc.bytes_on_disk,
            "baseline": theirs_lc.bytes_on_disk,
            "ratio": round(ours_lc.bytes_on_disk / theirs_lc.bytes_on_disk, 4),
            "unit": "B",
            "higher_is_better": False,
        },
        {
            "name": "(b, info) write per step, LangChain objects",
            "value": _ms(ours_lc.write_s, steps),
            "baseline": _ms(theirs_lc.write_s, steps),
            "ratio": round(ours_lc.write_s / theirs_lc.write_s, 3),
            "unit": "ms",
            "higher_is_better": False,
        },
        {
            "name": "(c, info) get_state_history, new saver, LangChain objects",
            "value": _ms(ours_lc.history_cold_s),
            "baseline": _ms(theirs_lc.history_cold_s),
            "ratio": round(ours_lc.history_cold_s / theirs_lc.history_cold_s, 3),
            "unit": "ms",
            "higher_is_better": False,
        },
    ]
    return rows


def main(argv: list[str]) -> int:
    """``python -m bench.bench_langgraph [--quick]``."""
    from bench._harness import main as harness_main

    return harness_main(["--only", "langgraph", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
