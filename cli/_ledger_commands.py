"""CLI commands over the ledger itself: runs, show, verify, export, import, annotate."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentledger.cli import _otel_command
from agentledger.cli._common import (
    CliError,
    describe,
    open_ledger,
    parse_time,
    plural,
    resolve_run,
    whole_number,
)
from agentledger.cli._format import conversations, lineage, runs_table, terminal_width, timeline
from agentledger.ledger import (
    ExportRefusedError,
    ImportRefusedError,
    Ledger,
    LedgerError,
    Limits,
    RecordedEvent,
    RunQuery,
    UnknownBlobError,
)

if TYPE_CHECKING:
    from agentledger.cli._report_html import Seen
    from agentledger.ledger import VerifyReport
    from agentledger.projections import SnapshotReport

# The read model, the report renderer, the trust commands and the verifier are imported by the
# commands that use them, so `runs`, `show` and `verify` start without SQLAlchemy, the signing
# library or the report's assets, and `runs` and `show` without the verifier.

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this module's commands."""
    p = sub.add_parser("runs", help="list recorded runs, newest first")
    p.add_argument("--status", choices=["running", "completed", "failed"])
    p.add_argument("--agent")
    p.add_argument("--tag")
    p.add_argument(
        "--since", help="runs started at or after: 2026-01-31, 2026-01-31T09:00+01:00, 2h, 3d"
    )
    p.add_argument("--model", help="runs configured with or calling this model (read model)")
    p.add_argument(
        "--prompt",
        metavar="NAME[=VERSION]",
        help="runs using this prompt version; NAME is a role (planner) or a prompt name "
        "(pipeline.planner) (read model)",
    )
    p.add_argument(
        "-q",
        "--query",
        metavar="TEXT",
        help="runs with an input, answer or model message holding every word of TEXT, with a "
        "snippet (full-text search; read model)",
    )
    p.add_argument(
        "-n",
        "--limit",
        type=whole_number,
        default=50,
        help="most runs to list (default 50; -n 1: the newest)",
    )
    p.add_argument("--all", action="store_true", help="list every run (no --limit)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("show", help="a run's timeline (or --json: full events, blobs resolved)")
    p.add_argument("run", help="run id, a unique prefix, or 'last' (the newest run)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true")
    shown.add_argument(
        "--conversation",
        action="store_true",
        help="each model call's messages (role: content, wrapped; each message once) and response",
    )
    shown.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print the timeline, then each new event as it is recorded, until the run ends "
        "(Ctrl-C stops)",
    )
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("verify", help="recompute hash chains and blobs; exit 1 if broken")
    p.add_argument("run", nargs="?", help="one run (default: every run)")
    p.add_argument(
        "--deep",
        action="store_true",
        help="also re-fold the events behind every world-state snapshot and compare",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="FILE|DIR",
        help="a signed checkpoint, or a directory of published ones: the ledger must hold "
        "exactly the history each one signed (repeatable)",
    )
    p.add_argument(
        "--vkey",
        action="append",
        default=[],
        metavar="KEY|FILE",
        help="the verifier key that signs the checkpoints (NAME.vkey or its text; repeatable)",
    )
    p.add_argument(
        "--file",
        metavar="EXPORT",
        help="check an export file offline instead of a database (with the checkpoint and "
        "inclusion proofs it carries, against --vkey)",
    )
    p.add_argument(
        "--allow-uncovered",
        action="store_true",
        help="with --file, or a RUN and --checkpoint: accept events after the last one the "
        "checkpoint proves (a run that went on after it, or began after it), listing them",
    )
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "export",
        help="write a run to one self-contained JSONL file, or runs as OpenTelemetry traces",
    )
    p.add_argument(
        "run", nargs="?", help="run id or unique prefix (otlp formats: or --all/--since)"
    )
    p.add_argument("-o", "--output", help="file to write (- for stdout): jsonl and otlp-json")
    p.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a signed checkpoint of this ledger: the file then carries it and an inclusion "
        "proof per event it covers, for `verify --file` offline",
    )
    p.add_argument("--json", action="store_true", help="report path, run and lines as JSON")
    _otel_command.add_arguments(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="verify export files and add their runs")
    p.add_argument(
        "file",
        nargs="+",
        help="export file, or a directory of them (*.jsonl); - reads one from stdin",
    )
    p.add_argument("--json", action="store_true", help="print the run id as JSON")
    p.add_argument(
        "--max-payload-bytes",
        type=whole_number,
        metavar="N",
        help="largest payload or blob to accept, in bytes of canonical JSON "
        f"(default {Limits().max_payload_bytes})",
    )
    p.add_argument(
        "--max-depth",
        type=whole_number,
        metavar="N",
        help=f"deepest nesting of a payload or blob to accept (default {Limits().max_depth})",
    )
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("annotate", help="append a human note to a run (never an edit)")
    p.add_argument("run")
    p.add_argument("--author", required=True)
    p.add_argument("--note", required=True)
    p.add_argument("--reason")
    p.add_argument("--position", type=whole_number, help="the position the note is about")
    p.add_argument("--json", action="store_true", help="print the recorded note as JSON")
    p.set_defaults(func=cmd_annotate)


def cmd_runs(args: argparse.Namespace) -> int:
    """List runs (from the SQL read model when filtering by model or prompt)."""
    if args.limit < 1:
        raise CliError(f"--limit must be at least 1, got {args.limit} (for every run: --all)")
    limit = None if args.all else args.limit
    if args.query is not None:
        from agentledger.cli._projection_commands import runs_from_search

        return runs_from_search(args, limit)
    if args.model or args.prompt:
        from agentledger.cli._projection_commands import runs_from_read_model

        return runs_from_read_model(args, limit)
    with open_ledger(args, read_only=True) as ledger:
        since = parse_time("--since", args.since, ledger.clock)
        query = RunQuery(
            status=args.status, agent=args.agent, tag=args.tag, since=since, limit=limit
        )
        runs = ledger.runs(query)
        total = len(runs) if limit is None or len(runs) < limit else ledger.count_runs(query)
    if args.json:
        print(json.dumps([vars(r) for r in runs], indent=2, default=list))
    else:
        print(runs_table(runs, terminal_width(sys.stdout)))
    note_truncated(len(runs), total)
    return 0


def note_truncated(shown: int, total: int) -> None:
    """Say on stderr when a listing stopped at --limit."""
    if shown < total:
        print(
            f"showing {shown} of {plural(total, 'run')} (use --limit N or --all)", file=sys.stderr
        )


def resolved_events(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """A run's events with every referenced blob resolved (conversations as message lists)."""
    from agentledger.ledger import blob_refs_in

    records = ledger.events(run_id)
    calls = [r.payload for r in records if r.kind == "ModelCalled"]
    heads = [p[k] for p in calls for k in ("messages_ref", "response_ref") if p.get(k)]
    chains = ledger.conversations(heads)  # every call's chain in a few queries
    others = [ref for r in records if r.kind != "ModelCalled" for ref in blob_refs_in(r.payload)]
    values = ledger.blobs([p["tools_ref"] for p in calls if p.get("tools_ref")] + others)
    out = []
    for record in records:
        item: dict[str, Any] = record.envelope()
        resolved: dict[str, Any] = {}
        payload = record.payload
        if record.kind == "ModelCalled":
            resolved["messages"] = chains[payload["messages_ref"]]
            if payload.get("response_ref"):
                resolved["response"] = chains[payload["response_ref"]][-1]
            if payload.get("tools_ref"):
                resolved["tools"] = _stored(values, payload["tools_ref"])
        else:
            for ref in blob_refs_in(payload):
                resolved[ref] = _stored(values, ref)
        if resolved:
            item["resolved"] = resolved
        out.append(item)
    info = ledger.run(run_id)
    return {"run": vars(info) | {"tags": list(info.tags)}, "events": out}


def _stored(values: dict[str, Any], ref: str) -> Any:
    if ref not in values:
        raise UnknownBlobError(ref)
    return values[ref]


def model_calls(ledger: Ledger, run_id: str) -> list[tuple[RecordedEvent, dict[str, Any]]]:
    """A run's model calls, each with its new messages, where the earlier ones are, response."""
    from agentledger.cli._report import new_messages, read_ahead
    from agentledger.cli._report_html import Seen

    seen: dict[str, Seen] = {}
    calls = []
    records = [r for r in ledger.events(run_id) if r.kind == "ModelCalled"]
    read = read_ahead(ledger, records)  # every chain in a few queries, not node by node
    for record in records:
        payload = record.payload
        found = new_messages(ledger, payload["messages_ref"], record.position, seen, read)
        if payload.get("response_ref"):
            ref = payload["response_ref"]
            node = read[ref] if ref in read else ledger.blob(ref)
            found["response"] = node.get("message", node) if isinstance(node, dict) else node
            total = len(found["messages"]) + (found["earlier"].count if "earlier" in found else 0)
            seen.setdefault(payload["response_ref"], Seen(record.position, total + 1, True))
        calls.append((record, found))
    return calls


FOLLOW_INTERVAL_S = 0.5
"""How often ``show --follow`` looks for new events."""


def cmd_show(args: argparse.Namespace) -> int:
    """Show a run."""
    if args.follow:
        # Not read-only: a read-only SQLite file may be read as immutable, never seeing new rows.
        with open_ledger(args, read_only="auto") as ledger:
            return follow(ledger, resolve_run(ledger, args.run))
    with open_ledger(args, read_only=True) as ledger:
        run_id = resolve_run(ledger, args.run)
        if args.conversation:
            width = min(shutil.get_terminal_size((100, 24)).columns, 120)
            print(f"run {run_id}")
            print(conversations(model_calls(ledger, run_id), width=width))
            return 0
        if args.json:
            print(json.dumps(resolved_events(ledger, run_id), indent=2, ensure_ascii=False))
            return 0
        info = ledger.run(run_id)
        events = ledger.events(run_id)
        print(
            f"run {info.run_id}  agent={info.agent}  status={info.status}  "
            f"events={info.event_count}  started={info.started_at}{lineage(events[0].payload)}"
        )
        print(timeline(events, terminal_width(sys.stdout)))
    return 0


def follow(ledger: Ledger, run_id: str, interval: float = FOLLOW_INTERVAL_S) -> int:
    """Print a run's timeline and then its new events as they come, until it ends."""
    info = ledger.run(run_id)
    print(f"run {info.run_id}  agent={info.agent}  following (Ctrl-C stops)", flush=True)
    last = 0
    while True:
        new = ledger.events(run_id, after=last)
        if new:
            print(timeline(new, terminal_width(sys.stdout)), flush=True)
            last = new[-1].position
            end = next((e for e in new if e.kind in ("RunCompleted", "RunFailed")), None)
            if end is not None:
                print(f"run {end.kind.removeprefix('Run').lower()} at position {end.position}")
                return 0
        time.sleep(interval)


def _export_progress(written: int, total: int) -> None:
    """``export: 12,000/48,211 lines`` on a terminal, rewritten in place."""
    print(f"\rexport: {written:,}/{total:,} lines", end="", file=sys.stderr, flush=True)


def _import_progress(stage: str, done: int, total: int) -> None:
    """``import: checked 12,000/175,004 lines``, then ``import: wrote 1,000/100,002 events``."""
    text = (
        f"checked {done:,}/{total:,} lines"
        if stage == "checked"
        else (f"wrote {done:,}/{total:,} events")
    )
    print(f"\r\033[Kimport: {text}", end="", file=sys.stderr, flush=True)


def _verify_progress(read: int, total: int) -> None:
    """``verify: 120,000/480,000 events`` on a terminal, rewritten in place."""
    print(f"\rverify: {read:,}/{total:,} events", end="", file=sys.stderr, flush=True)


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify one run or all (or an export file offline)."""
    if args.file:
        from agentledger.cli._trust_commands import verify_file_command

        return verify_file_command(args)
    if args.checkpoint and not args.vkey:
        raise CliError("verify --checkpoint needs --vkey: the verifier key that signs it")
    keys: list[str] = []
    if args.vkey:
        from agentledger.cli._trust_commands import verifier_keys

        keys = verifier_keys(args.vkey)
    shown = sys.stderr.isatty() and not args.json
    with open_ledger(args, read_only=True) as ledger:
        run_id = resolve_run(ledger, args.run) if args.run else None
        report = ledger.verify(
            run_id,
            checkpoint=args.checkpoint or None,
            verifier_keys=keys,
            progress=_verify_progress if shown else None,
            allow_uncovered=args.allow_uncovered,
        )
        if shown:
            print("\r\033[K", end="", file=sys.stderr)
        snapshots = verify_snapshots_deeply(ledger, run_id) if args.deep else None
    deep_ok = snapshots is None or snapshots.ok
    if args.json:
        print(json.dumps(verify_json(report, snapshots), indent=2, ensure_ascii=False))
        return 0 if report.ok and deep_ok else 1
    for problem in report.problems:
        print(f"BROKEN {problem}")
    for log_problem in report.log_problems:
        print(f"BROKEN {log_problem}")
    broken = len(report.broken_runs)
    verdict = "intact" if report.ok else f"BROKEN ({plural(broken, 'run')})" if broken else "BROKEN"
    erased = f" ({report.blobs_erased} erased)" if report.blobs_erased else ""
    if report.blobs_erased_unrecorded:
        erased = (
            f" ({report.blobs_erased} erased, {report.blobs_erased_unrecorded} of them under "
            "keys no recorded erasure names: imported from another ledger, or deleted by hand)"
        )
    print(
        f"{verdict}: {plural(report.runs_checked, 'run')}, "
        f"{plural(report.events_checked, 'event')}, {plural(report.blobs_checked, 'blob')} "
        f"checked{erased}"
    )
    print_checkpoint_summary(report, run_id)
    if not args.checkpoint:
        print(
            "not checked against a signed checkpoint: hashes recomputed from content show "
            "edits, not a history rewritten with every hash recomputed, a run deleted whole or "
            "a run cut before its end (verify --checkpoint DIR --vkey KEY checks those)"
        )
    deep_ok = print_snapshot_report(snapshots) if snapshots is not None else True
    return 0 if report.ok and deep_ok else 1


def verify_json(report: VerifyReport, snapshots: SnapshotReport | None) -> dict[str, Any]:
    """`verify --json`: the verdict, counts, problems and each checkpoint's findings."""
    out: dict[str, Any] = {
        "ok": report.ok and (snapshots is None or snapshots.ok),
        "runs_checked": report.runs_checked,
        "events_checked": report.events_checked,
        "blobs_checked": report.blobs_checked,
        "blobs_erased": report.blobs_erased,
        "blobs_erased_unrecorded": report.blobs_erased_unrecorded,
        "broken_runs": report.broken_runs,
        "problems": [str(p) for p in report.problems],
        "log_problems": [str(p) for p in report.log_problems],
        "checkpoints": [
            {
                "origin": c.checkpoint.origin,
                "size": c.checkpoint.size,
                "ok": c.ok,
                "events": c.events,
                "not_covered": c.not_covered,
                "run_not_covered": c.run_not_covered,
                "problems": [str(p) for p in c.problems],
            }
            for c in report.checkpoints
        ],
    }
    if snapshots is not None:
        out["snapshots"] = {
            "ok": snapshots.ok,
            "checked": snapshots.snapshots_checked,
            "without_event_hash": snapshots.without_event_hash,
            "problems": [str(p) for p in snapshots.problems],
        }
    return out


def print_checkpoint_summary(report: VerifyReport, run_id: str | None = None) -> None:
    """One line on what the checkpoints covered (the largest one that holds), and `run_id`."""
    if not report.checkpoints:
        return
    held = [c for c in report.checkpoints if c.ok]
    if not held:
        print(f"checkpoints: none of {len(report.checkpoints)} holds")
        return
    top = max(held, key=lambda c: c.checkpoint.size)
    body = top.checkpoint
    uncovered = top.not_covered
    tail = (
        f"; {plural(uncovered, 'later event')} not covered by any checkpoint yet"
        if uncovered
        else "; every event is covered"
    )
    for late_run, late in top.run_not_covered.items():
        span = f"{late[0]}" if len(late) == 1 else f"{late[0]}..{late[-1]}"
        tail += f", positions {span} of run {late_run} among them"
    if run_id is not None and run_id not in top.run_not_covered:
        tail += f"; every event of run {run_id} is covered"
    print(
        f"checkpoints intact: {len(held)} of {len(report.checkpoints)} hold; the latest, "
        f"{body.origin} at {plural(body.size, 'event')}, is re-derived from the whole ledger's "
        f"events{tail}"
    )


def verify_snapshots_deeply(ledger: Ledger, run_id: str | None) -> SnapshotReport:
    """``verify --deep``: re-fold the events behind every stored world-state snapshot."""
    from agentledger.projections import ProjectionError, verify_snapshots

    try:
        return verify_snapshots(ledger, run_id)
    except ProjectionError as e:
        raise CliError(f"verify --deep: {type(e).__name__}: {e}") from e


def print_snapshot_report(report: SnapshotReport) -> bool:
    """Print each wrong snapshot and a verdict line; True when every snapshot holds."""
    for problem in report.problems:
        print(f"BROKEN {problem}")
    verdict = "snapshots intact" if report.ok else f"snapshots BROKEN ({len(report.problems)})"
    print(
        f"{verdict}: {plural(report.snapshots_checked, 'snapshot')} re-folded from the events "
        f"({report.without_event_hash} written before snapshots carried an event hash)"
    )
    return report.ok


def cmd_export(args: argparse.Namespace) -> int:
    """Export a run (or, in an OpenTelemetry format, runs)."""
    if args.format != "jsonl":
        return _otel_command.cmd_export_otel(args)
    _otel_command.refuse_otel_options(args)
    if args.run is None:
        if args.all or args.since or args.tag:
            return _export_many(args)
        raise CliError("export needs RUN (or --all, --since TIME, --tag T with -o DIR)")
    _otel_command.check_selection(args)
    if args.output is None:
        raise CliError("export needs -o FILE (or -o - for stdout)")
    note = None
    if args.checkpoint:
        from agentledger.cli._trust_commands import read_checkpoint_file

        note = read_checkpoint_file(args.checkpoint)
    to_stdout = args.output == "-"
    if to_stdout and args.json:
        raise CliError("export --json reports on stdout: give -o FILE, not -o -")
    if not to_stdout:
        directory = Path(args.output).parent
        if not directory.is_dir():
            raise CliError(
                f"cannot write {args.output}: directory {str(directory)!r} does not exist"
            )
    with open_ledger(args, read_only=True) as ledger, tempfile.TemporaryDirectory() as scratch:
        run_id = resolve_run(ledger, args.run)
        target = Path(scratch, "export.jsonl") if to_stdout else Path(args.output)
        shown = sys.stderr.isatty() and not args.json
        lines = ledger.export_run(
            run_id, target, checkpoint=note, progress=_export_progress if shown else None
        )
        if shown:
            print("\r\033[K", end="", file=sys.stderr)
        if to_stdout:
            with target.open("rb") as exported:
                sys.stdout.flush()
                shutil.copyfileobj(exported, sys.stdout.buffer)
            sys.stdout.buffer.flush()
    path = "-" if to_stdout else args.output
    if args.json:
        print(json.dumps({"path": path, "run_id": run_id, "lines": lines}))
    else:
        where = "stdout" if to_stdout else path
        print(f"wrote {where}: run {run_id}, {plural(lines, 'line')}", file=sys.stderr)
    return 0


def _export_many(args: argparse.Namespace) -> int:
    """``export --all|--since|--tag -o DIR``: one export file per run, ``DIR/RUN_ID.jsonl``."""
    _otel_command.check_selection(args)
    if args.checkpoint:
        raise CliError("--checkpoint proves one run's events: export that RUN with it")
    if not args.output or args.output == "-":
        raise CliError("exporting several runs writes one file per run: give -o DIR")
    directory = Path(args.output)
    if directory.exists() and not directory.is_dir():
        raise CliError(f"-o {args.output}: not a directory (several runs need one, -o DIR)")
    if not directory.exists() and directory.suffix == ".jsonl":
        raise CliError(
            f"-o {args.output}: several runs are written one file per run into a directory; "
            "give -o DIR (a name without .jsonl)"
        )
    if not directory.parent.is_dir():
        raise CliError(f"cannot write {args.output}: {str(directory.parent)!r} does not exist")
    with open_ledger(args, read_only=True) as ledger:
        run_ids = _otel_command.selected_runs(ledger, args)
        if not run_ids:
            what = _otel_command.describe_selection(args)
            print(f"nothing to export: {what} in {ledger.url}", file=sys.stderr)
            return 0
        taken = [r for r in run_ids if (directory / f"{r}.jsonl").exists()]
        if taken:
            raise CliError(
                f"{directory / (taken[0] + '.jsonl')} exists: export into an empty directory "
                "(files are never overwritten)"
            )
        directory.mkdir(exist_ok=True)
        written, refused = _export_each(ledger, run_ids, directory)
    if args.json:
        print(json.dumps(written, indent=2))
    else:
        print(f"wrote {plural(len(written), 'run')} to {directory}/", file=sys.stderr)
    for run_id, reason in refused:
        print(f"not exported {run_id}: {reason}", file=sys.stderr)
    return 1 if refused else 0


def _export_each(
    ledger: Ledger, run_ids: list[str], directory: Path
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Write ``DIR/RUN_ID.jsonl`` for each run; a run export refuses (broken) is set aside."""
    written: list[dict[str, Any]] = []
    refused: list[tuple[str, str]] = []
    for index, run_id in enumerate(run_ids, 1):
        try:
            lines = ledger.export_run(run_id, directory / f"{run_id}.jsonl")
        except ExportRefusedError as e:  # a broken run: the others go on
            refused.append((run_id, e.reason))
            continue
        written.append(
            {"path": str(directory / f"{run_id}.jsonl"), "run_id": run_id, "lines": lines}
        )
        if sys.stderr.isatty():
            print(f"\rexported {index}/{len(run_ids)}", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return written, refused


def _import_sources(paths: list[str]) -> list[str]:
    """The files ``import`` reads: each FILE, each DIR's ``*.jsonl`` by name, or ``-`` alone."""
    if "-" in paths and len(paths) > 1:
        raise CliError("import - reads one export from stdin: give it alone")
    found: list[str] = []
    for path in paths:
        if path != "-" and Path(path).is_dir():
            inside = sorted(str(p) for p in Path(path).glob("*.jsonl"))
            if not inside:
                raise CliError(f"{path}: a directory with no *.jsonl export files")
            found += inside
        else:
            found.append(path)
    return found


def cmd_import(args: argparse.Namespace) -> int:
    """Import export files, each refused whole (naming its lines) if any line is wrong.

    Several files (or a directory's ``*.jsonl``) are imported one by one: a refused file is
    reported and the others go on; the exit status is then 1.
    """
    sources = _import_sources(args.file)
    imported: list[str] = []
    refused: list[tuple[str, str]] = []
    shown = sys.stderr.isatty() and not args.json
    with open_ledger(args) as ledger, tempfile.TemporaryDirectory() as scratch:
        for name in sources:
            try:
                imported.append(_import_one(ledger, name, Path(scratch), shown=shown))
            except (CliError, LedgerError) as e:
                if len(sources) == 1:
                    raise
                refused.append(
                    (name, f"{type(e).__name__}: {e}" if isinstance(e, LedgerError) else str(e))
                )
    if args.json:
        out: Any = (
            {"run_id": imported[0]}
            if len(sources) == 1
            else {
                "imported": imported,
                "refused": [{"file": f, "reason": why} for f, why in refused],
            }
        )
        print(json.dumps(out))
    else:
        for run_id in imported:
            print(run_id)
        for name, why in refused:
            print(f"agentledger: not imported {name}: {why}", file=sys.stderr)
    return 1 if refused else 0


def _import_one(ledger: Ledger, name: str, scratch: Path, *, shown: bool = False) -> str:
    """Import one export file (``-``: stdin); the run's id. `shown`: a progress line on stderr."""
    source = Path(name)
    if name == "-":
        source = scratch / "stdin.jsonl"
        with source.open("wb") as copy:
            shutil.copyfileobj(sys.stdin.buffer, copy)
    try:
        run_id = ledger.import_file(source, progress=_import_progress if shown else None)
    except ImportRefusedError as e:
        if e.limit is None:
            raise
        option = "--" + e.limit.replace("_", "-")
        raise CliError(f"{describe(e)} (to accept it, raise the limit: {option} N)") from e
    finally:
        if shown:
            print("\r\033[K", end="", file=sys.stderr)
    if _carries_checkpoint(source):
        shown_name = "FILE" if name == "-" else name
        print(
            f"agentledger: {name} carries a signed checkpoint and inclusion proofs, which import "
            f"does not check (it holds no keys): `agentledger verify --file {shown_name} --vkey "
            "KEY` checks that the run is the one the checkpoint's signer logged",
            file=sys.stderr,
        )
    return run_id


_HEADER_BYTES = 1 << 16


def _carries_checkpoint(path: Path) -> bool:
    """Whether an export's header line announces proofs (an export made with ``--checkpoint``)."""
    try:
        with path.open("rb") as file:
            header = json.loads(file.readline(_HEADER_BYTES))
    except (OSError, ValueError):
        return False
    proofs = header.get("proofs") if isinstance(header, dict) else None
    return type(proofs) is int and proofs > 0


def cmd_annotate(args: argparse.Namespace) -> int:
    """Annotate a run; an empty author or note, or a position the run lacks, writes nothing."""
    for option, value, wanted in (
        ("--author", args.author, "who writes the note"),
        ("--note", args.note, "the note's text"),
    ):
        if not value.strip():
            raise CliError(f"{option} is empty: give {wanted}")
    with open_ledger(args, create=False) as ledger:
        run_id = resolve_run(ledger, args.run)
        if args.position is not None:
            last = ledger.last_event(run_id).position
            if not 1 <= args.position <= last:
                raise CliError(
                    f"--position {args.position} is not an event of run {run_id}: "
                    f"give 1 to {last} (its last event)"
                )
        record = ledger.annotate(
            run_id,
            author=args.author,
            note=args.note,
            reason=args.reason,
            about_position=args.position,
        )
    if args.json:
        print(json.dumps(record.envelope(), indent=2, ensure_ascii=False))
    else:
        print(f"annotated run {run_id} at position {record.position}")
    return 0
