"""Sealed (encrypted) content of a data subject: the cost of writing and reading it.

A run tied to a data subject (``record_run(..., subject=...)``) stores every content value as a
blob sealed under the subject's key (AES-256-GCM, nonce from an HMAC of the plaintext). The
workload is the ledger benchmark's 200-call conversation (``make_conversation``: a ~400-byte
message and a ~100-byte answer per call) in a SQLite ledger with ``redaction=None`` (so the
figures isolate sealing).

Rows (a) and (b) are the targets: sealed blobs at most 1.5x unsealed ones. A conversation is
stored as blobs with or without a subject (one node per message), so the same blobs are
written and read in both variants:

a. recording the conversation (one ``model_call`` per turn) with ``subject="bench-user"`` vs
   the same recording with no subject.
b. reading it back as a reader does: every event and every call's conversation
   (``conversations`` over each request and response), opened with the key, vs the same reads
   with no subject.
c. (info) the same with, per turn, a tool call and a delta, and an answer at the end: a
   subject's small values go out of line (a sealed blob each) where they would otherwise be
   inline in their events, so this adds that cost to sealing: write, read, bytes on disk.

Timings are the best of 5 ledgers (reads: of 5 reads each), the two variants interleaved so
drift hits both alike.

Run: ``python -m bench --only erasure [--quick]``.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from agentledger.ledger import Ledger, blob_refs_in
from bench._workload import CONVERSATION_CALLS, make_conversation

REPEATS = 5
READS = 5
QUICK_CALLS = 50
SUBJECT = "bench-user"
PARAMS = {"temperature": 0.2, "max_tokens": 1024}
USAGE = {"input_tokens": 100, "output_tokens": 25, "total_tokens": 125}


def record(ledger: Ledger, calls: int, subject: str | None, *, extras: bool = True) -> str:
    """Record the benchmark run (``extras``: with tools, deltas and an answer); its id."""
    history: list[Any] = []
    with ledger.record_run("bench-erasure", input="a long conversation", subject=subject) as run:
        for turn, (message, answer) in enumerate(make_conversation(calls)):
            history.append(message)
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
            history.append(answer)
            if not extras:
                continue
            run.tool("lookup", {"turn": turn, "q": message["content"][:80]}, result={"n": turn})
            run.delta({"turns": {str(turn): answer["content"][:40]}})
        if extras:
            run.answer("done: " + history[-1]["content"])
    return run.run_id


def read(ledger: Ledger, run_id: str) -> int:
    """Read the run as a reader does; returns how many values were read."""
    events = ledger.events(run_id)
    calls = [e.payload for e in events if e.kind == "ModelCalled"]
    heads = [p[k] for p in calls for k in ("messages_ref", "response_ref") if p.get(k)]
    chains = ledger.conversations(heads)
    others = [ref for e in events if e.kind != "ModelCalled" for ref in blob_refs_in(e.payload)]
    values = ledger.blobs(others)
    return len(chains) + len(values)


def _once(calls: int, subject: str | None, *, extras: bool) -> tuple[float, float, int]:
    directory = Path(tempfile.mkdtemp(prefix="bench-erasure-"))
    try:
        path = directory / "ledger.db"
        with Ledger.open(f"sqlite:///{path}", redaction=None) as ledger:
            gc.collect()
            start = time.perf_counter()
            run_id = record(ledger, calls, subject, extras=extras)
            wrote = time.perf_counter() - start
            read(ledger, run_id)  # warm the page cache and the key's derived ciphers alike
            took = float("inf")
            for _ in range(READS):
                gc.collect()
                start = time.perf_counter()
                read(ledger, run_id)
                took = min(took, time.perf_counter() - start)
        size = sum(p.stat().st_size for p in directory.iterdir())
        return wrote, took, size
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _row(
    name: str, value: float, baseline: float, note: str, *, unit: str = "ms", target: float | None
) -> dict[str, Any]:
    scale = 1000 if unit == "ms" else 1
    return {
        "name": name,
        "value": round(value * scale, 2),
        "baseline": round(baseline * scale, 2),
        "ratio": round(value / baseline, 3),
        "target": target,
        "unit": unit,
        "higher_is_better": False,
        "note": note,
    }


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure (a), (b) and (c) of the module docstring."""
    calls = QUICK_CALLS if quick else CONVERSATION_CALLS
    rows = []
    for extras in (False, True):
        plain: list[tuple[float, float, int]] = []
        sealed: list[tuple[float, float, int]] = []
        for _ in range(REPEATS):
            plain.append(_once(calls, None, extras=extras))
            sealed.append(_once(calls, SUBJECT, extras=extras))
        write = (min(s[0] for s in sealed), min(p[0] for p in plain))
        reads = (min(s[1] for s in sealed), min(p[1] for p in plain))
        size = (float(sealed[0][2]), float(plain[0][2]))
        if not extras:
            rows += [
                _row(
                    f"[a] record a {calls}-call conversation, sealed for a data subject",
                    *write,
                    "(a) SQLite, redaction=None, one model_call per turn (every message a blob "
                    "either way); baseline: the same with no subject; target <= 1.5x",
                    target=1.5,
                ),
                _row(
                    "[b] read it back (events and every call's conversation), sealed",
                    *reads,
                    "(b) conversations opened with the subject's key; baseline: the same reads "
                    "with no subject; target <= 1.5x",
                    target=1.5,
                ),
            ]
            continue
        note = (
            "(c) per turn also a tool call and a delta, and an answer: a subject's small values "
            "are sealed blobs, otherwise inline; baseline: the same run with no subject"
        )
        rows += [
            _row("[c] record, with tools and deltas (info)", *write, note, target=None),
            _row("[c] read back, with tools and deltas (info)", *reads, note, target=None),
            _row(
                "[c] bytes on disk, with tools and deltas (info)",
                *size,
                note,
                unit="B",
                target=None,
            ),
        ]
    return rows


if __name__ == "__main__":
    import sys

    from bench._harness import format_table, normalise

    rows = [normalise("bench_erasure", row) for row in run(quick="--quick" in sys.argv)]
    print(format_table(rows))
