"""The benchmark harness: discover ``bench/bench_*.py``, run them, print and save the figures.

Every benchmark module has ``run(quick: bool = False) -> list[dict]`` returning rows
``{"name", "value", "baseline", "ratio", "target", "unit", "higher_is_better", "note"}``: a
figure, the baseline it was measured against in the same run, their ratio, and the target for
that ratio (``None`` for a row that is information only). A module may also offer
``profile(quick: bool = False) -> None``, which ``--profile`` calls instead of ``run``.

Benchmarks are measurements, not gates: a MISS is reported, and the exit status stays 0. Only a
benchmark that crashes (or a bad command line) exits non-zero.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import pkgutil
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_PATH = BENCH_DIR / "results" / "latest.json"
PREFIX = "bench_"

ROW_DEFAULTS: dict[str, Any] = {
    "baseline": None,
    "ratio": None,
    "target": None,
    "unit": "",
    "higher_is_better": True,
    "note": "",
}


def discover() -> list[str]:
    """The benchmark module names (``bench_*``), sorted."""
    return sorted(
        info.name for info in pkgutil.iter_modules([str(BENCH_DIR)]) if info.name.startswith(PREFIX)
    )


def select(available: list[str], only: list[str]) -> list[str]:
    """The modules named by ``--only`` (``fold`` or ``bench_fold``); all of them if none."""
    if not only:
        return available
    chosen: list[str] = []
    for wanted in only:
        name = wanted.removesuffix(".py")
        name = name if name.startswith(PREFIX) else PREFIX + name
        if name not in available:
            msg = f"no benchmark {wanted!r}; available: {', '.join(available)}"
            raise SystemExit(msg)
        if name not in chosen:
            chosen.append(name)
    return chosen


def verdict(row: dict[str, Any]) -> str:
    """PASS or MISS against the row's target, or ``info`` for a row without one."""
    ratio, target = row.get("ratio"), row.get("target")
    if ratio is None or target is None:
        return "info"
    if row.get("higher_is_better", True):
        return "PASS" if float(ratio) >= float(target) else "MISS"
    return "PASS" if float(ratio) <= float(target) else "MISS"


def normalise(module: str, row: dict[str, Any]) -> dict[str, Any]:
    """Fill the optional keys, compute a missing ratio, and add the module and verdict."""
    out = {"module": module, **ROW_DEFAULTS, **row}
    if out["ratio"] is None and out["baseline"]:
        out["ratio"] = round(float(out["value"]) / float(out["baseline"]), 3)
    out["verdict"] = verdict(out)
    return out


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{int(value):,}"


def _target(row: dict[str, Any]) -> str:
    if row["target"] is None:
        return "-"
    return f"{'>=' if row['higher_is_better'] else '<='} {row['target']}x"


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a text table, with numbered notes below it."""
    header = ("benchmark", "value", "baseline", "ratio", "target", "result")
    lines: list[tuple[str, ...]] = [header]
    notes: list[str] = []
    for row in rows:
        name = f"{row['module'].removeprefix(PREFIX)}: {row['name']}"
        if row["note"]:
            notes.append(str(row["note"]))
            name += f" [{len(notes)}]"
        unit = f" {row['unit']}" if row["unit"] else ""
        ratio = "-" if row["ratio"] is None else f"{float(row['ratio']):.3f}x"
        lines.append(
            (
                name,
                _number(row["value"]) + unit,
                _number(row["baseline"]) + (unit if row["baseline"] is not None else ""),
                ratio,
                _target(row),
                row["verdict"],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = []
    for index, line in enumerate(lines):
        cells = [line[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)
        ]
        text.append("  ".join(cells).rstrip())
        if index == 0:
            text.append("  ".join("-" * width for width in widths))
    text += [f"[{i}] {note}" for i, note in enumerate(notes, start=1)]
    return "\n".join(text)


def summary(rows: list[dict[str, Any]], errors: list[str]) -> str:
    """One line: how many rows passed, missed, or are information only."""
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("PASS", "MISS", "info")}
    figures = f"{len(rows)} figure" + ("" if len(rows) == 1 else "s")
    line = f"{figures}: {counts['PASS']} PASS, {counts['MISS']} MISS, {counts['info']} info-only"
    if errors:
        line += f"; {len(errors)} benchmark(s) FAILED TO RUN: {', '.join(errors)}"
    return line + " (a measurement, not a gate)"


def _git_commit() -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run(
            [git, "rev-parse", "--short", "HEAD"],
            cwd=BENCH_DIR,
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def metadata(*, quick: bool, modules: list[str], seconds: dict[str, float]) -> dict[str, Any]:
    """Where and how the figures were measured."""
    return {
        "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": quick,
        "modules": modules,
        "seconds": {name: round(s, 2) for name, s in seconds.items()},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "git_commit": _git_commit(),
    }


def write_json(path: Path, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Save the run as JSON (``bench/results/`` is git-ignored)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str) + "\n")


def run_modules(
    modules: list[str], *, quick: bool
) -> tuple[list[dict[str, Any]], list[str], dict[str, float]]:
    """Run each module's ``run``; collect its rows, the modules that crashed, and timings."""
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    seconds: dict[str, float] = {}
    for name in modules:
        print(f"running {name}{' (quick)' if quick else ''} ...", flush=True)
        # What earlier modules left behind is set aside, so that the collector's passes in
        # this one walk only its own objects, as they would in a process running it alone.
        gc.collect()
        gc.freeze()
        started = time.perf_counter()
        try:
            module = importlib.import_module(f"bench.{name}")
            produced = module.run(quick=quick)
        except Exception:  # noqa: BLE001 - report the crash, keep measuring the others
            traceback.print_exc()
            errors.append(name)
            continue
        finally:
            seconds[name] = time.perf_counter() - started
        rows += [normalise(name, row) for row in produced]
        print(f"  {name} done in {seconds[name]:.1f}s", flush=True)
    return rows, errors, seconds


def run_profiles(modules: list[str], *, quick: bool) -> int:
    """Call ``profile`` on the chosen modules that have one."""
    profiled = 0
    for name in modules:
        module = importlib.import_module(f"bench.{name}")
        if hasattr(module, "profile"):
            print(f"profiling {name}{' (quick)' if quick else ''} ...", flush=True)
            module.profile(quick=quick)
            profiled += 1
    if not profiled:
        print(f"none of {', '.join(modules)} has a profile() function")
        return 2
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line of ``python -m bench``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run the benchmarks; every figure is a ratio against a same-run baseline.",
    )
    parser.add_argument("--quick", action="store_true", help="smaller workloads: a smoke run")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this benchmark module (e.g. ledger or bench_ledger); repeatable",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of measuring, print a cProfile of the modules that offer one",
    )
    parser.add_argument(
        "--json", type=Path, default=RESULTS_PATH, help=f"where to write results ({RESULTS_PATH})"
    )
    parser.add_argument("--list", action="store_true", help="list the benchmark modules and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks; exit 0 even when a figure misses its target."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    available = discover()
    if args.list:
        print("\n".join(available))
        return 0
    modules = select(available, args.only)
    if args.profile:
        return run_profiles(modules, quick=args.quick)
    rows, errors, seconds = run_modules(modules, quick=args.quick)
    print()
    print(format_table(rows))
    print()
    write_json(args.json, metadata(quick=args.quick, modules=modules, seconds=seconds), rows)
    print(summary(rows, errors))
    print(f"results written to {args.json}")
    return 1 if errors else 0
