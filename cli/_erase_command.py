"""``agentledger erase``: erase a data subject by destroying their key (crypto-shredding).

``agentledger erase --subject S --reason R --requested-by WHO`` lists what it will erase (the
subject's runs), asks for the subject to be typed again on a terminal (``-y`` skips that; off a
terminal ``-y`` is required), destroys the key, records the ErasureRecorded fact, drops the
runs' snapshots, rebuilds the read models and search index where the ledger keeps them, and
scrubs the database files (``--no-vacuum`` skips SQLite's VACUUM of the whole file).
``--dry-run`` only lists. ``--json`` prints the result as JSON. Must not write events itself.
"""

from __future__ import annotations

import argparse
import json
import sys

from agentledger.cli._common import CliError, open_ledger, plural
from agentledger.ledger import Ledger, UnknownSubjectError

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this module's command."""
    p = sub.add_parser(
        "erase",
        help="erase a data subject: destroy their key, so their content reads [erased]",
        description=(
            "Destroy a data subject's key: every blob sealed for them (input, messages, "
            "responses, tool arguments and results, deltas, answers) then reads as [erased], "
            "while verify still passes. Records who asked and why. Cannot be undone."
        ),
    )
    p.add_argument("--subject", required=True, help="the data subject's id, as recorded")
    p.add_argument("--reason", required=True, help="why (recorded, e.g. 'GDPR art. 17 request')")
    p.add_argument(
        "--requested-by", required=True, help="who asked for it (recorded: a name or an address)"
    )
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be erased; change nothing"
    )
    p.add_argument(
        "--no-vacuum",
        action="store_true",
        help="skip the VACUUM that rewrites a SQLite file without its free pages (run it later)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_erase)


def _check(args: argparse.Namespace) -> None:
    for option, value in (
        ("--subject", args.subject),
        ("--reason", args.reason),
        ("--requested-by", args.requested_by),
    ):
        if not value.strip():
            raise CliError(f"{option} must not be empty")


def _confirm(subject: str, runs: list[str]) -> None:
    if not sys.stdin.isatty():
        raise CliError("erase asks for confirmation on a terminal: pass -y to erase without it")
    print(
        f"This destroys the key of data subject {subject!r}: the content of "
        f"{plural(len(runs), 'run')} becomes [erased] for good.",
        file=sys.stderr,
    )
    typed = input("Type the subject again to confirm: ")
    if typed != subject:
        raise CliError("not confirmed: nothing was erased")


def cmd_erase(args: argparse.Namespace) -> int:
    """Erase a data subject."""
    _check(args)
    with open_ledger(args, create=False, read_only=args.dry_run) as ledger:
        runs = ledger.subject_runs(args.subject)
        if not runs and args.dry_run:
            _no_key(ledger, args.subject)
        if args.dry_run:
            if args.json:
                print(json.dumps({"subject_runs": runs, "dry_run": True}, indent=2))
            else:
                print(f"would erase data subject {args.subject!r}: {plural(len(runs), 'run')}")
                for run_id in runs:
                    print(f"  {run_id}")
            return 0
        if not args.yes:
            _confirm(args.subject, runs)
        result = ledger.erase_subject(
            args.subject, reason=args.reason, requested_by=args.requested_by, vacuum=False
        )
        from agentledger.projections import forget_erased

        rebuilt = forget_erased(ledger, result.runs)
        ledger.scrub_files(vacuum=not args.no_vacuum, tables=rebuilt.tables)
    if args.json:
        out = result.as_dict() | {
            "snapshots_deleted": rebuilt.snapshots_deleted,
            "read_models_rebuilt": rebuilt.read_model_events is not None,
            "vacuumed": not args.no_vacuum,
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    print(
        f"erased data subject {args.subject!r}: {plural(len(result.runs), 'run')}, "
        f"{plural(result.blobs, 'blob')} now [erased]"
    )
    print(f"recorded ErasureRecorded at position {result.position} of the erasure stream")
    if rebuilt.snapshots_deleted:
        print(f"deleted {plural(rebuilt.snapshots_deleted, 'snapshot')} of those runs")
    if rebuilt.read_model_events is not None:
        print("rebuilt the read models and the search index")
    if args.no_vacuum:
        print("not vacuumed: free pages of a SQLite file may hold the key until VACUUM")
    return 0


def _no_key(ledger: Ledger, subject: str) -> None:
    """Refuse a subject with no key, as an erasure would (nothing is written)."""
    del ledger
    raise UnknownSubjectError(subject)
