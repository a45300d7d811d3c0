"""Fold throughput: `fold_patches` against a hand-written in-place merge loop.

World state is rebuilt by folding every delta of a run, so the fold is the hot path of time
travel and projection rebuilds. Target: `fold_patches` runs at ≥ 0.7x the speed of the plainest
correct Python loop (a minimal recursive in-place merge, below) over the same deltas.

Run: ``.venv/bin/python -m bench.bench_fold [--quick]``.
"""

from __future__ import annotations

import gc

# The bench needs reproducible synthetic deltas, not a run context: seeded randomness is the point.
import random  # noqa: TID251
import sys
import time
from typing import Any

from agentledger.projections import JSONValue, fold_patches

FULL_DELTAS = 1_000_000
QUICK_DELTAS = 100_000
TARGET_RATIO = 0.7
SEED = 7386
REPEATS = 3

_TOP_KEYS = [f"k{i}" for i in range(40)]
_INNER_KEYS = [f"f{i}" for i in range(12)]
_WORDS = ["ok", "todo", "done", "error", "retry", "a", "b", ""]


def make_deltas(count: int, seed: int = SEED) -> list[dict[str, JSONValue]]:
    """Build `count` small deltas: each sets 1-3 keys at depth 1-3; about 1 in 12 deletes."""
    rng = random.Random(seed)
    deltas: list[dict[str, JSONValue]] = []
    for _ in range(count):
        delta: dict[str, Any] = {}
        for _ in range(rng.randint(1, 3)):
            depth = rng.randint(1, 3)
            node = delta
            node_key = rng.choice(_TOP_KEYS)
            for _ in range(depth - 1):
                child = node.get(node_key)
                if not isinstance(child, dict):
                    child = node[node_key] = {}
                node = child
                node_key = rng.choice(_INNER_KEYS)
            roll = rng.random()
            value: JSONValue
            if roll < 1 / 12:
                value = None
            elif roll < 0.5:
                value = rng.randint(-1000, 1000)
            elif roll < 0.85:
                value = rng.choice(_WORDS)
            else:
                value = rng.random() < 0.5
            node[node_key] = value
        deltas.append(delta)
    return deltas


def _baseline_merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            current = target.get(key)
            if not isinstance(current, dict):
                current = target[key] = {}
            _baseline_merge(current, value)
        else:
            target[key] = value


def baseline_fold(patches: list[dict[str, JSONValue]]) -> dict[str, Any]:
    """Fold with the plainest in-place merge: no copies, object patches only."""
    doc: dict[str, Any] = {}
    merge = _baseline_merge
    for patch in patches:
        merge(doc, patch)
    return doc


def _timed(fn: Any, patches: list[dict[str, JSONValue]]) -> tuple[float, object]:
    gc.collect()
    started = time.perf_counter()
    result = fn(patches)
    return time.perf_counter() - started, result


def run(quick: bool = False) -> list[dict[str, object]]:
    """Measure fold throughput (deltas per second) against the baseline; return one row."""
    count = QUICK_DELTAS if quick else FULL_DELTAS
    deltas = make_deltas(count)
    ours = base = float("inf")
    for _ in range(REPEATS):  # interleaved, best of each, so drift hits both alike
        seconds, folded = _timed(fold_patches, deltas)
        ours = min(ours, seconds)
        seconds, expected = _timed(baseline_fold, deltas)
        base = min(base, seconds)
        if folded != expected:
            msg = "fold_patches disagrees with the baseline merge loop"
            raise AssertionError(msg)
    value = count / ours
    baseline = count / base
    return [
        {
            "name": f"fold_patches over {count:,} small deltas",
            "value": round(value),
            "baseline": round(baseline),
            "ratio": round(value / baseline, 3),
            "target": TARGET_RATIO,
            "unit": "deltas/s",
        }
    ]


def main(argv: list[str]) -> int:
    """Print each result row; exit 1 when a ratio misses its target."""
    rows = run(quick="--quick" in argv)
    missed = False
    for row in rows:
        ratio = float(str(row["ratio"]))
        target = float(str(row["target"]))
        verdict = "ok" if ratio >= target else "MISSED"
        missed = missed or ratio < target
        print(
            f"{row['name']}: {row['value']:,} {row['unit']} vs baseline "
            f"{row['baseline']:,} {row['unit']} = {ratio:.3f}x (target >= {target}x) {verdict}"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
