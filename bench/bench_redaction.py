"""Redaction cost: ``redact_json`` over a 200-call conversation, against what it is added to.

The conversation is the ledger benchmark's (``make_conversation``: a ~400-byte user or tool
message and a ~100-byte answer per call) with realistic numbers mixed in, seeded: about one
message in three carries a date, an amount and an order id, and one in eight an email address
or a phone number, so the number detectors do real work.

Rows (a) and (b) are information; (c) is the target: recording a 200-call conversation with
the recorder's default policy is at most 1.3x the time of the same recording with
``redaction=None``.

a. ``redact_json`` over each call's new messages once (the request's newest message and the
   answer: what a recorder that stores conversation chains must redact) vs ``json.dumps`` of the
   same values, the cheapest walk of the same JSON.
b. ``redact_json`` over each call's full request (the whole history, as a naive recorder would
   redact it) vs ``json.dumps`` of the same; and the same through one ``Redactor`` for the run,
   which redacts each distinct string once.
c. recording the conversation in a SQLite ledger through ``model_call`` with the default
   policy (the recorder redacts each new message and answer once, and records a PolicyDecided
   before each call whose values hold placeholders) vs the same with ``redaction=None``.

Timings are the best of 3 (of 5 for the recordings, which interleave with and without so drift
hits both alike).

Run: ``python -m bench --only redaction [--quick]``.
"""

from __future__ import annotations

import gc
import json

# Seeded randomness mixes numbers into the synthetic text; a benchmark has no run context.
import random  # noqa: TID251
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentledger.ledger import Ledger
from agentledger.ledger.redaction import RedactionPolicy, Redactor, redact_json
from bench._workload import CONVERSATION_CALLS, SEED, make_conversation

REPEATS = 3
RECORD_REPEATS = 5
QUICK_CALLS = 50
PARAMS = {"temperature": 0.2, "max_tokens": 1024}
USAGE = {"input_tokens": 100, "output_tokens": 25, "total_tokens": 125}
EXTRAS = [
    "on 2026-06-13 at 14:00",
    "total $1,234.50",
    "order ORD-48213",
    "ref sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "version 3.11.4",
]
PERSONAL = ["mail jane.doe@example.org", "call +44 20 7946 0958", "or (415) 555-0132"]

Messages = list[tuple[dict[str, str], dict[str, str]]]


def conversation(calls: int) -> Messages:
    """The benchmark conversation with numbers and some personal data mixed in (seeded)."""
    rng = random.Random(SEED + 16)
    out: Messages = []
    for message, answer in make_conversation(calls):
        content = message["content"]
        if rng.random() < 1 / 3:
            content += " " + " ".join(rng.sample(EXTRAS, 3))
        if rng.random() < 1 / 8:
            content += " " + rng.choice(PERSONAL)
        out.append(({**message, "content": content}, answer))
    return out


def best_of(action: Callable[[], object]) -> float:
    """The best wall time of ``REPEATS`` runs of ``action``, in seconds."""
    times = []
    for _ in range(REPEATS):
        gc.collect()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def new_messages(convo: Messages, walk: Callable[[Any], object]) -> None:
    """``walk`` each call's newest request message and its answer."""
    for message, answer in convo:
        walk([message])
        walk(answer)


def full_requests(convo: Messages, walk: Callable[[Any], object]) -> None:
    """``walk`` each call's whole request (the history so far) and its answer."""
    history: list[dict[str, str]] = []
    for message, answer in convo:
        history.append(message)
        walk(history)
        walk(answer)
        history.append(answer)


def record(convo: Messages, redaction: RedactionPolicy | None) -> float:
    """Seconds to record ``convo`` in a fresh SQLite ledger under ``redaction``."""
    directory = Path(tempfile.mkdtemp(prefix="bench-redaction-"))
    try:
        with Ledger.open(f"sqlite:///{directory / 'ledger.db'}", redaction=redaction) as ledger:
            gc.collect()
            start = time.perf_counter()
            with ledger.record_run("bench-chat", input="a long conversation") as run:
                history: list[Any] = []
                for message, answer in convo:
                    sent, kept = message, answer
                    history.append(sent)
                    run.model_call(
                        provider="bench",
                        model="bench-model-1",
                        messages=history,
                        response=kept,
                        params=PARAMS,
                        usage=USAGE,
                        latency_ms=640.0,
                        finish_reason="stop",
                    )
                    history.append(kept)
            return time.perf_counter() - start
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _row(
    name: str, value: float, baseline: float, note: str, target: float | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "value": round(value * 1000, 2),
        "baseline": round(baseline * 1000, 2),
        "ratio": round(value / baseline, 3),
        "target": target,
        "unit": "ms",
        "higher_is_better": False,
        "note": note,
    }


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure (a), (b) and (c) of the module docstring."""
    calls = QUICK_CALLS if quick else CONVERSATION_CALLS
    convo = conversation(calls)
    redact_json(convo)  # load the number libraries before timing
    ours_new = best_of(lambda: new_messages(convo, redact_json))
    dumps_new = best_of(lambda: new_messages(convo, json.dumps))
    ours_full = best_of(lambda: full_requests(convo, redact_json))
    dumps_full = best_of(lambda: full_requests(convo, json.dumps))
    cached_full = best_of(lambda: full_requests(convo, Redactor().json))
    plain_times, redacted_times = [], []
    for _ in range(RECORD_REPEATS):
        plain_times.append(record(convo, None))
        redacted_times.append(record(convo, RedactionPolicy()))
    plain, redacted = min(plain_times), min(redacted_times)
    text = sum(len(m["content"]) + len(a["content"]) for m, a in convo)
    return [
        _row(
            f"[a] redact_json, each message once ({calls} calls, info)",
            ours_new,
            dumps_new,
            f"(a) {text:,} characters of message text, {ours_new / calls * 1e6:.0f} us a call; "
            "baseline json.dumps of the same values",
        ),
        _row(
            f"[b] redact_json, full request every call ({calls} calls, info)",
            ours_full,
            dumps_full,
            "(b) the whole history redacted again on every call; baseline json.dumps of the same",
        ),
        _row(
            f"[b] full request every call, one Redactor for the run ({calls} calls, info)",
            cached_full,
            dumps_full,
            "(b) as above through one Redactor, which remembers the strings it has redacted, so "
            "each message is redacted once; baseline json.dumps of the same",
        ),
        _row(
            f"[c] record {calls}-call conversation, default redaction policy",
            redacted,
            plain,
            "(c) SQLite ledger, one model_call per turn, the recorder redacting; baseline: the "
            "same recording with redaction=None; target <= 1.3x",
            target=1.3,
        ),
    ]


if __name__ == "__main__":
    import sys

    from bench._harness import format_table, normalise

    rows = [normalise("bench_redaction", row) for row in run(quick="--quick" in sys.argv)]
    print(format_table(rows))
