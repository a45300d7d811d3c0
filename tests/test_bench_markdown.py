"""`python -m bench.markdown`: a results file as the table of docs/benchmarks.md."""

from __future__ import annotations

import json
from pathlib import Path

from bench.markdown import NONE, TIMES, main, render

RESULTS = {
    "meta": {
        "when_utc": "2026-11-25T03:17:58Z",
        "git_commit": "abc1234",
        "python": "3.11.7",
        "cpu_count": 2,
        "quick": False,
    },
    "rows": [
        {
            "module": "bench_cli",
            "name": "cold start",
            "value": 110.8,
            "baseline": 14.4,
            "ratio": 7.694,
            "target": 10.0,
            "unit": "ms",
            "higher_is_better": False,
            "verdict": "PASS",
        },
        {
            "module": "bench_ledger",
            "name": "one commit per event",
            "value": 7278,
            "baseline": 44186,
            "ratio": 0.165,
            "target": 0.8,
            "unit": "events/s",
            "higher_is_better": True,
            "verdict": "MISS",
        },
        {
            "module": "bench_ledger",
            "name": "floor | info",
            "value": 3.2,
            "baseline": 1.0,
            "ratio": 3.2,
            "target": None,
            "unit": "ms",
        },
    ],
}


def test_gated_rows_are_rendered_with_their_verdict_and_info_rows_only_on_request() -> None:
    """PASS rows plain, MISS rows bold, the direction of each target; info rows with --all."""
    table = render(RESULTS)
    assert "commit `abc1234`" in table
    assert f"| cli | cold start | 111 ms | 14.4 ms | 7.69{TIMES} | ≤ 10.0{TIMES} PASS |" in table
    assert (
        f"| ledger | one commit per event | 7,278 events/s | 44,186 events/s | 0.165{TIMES} |"
        in table
    )
    assert f"≥ 0.8{TIMES} **MISS**" in table
    assert "floor" not in table
    assert f"| ledger | floor / info | 3.2 ms | 1 ms | 3.2{TIMES} | {NONE} |" in render(
        RESULTS, everything=True
    )


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    """A missing or broken results file is refused with its path, exit 2."""
    broken = tmp_path / "latest.json"
    broken.write_text("{not json", encoding="utf-8")
    assert main([str(broken)]) == 2
    good = tmp_path / "good.json"
    good.write_text(json.dumps(RESULTS), encoding="utf-8")
    assert main([str(good)]) == 0
