"""CLI commands over the SQL read models: projections status|catch-up|rebuild|verify, stats, runs.

`agentledger projections status` reports the tracked notification id, the lag and the rows per
table without changing anything; `catch-up` applies what is new; `rebuild` clears the tables
and replays the ledger, with a progress line; `verify` compares the tables with a rebuild from
the events in a scratch copy and exits 1 on any difference. `agentledger stats` prints tokens,
cost, latency and tool error rate by model and/or prompt version. `runs_from_read_model` serves
the `runs` command when it filters by model or prompt. Queries catch up first, and say on
stderr that their answer comes from read models that were not re-verified (stdout stays a
table or valid JSON). Must not write events.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from agentledger.cli._common import CliError, open_ledger, parse_time, plural, whole_number
from agentledger.cli._format import runs_table, terminal_width
from agentledger.ledger import Ledger, RunInfo, UnknownRunError
from agentledger.projections import (
    DEFAULT_BATCH,
    ProjectionError,
    ReadModelProjector,
    ReadModelReport,
    RunRow,
    StatsRow,
    verify_read_models,
)

__all__ = ["UNVERIFIED_NOTE", "parse_prompt", "register", "runs_from_read_model", "stats_table"]

UNVERIFIED_NOTE = (
    "agentledger: note: from read models (derived data), not re-verified against the events: "
    "run `agentledger projections verify`"
)
"""Printed on stderr after every answer served by the read models."""

_BY = {"model": ("model",), "prompt": ("prompt",), "both": ("model", "prompt")}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this module's commands."""
    p = sub.add_parser("projections", help="SQL read models: status, catch-up, rebuild, verify")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = actions.add_parser("status", help="tracked notification id, lag and rows per table")
    a.add_argument("--json", action="store_true", help="print JSON")
    a.set_defaults(func=cmd_status)
    for name, func, text in (
        ("catch-up", cmd_catch_up, "apply the events recorded since the last catch-up"),
        ("rebuild", cmd_rebuild, "clear the read models and replay the whole ledger"),
    ):
        a = actions.add_parser(name, help=text)
        a.add_argument(
            "--batch-size", type=whole_number, default=DEFAULT_BATCH, help="events per commit"
        )
        a.set_defaults(func=func)
    a = actions.add_parser(
        "verify",
        help="compare the read models with a rebuild from the events (in a scratch copy); "
        "exit 1 if any row differs",
    )
    a.add_argument("--json", action="store_true", help="print JSON")
    a.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "stats", help="tokens, cost, latency and tool error rate by model and prompt version"
    )
    p.add_argument("--by", choices=sorted(_BY), default="both", help="group by (default: both)")
    p.add_argument(
        "--since", help="only runs started at or after: 2026-01-31, 2026-01-31T09:00+01:00, 2h, 3d"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_stats)


def _guarded(action: Callable[[], int]) -> int:
    try:
        return action()
    except ProjectionError as e:
        raise CliError(str(e)) from e


def cmd_status(args: argparse.Namespace) -> int:
    """Print where the read models stand."""
    with open_ledger(args, create=False) as ledger:
        status = ReadModelProjector(ledger).status()
    if args.json:
        print(json.dumps(status.as_dict(), indent=2))
        return 0
    print(f"projection {status.name} (schema v{status.schema_version}) on {ledger.url}")
    print(
        f"position   {status.position} of {status.max_notification_id} notifications "
        f"(lag {status.lag})"
    )
    for table, count in status.rows.items():
        print(f"  {table:24} {count:>9} rows")
    return 0


def _progress_line(verb: str) -> Callable[[int, int], None]:
    def show(position: int, stop: int) -> None:
        if sys.stderr.isatty():
            print(f"\r{verb}: {position}/{stop} notifications", end="", file=sys.stderr)

    return show


def cmd_catch_up(args: argparse.Namespace) -> int:
    """Apply new events to the read models."""
    with open_ledger(args, create=False) as ledger:
        projector = ReadModelProjector(ledger)
        applied = _guarded(
            lambda: projector.catch_up(args.batch_size, _progress_line("catching up"))
        )
        position = projector.position()
    _end_progress()
    print(f"applied {plural(applied, 'event')}; read models at notification {position}")
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    """Rebuild the read models from scratch."""
    with open_ledger(args, create=False) as ledger:
        projector = ReadModelProjector(ledger)
        applied = _guarded(lambda: projector.rebuild(args.batch_size, _progress_line("rebuilding")))
        status = projector.status()
    _end_progress()
    rows = sum(status.rows.values())
    print(
        f"rebuilt read models: {plural(applied, 'event')} applied, {plural(rows, 'row')}, "
        f"position {status.position}, lag {status.lag}"
    )
    return 0


def _end_progress() -> None:
    if sys.stderr.isatty():
        print(file=sys.stderr)


def cmd_verify(args: argparse.Namespace) -> int:
    """Compare the read models with a rebuild from the events; exit 1 if they differ."""
    with open_ledger(args, create=False) as ledger:
        report = _guarded_report(lambda: verify_read_models(ledger))
        url = ledger.url
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, ensure_ascii=False, default=str))
        return 0 if report.ok else 1
    for difference in report.differences:
        print(f"DIFFERS {difference}")
    if report.note:
        print(f"note: {report.note}")
    where = (
        f"{plural(report.rows_checked, 'row')} checked against a rebuild up to notification "
        f"{report.position} of {report.max_notification_id} ({url})"
    )
    if report.ok:
        print(f"read models match the events: {where}")
    else:
        print(
            f"read models DIFFER from the events: {plural(len(report.differences), 'row')}; {where}"
        )
    return 0 if report.ok else 1


def _guarded_report(action: Callable[[], ReadModelReport]) -> ReadModelReport:
    try:
        return action()
    except ProjectionError as e:
        raise CliError(str(e)) from e


def cmd_stats(args: argparse.Namespace) -> int:
    """Print usage statistics (and, on stderr, that they come from unverified read models)."""
    group_by = _BY[args.by]
    with open_ledger(args, read_only="auto") as ledger:
        since = parse_time("--since", args.since, ledger.clock)
        projector = ReadModelProjector(ledger)
        rows = projector.stats(group_by, since=since)
    if args.json:
        print(json.dumps([row.as_dict() for row in rows], indent=2))
    else:
        print(stats_table(rows, group_by))
    print(UNVERIFIED_NOTE, file=sys.stderr)
    return 0


def stats_table(rows: Sequence[StatsRow], group_by: Sequence[str]) -> str:
    """A fixed-width table of usage rows, one per group."""
    keys: list[tuple[str, int]] = []
    if "model" in group_by:
        keys.append(("MODEL", max([5, *(len(_model(r)) for r in rows)])))
    if "prompt" in group_by:
        keys.append(("PROMPT", max([6, *(len(r.prompt or "-") for r in rows)])))
    head = "  ".join(f"{name:{width}}" for name, width in keys)
    lines = [
        (
            f"{head}  {'CALLS':>6}  {'RUNS':>5}  {'IN TOK':>9}  {'OUT TOK':>9}  "
            f"{'COST USD':>10}  {'MEAN MS':>9}  {'P95 MS':>9}  {'TOOLS':>6}  {'TOOL ERR':>8}"
        )
    ]
    for r in rows:
        cells = [_model(r) if name == "MODEL" else (r.prompt or "-") for name, _ in keys]
        key = "  ".join(f"{cell:{width}}" for cell, (_, width) in zip(cells, keys, strict=True))
        cost = "-" if r.cost_usd is None else f"{r.cost_usd:.4f}"
        rate = "-" if r.tool_error_rate is None else f"{r.tool_error_rate:.1%}"
        lines.append(
            f"{key}  {r.model_calls:>6}  {r.runs:>5}  {r.input_tokens:>9}  {r.output_tokens:>9}  "
            f"{cost:>10}  {r.mean_latency_ms:>9.1f}  {r.p95_latency_ms:>9.1f}  "
            f"{r.tool_calls:>6}  {rate:>8}"
        )
    if not rows:
        lines.append("(no model calls)")
    return "\n".join(lines)


def _model(row: StatsRow) -> str:
    return f"{row.provider}:{row.model}"


def parse_prompt(text: str) -> tuple[str, str | None]:
    """``NAME=VERSION`` (or just ``NAME``: any version) as a (name, version) pair."""
    name, sep, version = text.partition("=")
    if not name.strip() or (sep and not version.strip()):
        raise CliError(f"--prompt: expected NAME=VERSION (or NAME), got {text!r}")
    return name.strip(), version.strip() if sep else None


def runs_from_read_model(args: argparse.Namespace, limit: int | None) -> int:
    """The `runs` listing served by the read model (used for --model and --prompt)."""
    prompt = parse_prompt(args.prompt) if args.prompt else None
    with open_ledger(args, read_only="auto") as ledger:
        since = parse_time("--since", args.since, ledger.clock)
        projector = ReadModelProjector(ledger)
        rows = _guarded_rows(
            lambda: projector.runs(
                status=args.status,
                agent=args.agent,
                model=args.model,
                prompt=prompt,
                tag=args.tag,
                since=since,
                limit=limit,
            )
        )
        infos = [_info(row, ledger) for row in rows]
    if args.json:
        listed = [
            row.as_dict()
            | {"model_latency_ms": info.model_latency_ms, "tool_latency_ms": info.tool_latency_ms}
            for row, info in zip(rows, infos, strict=True)
        ]
        print(json.dumps(listed, indent=2, ensure_ascii=False))
    else:
        print(runs_table(infos, terminal_width(sys.stdout)))
    print(UNVERIFIED_NOTE, file=sys.stderr)
    return 0


def runs_from_search(args: argparse.Namespace, limit: int | None) -> int:
    """`runs -q TEXT`: full-text search served by the read model, newest first, with snippets."""
    if args.model or args.prompt:
        raise CliError("-q cannot be combined with --model or --prompt")
    with open_ledger(args, read_only="auto") as ledger:
        since = parse_time("--since", args.since, ledger.clock)
        projector = ReadModelProjector(ledger)
        try:
            hits = projector.search(
                args.query,
                status=args.status,
                agent=args.agent,
                tag=args.tag,
                since=since,
                limit=None,
            )
        except ProjectionError as e:
            raise CliError(str(e)) from e
        shown = hits if limit is None else hits[:limit]
        infos = [_info(hit.run, ledger) for hit in shown]
    if args.json:
        listed = [
            hit.as_dict()
            | {"model_latency_ms": info.model_latency_ms, "tool_latency_ms": info.tool_latency_ms}
            for hit, info in zip(shown, infos, strict=True)
        ]
        print(json.dumps(listed, indent=2, ensure_ascii=False))
    else:
        width = terminal_width(sys.stdout)
        lines = runs_table(infos, width).splitlines()
        out = lines[:1]
        for line, hit in zip(lines[1:], shown, strict=False):
            out.append(line)
            out.append(_clip_line(f"    {hit.snippet}", width))
        if not shown:
            out.append("(no runs)")
        print("\n".join(out))
    if len(shown) < len(hits):
        print(
            f"showing {len(shown)} of {plural(len(hits), 'run')} (use --limit N or --all)",
            file=sys.stderr,
        )
    print(UNVERIFIED_NOTE, file=sys.stderr)
    return 0


def _clip_line(line: str, width: int | None) -> str:
    return line if width is None or len(line) <= width else line[: width - 1] + "\u2026"


def _guarded_rows(query: Callable[[], list[RunRow]]) -> list[RunRow]:
    try:
        return query()
    except ProjectionError as e:
        raise CliError(str(e)) from e


def _info(row: RunRow, ledger: Ledger) -> RunInfo:
    """The read model's row as the runs table shows it.

    The latency totals come from the ledger's runs index (the read model sums tokens and cost,
    not latency).
    """
    try:
        indexed: RunInfo | None = ledger.run(row.run_id)
    except UnknownRunError:
        indexed = None
    return RunInfo(
        run_id=row.run_id,
        agent=row.agent,
        status=row.status,
        started_at=row.started_at,
        ended_at=row.ended_at,
        event_count=row.event_count,
        head_hash=row.head_hash,
        input_preview=row.input_preview,
        tags=tuple(row.tags),
        parent_run_id=row.parent_run_id,
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        cost_usd=row.cost_usd,
        model_latency_ms=None if indexed is None else indexed.model_latency_ms,
        tool_latency_ms=None if indexed is None else indexed.tool_latency_ms,
    )
