"""CLI commands over the ledger itself: runs, show, verify, export, import, annotate."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentledger.cli._common import CliError, describe, open_ledger, resolve_run
from agentledger.cli._format import runs_table, timeline
from agentledger.cli._projection_commands import runs_from_read_model
from agentledger.cli._trust_commands import (
    read_checkpoint_file,
    verifier_keys,
    verify_file_command,
)
from agentledger.ledger import ImportRefusedError, Ledger, Limits, VerifyReport, blob_refs_in
from agentledger.projections import ProjectionError, SnapshotReport, verify_snapshots

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this module's commands."""
    p = sub.add_parser("runs", help="list recorded runs, newest first")
    p.add_argument("--status", choices=["running", "completed", "failed"])
    p.add_argument("--agent")
    p.add_argument("--tag")
    p.add_argument("--since", help="RFC 3339 time or date, e.g. 2026-01-31")
    p.add_argument("--model", help="runs configured with or calling this model (read model)")
    p.add_argument(
        "--prompt", metavar="NAME[=VERSION]", help="runs using this prompt version (read model)"
    )
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("show", help="a run's timeline (or --json: full events, blobs resolved)")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("--json", action="store_true")
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
        help="with --file: accept events after the last one the checkpoint proves (a run that "
        "went on after it), listing them",
    )
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("export", help="write a run to one self-contained JSONL file")
    p.add_argument("run")
    p.add_argument("-o", "--output", required=True, help="file to write")
    p.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a signed checkpoint of this ledger: the file then carries it and an inclusion "
        "proof per event it covers, for `verify --file` offline",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="verify an export file and add its run")
    p.add_argument("file")
    p.add_argument(
        "--max-payload-bytes",
        type=int,
        metavar="N",
        help="largest payload or blob to accept, in bytes of canonical JSON "
        f"(default {Limits().max_payload_bytes})",
    )
    p.add_argument(
        "--max-depth",
        type=int,
        metavar="N",
        help=f"deepest nesting of a payload or blob to accept (default {Limits().max_depth})",
    )
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("annotate", help="append a human note to a run (never an edit)")
    p.add_argument("run")
    p.add_argument("--author", required=True)
    p.add_argument("--note", required=True)
    p.add_argument("--reason")
    p.add_argument("--position", type=int, help="the position the note is about")
    p.set_defaults(func=cmd_annotate)


def cmd_runs(args: argparse.Namespace) -> int:
    """List runs (from the SQL read model when filtering by model or prompt)."""
    if args.model or args.prompt:
        return runs_from_read_model(args)
    with open_ledger(args) as ledger:
        runs = ledger.runs(
            status=args.status, agent=args.agent, tag=args.tag, since=args.since, limit=args.limit
        )
        if args.json:
            print(json.dumps([vars(r) for r in runs], indent=2, default=list))
        else:
            print(runs_table(runs))
    return 0


def resolved_events(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """A run's events with every referenced blob resolved (conversations as message lists)."""
    records = ledger.events(run_id)
    out = []
    for record in records:
        item: dict[str, Any] = record.envelope()
        resolved: dict[str, Any] = {}
        payload = record.payload
        if record.kind == "ModelCalled":
            resolved["messages"] = ledger.conversation(payload["messages_ref"])
            if payload.get("response_ref"):
                resolved["response"] = ledger.blob(payload["response_ref"])["message"]
            if payload.get("tools_ref"):
                resolved["tools"] = ledger.blob(payload["tools_ref"])
        else:
            for ref in blob_refs_in(payload):
                resolved[ref] = ledger.blob(ref)
        if resolved:
            item["resolved"] = resolved
        out.append(item)
    info = ledger.run(run_id)
    return {"run": vars(info) | {"tags": list(info.tags)}, "events": out}


def cmd_show(args: argparse.Namespace) -> int:
    """Show a run."""
    with open_ledger(args) as ledger:
        run_id = resolve_run(ledger, args.run)
        if args.json:
            print(json.dumps(resolved_events(ledger, run_id), indent=2, ensure_ascii=False))
            return 0
        info = ledger.run(run_id)
        print(
            f"run {info.run_id}  agent={info.agent}  status={info.status}  "
            f"events={info.event_count}  started={info.started_at}"
        )
        print(timeline(ledger.events(run_id)))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify one run or all (or an export file offline)."""
    if args.file:
        return verify_file_command(args)
    if args.checkpoint and not args.vkey:
        raise CliError("verify --checkpoint needs --vkey: the verifier key that signs it")
    keys = verifier_keys(args.vkey)
    with open_ledger(args) as ledger:
        run_id = resolve_run(ledger, args.run) if args.run else None
        report = ledger.verify(run_id, checkpoint=args.checkpoint or None, verifier_keys=keys)
        snapshots = verify_snapshots_deeply(ledger, run_id) if args.deep else None
    for problem in report.problems:
        print(f"BROKEN {problem}")
    for log_problem in report.log_problems:
        print(f"BROKEN {log_problem}")
    broken = len(report.broken_runs)
    verdict = "intact" if report.ok else f"BROKEN ({broken} runs)" if broken else "BROKEN"
    print(
        f"{verdict}: {report.runs_checked} runs, {report.events_checked} events, "
        f"{report.blobs_checked} blobs checked"
    )
    print_checkpoint_summary(report)
    deep_ok = print_snapshot_report(snapshots) if snapshots is not None else True
    return 0 if report.ok and deep_ok else 1


def print_checkpoint_summary(report: VerifyReport) -> None:
    """One line on what the checkpoints covered (the largest one that holds)."""
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
        f"; {uncovered} later events are not covered by any checkpoint yet"
        if uncovered
        else "; every event is covered"
    )
    print(
        f"checkpoints intact: {len(held)} of {len(report.checkpoints)} hold; the latest, "
        f"{body.origin} at {body.size} events, is re-derived from the whole ledger's "
        f"events{tail}"
    )


def verify_snapshots_deeply(ledger: Ledger, run_id: str | None) -> SnapshotReport:
    """``verify --deep``: re-fold the events behind every stored world-state snapshot."""
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
        f"{verdict}: {report.snapshots_checked} snapshots re-folded from the events "
        f"({report.without_event_hash} written before snapshots carried an event hash)"
    )
    return report.ok


def cmd_export(args: argparse.Namespace) -> int:
    """Export a run."""
    note = read_checkpoint_file(args.checkpoint) if args.checkpoint else None
    with open_ledger(args) as ledger:
        run_id = resolve_run(ledger, args.run)
        lines = ledger.export_run(run_id, args.output, checkpoint=note)
    print(f"wrote {args.output}: run {run_id}, {lines} lines", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Import an export file (refused whole, naming its lines, if any line is wrong)."""
    with open_ledger(args) as ledger:
        try:
            run_id = ledger.import_file(args.file)
        except ImportRefusedError as e:
            if e.limit is None:
                raise
            option = "--" + e.limit.replace("_", "-")
            raise CliError(f"{describe(e)} (to accept it, raise the limit: {option} N)") from e
    print(run_id)
    return 0


def cmd_annotate(args: argparse.Namespace) -> int:
    """Annotate a run."""
    with open_ledger(args) as ledger:
        run_id = resolve_run(ledger, args.run)
        record = ledger.annotate(
            run_id,
            author=args.author,
            note=args.note,
            reason=args.reason,
            about_position=args.position,
        )
    print(f"annotated run {run_id} at position {record.position}")
    return 0
