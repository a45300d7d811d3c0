"""The `agentledger` command: the composition root. Parses arguments and dispatches."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from agentledger.cli._common import CliError, database_error
from agentledger.ledger.errors import LedgerError

__all__ = ["COMMANDS", "build_parser", "main"]

ENV_DB = "AGENTLEDGER_DB"

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

COMMANDS: dict[str, tuple[str, ...]] = {
    "_ledger_commands": ("runs", "show", "verify", "export", "import", "annotate"),
    "_demo": ("demo",),
    "_replay_commands": ("replay", "rerun", "resume", "fork"),
    "_run_command": ("run",),
    "_state_command": ("state",),
    "_projection_commands": ("projections", "stats"),
    "_diff_command": ("diff",),
    "_trust_commands": ("keys", "checkpoint", "prove"),
    "_erase_command": ("erase",),
    "_report": ("report",),
    "_completion": ("completion",),
}
"""Each command module and the commands it registers, in help order. A command's module is
imported only when that command runs (so `runs` never loads the agents, the SDKs or the report
renderer); `--help` and a command this table does not know import them all."""


def _registrar(module: str) -> Registrar:
    loaded = importlib.import_module(f"agentledger.cli.{module}")
    register: Registrar = loaded.register
    return register


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word in ``argv`` (skipping the global options), or None."""
    args = iter(argv)
    for arg in args:
        if arg == "--db":
            next(args, None)
        elif not arg.startswith("-"):
            return arg
        elif arg == "--":
            return next(args, None)
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: every command, or only ``command``'s module when it is known."""
    modules = [m for m, names in COMMANDS.items() if command in names] or list(COMMANDS)
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
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each appended event")
    parser.add_argument("--log-json", action="store_true", help="with -v: log lines as JSON")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in modules:
        _registrar(module)(sub)
    return parser


class _VersionAction(argparse.Action):
    """``--version``: looks the installed version up only when asked (it costs an import)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        del args, kwargs
        print(f"{parser.prog} {_version()}")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

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
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_command_of(words)).parse_args(words)
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
    except Exception as e:
        message = database_error(e, getattr(args, "ledger_url", None) or "the ledger")
        if message is None:
            raise
        print(f"agentledger: {message}", file=sys.stderr)
        return 2
    return status
