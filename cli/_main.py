"""The `agentledger` command: the composition root. Parses arguments and dispatches."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from urllib.parse import quote

from agentledger.cli import (
    _demo,
    _diff_command,
    _ledger_commands,
    _projection_commands,
    _replay_commands,
    _report,
    _run_command,
    _state_command,
    _trust_commands,
)
from agentledger.cli._common import CliError
from agentledger.ledger import LedgerError

__all__ = ["build_parser", "main"]

ENV_DB = "AGENTLEDGER_DB"

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]
COMMAND_MODULES: tuple[Registrar, ...] = (
    _ledger_commands.register,
    _demo.register,
    _replay_commands.register,
    _run_command.register,
    _state_command.register,
    _projection_commands.register,
    _diff_command.register,
    _trust_commands.register,
    _report.register,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command registered."""
    parser = argparse.ArgumentParser(
        prog="agentledger",
        description="An event-sourced, auditable ledger for multi-agent LLM runs.",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="ledger URL: sqlite:///file.db, postgresql://user@host/db, memory://, or a bare "
        "path (ledger.db, ./x.db) meaning that SQLite file "
        "(default: $AGENTLEDGER_DB, else sqlite:///agentledger.db)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each appended event")
    parser.add_argument("--log-json", action="store_true", help="with -v: log lines as JSON")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMAND_MODULES:
        register(sub)
    return parser


def _version() -> str:
    try:
        return version("agentledger")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def ledger_url(db: str | None) -> str | None:
    """--db (or $AGENTLEDGER_DB) as a URL: a bare path is a SQLite file; "" is refused."""
    if db is None:
        return None
    if not db.strip():
        raise CliError("--db is empty: give a ledger URL or a SQLite file path")
    if "://" in db:
        return db
    return "sqlite:///" + quote(db, safe="/")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        args.db = ledger_url(args.db if args.db is not None else os.environ.get(ENV_DB) or None)
        status: int = args.func(args)
    except CliError as e:
        print(f"agentledger: {e}", file=sys.stderr)
        return 2
    except LedgerError as e:
        print(f"agentledger: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("agentledger: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
        return 0
    return status
