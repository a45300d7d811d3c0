"""CLI cold start: `agentledger runs` on an empty SQLite ledger vs `python -c "import sqlite3"`.

Both are timed as fresh processes (the median of several starts), in the same run, so the ratio
holds on any machine: a command pays for Python's start-up and for the modules it imports. The
target is 10x the bare interpreter importing sqlite3, which on this machine is about 250 ms.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROUNDS = 9
QUICK_ROUNDS = 3


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
        return rows
