"""Shared CLI plumbing: opening the ledger from --db, resolving run-id prefixes, errors."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from agentledger.ledger import EventLogger, Ledger, LedgerError, Limits

__all__ = ["CliError", "open_ledger", "resolve_run"]


class CliError(Exception):
    """A user-facing error: printed as ``agentledger: <message>``, exit status 2."""


def open_ledger(args: argparse.Namespace) -> Ledger:
    """Open the ledger named by --db / $AGENTLEDGER_DB (default ./agentledger.db).

    A command with ``--max-payload-bytes`` / ``--max-depth`` options opens it with those
    `Limits` (the defaults otherwise).
    """
    log = EventLogger(json=args.log_json) if args.verbose else None
    caps = {
        name: value
        for name in ("max_payload_bytes", "max_depth")
        if (value := getattr(args, name, None)) is not None
    }
    return Ledger.open(args.db, log=log, limits=Limits(**caps))


def resolve_run(ledger: Ledger, text: str) -> str:
    """Accept a full run id or a unique prefix of one."""
    ids = ledger.run_ids()
    if text in ids:
        return text
    matches = [rid for rid in ids if rid.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CliError(f"no run matches {text!r} in {ledger.url}")
    raise CliError(f"{text!r} matches {len(matches)} runs; give more of the id")


def fail(message: str) -> NoReturn:
    """Print an error and exit 2."""
    print(f"agentledger: {message}", file=sys.stderr)
    raise SystemExit(2)


def describe(error: LedgerError) -> str:
    """A one-line description of a ledger error."""
    return f"{type(error).__name__}: {error}"
