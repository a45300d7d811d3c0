"""Render a results file of ``python -m bench`` as the Markdown table of docs/benchmarks.md.

``python -m bench.markdown [RESULTS.json] [--all]`` prints one row per figure with a target
(``--all``: the information rows too), in the order the run measured them, with the run's
commit, date and machine above it. Default file: ``bench/results/latest.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench._harness import RESULTS_PATH

TIMES = "\u00d7"  # the multiplication sign of the docs' ratios
NONE = "\u2013"  # an en dash: no target


def _number(value: Any, unit: str) -> str:
    if not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def _target(row: dict[str, Any]) -> str:
    target = row.get("target")
    if target is None:
        return NONE
    sign = "≥" if row.get("higher_is_better") else "≤"
    verdict = row.get("verdict", "")
    shown = f"**{verdict}**" if verdict == "MISS" else verdict
    return f"{sign} {target}{TIMES} {shown}".strip()


def render(results: dict[str, Any], *, everything: bool = False) -> str:
    """The table (and a line naming the run) for ``results``."""
    meta = results.get("meta", {})
    lines = [
        (
            f"Run of {meta.get('when_utc', '?')} at commit `{meta.get('git_commit', '?')}`: "
            f"Python {meta.get('python', '?')}, {meta.get('cpu_count', '?')} cores, "
            f"{'quick sizes' if meta.get('quick') else 'full sizes'}."
        ),
        "",
        "| module | figure | ours | baseline | ratio | target |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for row in results.get("rows", []):
        if row.get("target") is None and not everything:
            continue
        unit = str(row.get("unit", ""))
        ratio = row.get("ratio")
        lines.append(
            "| {} | {} | {} | {} | {} | {} |".format(
                str(row.get("module", "")).removeprefix("bench_"),
                str(row.get("name", "")).replace("|", "/"),
                _number(row.get("value"), unit),
                _number(row.get("baseline"), unit),
                f"{ratio:.3g}{TIMES}" if isinstance(ratio, int | float) else NONE,
                _target(row),
            )
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """``python -m bench.markdown [RESULTS.json] [--all]``."""
    everything = "--all" in argv
    paths = [a for a in argv if a != "--all"]
    path = Path(paths[0]) if paths else RESULTS_PATH
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"cannot read {path}: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(render(results, everything=everything))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
