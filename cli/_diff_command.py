"""`agentledger diff`: a causal diff of two runs, or a cohort diff of two selections of runs.

``agentledger diff A B`` prints the diff of run B against run A (ids or unique prefixes) and
exits like diff(1): 0 when the runs do not differ (timing, ids and lineage aside), 1 when they
do, 2 on an error. ``agentledger diff --cohort --a-tag v1 --b-tag v2`` (or ``--a-prompt
planner=v1 --b-prompt planner=v2``...; ``--status S`` keeps the runs with that status on both
sides, ``--a-status``/``--b-status`` on one) pairs the runs of two selections by input and
reports per-input outcome changes and aggregate deltas (exit 1 when any pair differs or an
input is unpaired). Must not compute diffs itself: it parses, selects and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

from agentledger.cli._common import CliError, open_ledger, resolve_run
from agentledger.ledger import Ledger
from agentledger.replay import (
    ReplayUsageError,
    RunSelection,
    cohort_diff,
    diff_runs,
    render_cohort,
    render_diff,
)

__all__ = ["add_cohort_arguments", "cmd_diff", "cohort_selection", "register", "use_color"]

STATUSES = ("completed", "failed", "running")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the diff command."""
    p = sub.add_parser(
        "diff",
        help="diff two runs causally (exit 0 same, 1 different), or two cohorts of runs",
        description="Diff run B against run A: steps aligned causally, the first divergence, "
        "per-step prompt/message/tool/argument/result/world-state changes, answer and totals. "
        "With --cohort, diff two selections of runs paired by input.",
    )
    p.add_argument("a", nargs="?", help="run A: id or unique prefix")
    p.add_argument("b", nargs="?", help="run B: id or unique prefix")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.add_argument(
        "--only-changes", action="store_true", help="leave out unchanged steps and totals"
    )
    p.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour the text output (auto: when stdout is a terminal and NO_COLOR is unset)",
    )
    add_cohort_arguments(p, "diff two selections of runs, paired by input")
    p.set_defaults(func=cmd_diff)


def add_cohort_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--cohort`` (described by `what`) and the two selections' ``--a-*``/``--b-*``."""
    cohort = parser.add_argument_group("cohort diff (--cohort)")
    cohort.add_argument("--cohort", action="store_true", help=what)
    cohort.add_argument(
        "--status",
        choices=STATUSES,
        help="both cohorts: only runs with this status (for tag, agent and prompt selections)",
    )
    for side in ("a", "b"):
        upper = side.upper()
        cohort.add_argument(f"--{side}-tag", metavar="TAG", help=f"runs of cohort {upper}: tag")
        cohort.add_argument(
            f"--{side}-prompt",
            metavar="NAME=VERSION",
            help=f"cohort {upper}: runs using this prompt version (NAME: role or prompt name)",
        )
        cohort.add_argument(f"--{side}-agent", metavar="AGENT", help=f"cohort {upper}: agent")
        cohort.add_argument(
            f"--{side}-status",
            choices=STATUSES,
            help=f"cohort {upper}: runs with this status (overrides --status)",
        )
        cohort.add_argument(
            f"--{side}-run",
            action="append",
            default=[],
            metavar="RUN",
            help=f"cohort {upper}: this run (repeatable; ids or unique prefixes)",
        )


def use_color(choice: str, stream: TextIO) -> bool:
    """Whether to colour: always, never, or (auto) when `stream` is a TTY and NO_COLOR unset."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    return stream.isatty() and not os.environ.get("NO_COLOR")


def cmd_diff(args: argparse.Namespace) -> int:
    """Print the diff; 0 when nothing differs, 1 when something does."""
    color = use_color(args.color, sys.stdout)
    with open_ledger(args, read_only="auto") as ledger:
        if args.cohort:
            return _cohort(ledger, args, color)
        if not args.a or not args.b:
            raise CliError("diff needs two runs: agentledger diff A B (or --cohort ...)")
        diff = diff_runs(ledger, resolve_run(ledger, args.a), resolve_run(ledger, args.b))
        if args.json:
            _emit(json.dumps(diff.to_json(), indent=2, ensure_ascii=False))
        else:
            _emit(render_diff(diff, color=color, only_changes=args.only_changes))
        return 0 if diff.identical else 1


def _cohort(ledger: Ledger, args: argparse.Namespace, color: bool) -> int:
    if args.a or args.b:
        raise CliError("--cohort takes --a-*/--b-* selections, not run arguments")
    selection_a = cohort_selection(ledger, args, "a")
    selection_b = cohort_selection(ledger, args, "b")
    try:
        diff = cohort_diff(ledger, selection_a, selection_b)
    except ReplayUsageError as error:
        raise CliError(str(error)) from None
    if args.json:
        _emit(json.dumps(diff.to_json(), indent=2, ensure_ascii=False))
    else:
        _emit(render_cohort(diff, color=color, only_changes=args.only_changes))
    return 0 if diff.identical else 1


def _emit(text: str) -> None:
    """Print the report; a reader that stops early (``| head``) is not an error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail


def cohort_selection(ledger: Ledger, args: argparse.Namespace, side: str) -> RunSelection:
    """Cohort `side` (``a`` or ``b``) as the ``--a-*``/``--b-*`` arguments select it."""
    runs = tuple(resolve_run(ledger, text) for text in getattr(args, f"{side}_run"))
    prompt_text = getattr(args, f"{side}_prompt")
    prompt: tuple[str, str] | None = None
    if prompt_text is not None:
        name, sep, version = prompt_text.partition("=")
        if not sep or not name or not version:
            raise CliError(
                f"--{side}-prompt {prompt_text!r}: expected NAME=VERSION, e.g. planner=v2"
            )
        prompt = (name, version)
    own_status = getattr(args, f"{side}_status")
    status = own_status or args.status
    if runs and status is not None:
        option = f"--{side}-status" if own_status else "--status"
        raise CliError(
            f"{option} applies to tag, agent and prompt selections; --{side}-run names its runs"
        )
    selection = RunSelection(
        run_ids=runs,
        tag=getattr(args, f"{side}_tag"),
        agent=getattr(args, f"{side}_agent"),
        status=status,
        prompt=prompt,
    )
    if selection.empty:
        raise CliError(
            f"--cohort needs a selection for {side.upper()}: --{side}-tag, --{side}-prompt, "
            f"--{side}-agent, --{side}-status or --{side}-run"
        )
    return selection
