"""CLI cold start, and listing the newest runs of a large ledger.

Cold start: `agentledger runs` (and `verify`) on an empty SQLite ledger vs
`python -c "import sqlite3"`. Both are timed as fresh processes (the median of several starts),
in the same run, so the ratio holds on any machine: a command pays for Python's start-up and for
the modules it imports. The target is 10x the bare interpreter importing sqlite3.

Listing: `ledger.runs(limit=20)` on a ledger of many tagged runs vs the raw SQL that reads the
same 20 index rows and their tags with sqlite3. The target is 2x: the listing must read only
what it returns, whatever the ledger's size.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import UUID

ROUNDS = 9
QUICK_ROUNDS = 3
RUNS, QUICK_RUNS = 10_000, 2_000
LIST_REPEATS = 50


def _median_ms(argv: list[str], rounds: int, cwd: Path) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _cli() -> list[str]:
    return [sys.executable, "-c", "from agentledger.cli import main; raise SystemExit(main())"]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time the start of `runs`, `show --help` and `verify` against the bare interpreter."""
    rounds = QUICK_ROUNDS if quick else ROUNDS
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        db = f"sqlite:///{where / 'empty.db'}"
        from agentledger.ledger import Ledger

        Ledger.open(db).close()  # an empty ledger: read commands refuse a missing file
        _median_ms([sys.executable, "-c", "import sqlite3"], 1, where)  # warm the file cache
        bare = _median_ms([sys.executable, "-c", "import sqlite3"], rounds, where)
        rows = []
        for name, args in (
            ("runs (empty SQLite ledger)", ["runs"]),
            ("verify (empty SQLite ledger)", ["verify"]),
        ):
            value = _median_ms([*_cli(), "--db", db, *args], rounds, where)
            rows.append(
                {
                    "name": f"CLI cold start: {name}",
                    "value": round(value, 1),
                    "baseline": round(bare, 1),
                    "target": 10.0,
                    "unit": "ms",
                    "higher_is_better": False,
                    "note": 'baseline: python -c "import sqlite3" (fresh processes, median)',
                }
            )
        rows.append(_listing(where, QUICK_RUNS if quick else RUNS))
        return rows


def _listing(where: Path, count: int) -> dict[str, Any]:
    import sqlite3

    from agentledger.ledger import Ledger

    path = where / "many.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        for i in range(count):
            with ledger.record_run("bench", input=i, tags=["nightly", f"batch-{i % 10}"]) as run:
                run.answer("ok")
        ours = _best(lambda: ledger.runs(limit=20))
        expected = [(r.run_id, r.tags) for r in ledger.runs(limit=20)]
    connection = sqlite3.connect(path)

    def raw() -> list[tuple[str, tuple[str, ...]]]:
        rows = connection.execute(
            "SELECT run_id, agent, status, started_at, ended_at, last_position, head_hash, "
            "input_preview, parent_run_id FROM agentledger_runs "
            "ORDER BY started_at DESC, run_id LIMIT 20"
        ).fetchall()
        ids = [row[0] for row in rows]
        tags: dict[str, list[str]] = {}
        marks = ", ".join("?" * len(ids))
        for tag, run_id in connection.execute(
            f"SELECT tag, run_id FROM agentledger_run_tags WHERE run_id IN ({marks})", ids
        ):
            tags.setdefault(run_id, []).append(tag)
        return [(run_id, tuple(sorted(tags.get(run_id, [])))) for run_id in ids]

    baseline = _best(raw)
    got = [(str(UUID(run_id)), tags) for run_id, tags in raw()]
    connection.close()
    if got != expected:
        msg = "the raw SQL and ledger.runs(limit=20) disagree"
        raise AssertionError(msg)
    return {
        "name": f"runs(limit=20) on a ledger of {count:,} tagged runs",
        "value": round(ours * 1000, 3),
        "baseline": round(baseline * 1000, 3),
        "target": 2.0,
        "unit": "ms",
        "higher_is_better": False,
        "note": "baseline: the same 20 index rows and their tags read with sqlite3 (best of 50)",
    }


def _best(fn: Any) -> float:
    best = float("inf")
    for _ in range(LIST_REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
