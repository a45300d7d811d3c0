"""`agentledger state RUN [--at N] [--diff-from M]`: a run's world state as JSON (time travel).

Prints the state after position N (default: the run's last), or with ``--diff-from M`` the
RFC 7386 merge patch taking the state at M to the state at N. Keys are sorted, so the output is
the same whether the state came from a snapshot or from the events. Reads use snapshots (and
write those that fall due) unless ``--no-snapshots``; when a snapshot served, a note on stderr
says the answer rests on derived data that was not re-verified (stdout stays the JSON alone).
Must not append events.
"""

from __future__ import annotations

import argparse
import json
import sys

from agentledger.cli._common import CliError, open_ledger, resolve_run, whole_number
from agentledger.projections import (
    FoldedState,
    JSONValue,
    ProjectionError,
    diff_patch,
    fold_world_state,
)

__all__ = ["cmd_state", "register", "snapshot_notes"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the state command."""
    p = sub.add_parser(
        "state", help="a run's world state after a position, as JSON (or a diff of two)"
    )
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument(
        "--at", type=whole_number, metavar="N", help="position (default: the run's last)"
    )
    p.add_argument(
        "--diff-from",
        type=whole_number,
        metavar="M",
        help="print the merge patch from the state at M to the state at N instead",
    )
    p.add_argument(
        "--no-snapshots",
        action="store_true",
        help="fold every delta from the start; neither read nor write snapshots",
    )
    p.set_defaults(func=cmd_state)


def cmd_state(args: argparse.Namespace) -> int:
    """Print a world state, or the patch between two."""
    snapshots = not args.no_snapshots
    with open_ledger(args, read_only="auto") as ledger:
        run_id = resolve_run(ledger, args.run)
        try:
            after = fold_world_state(ledger, run_id, args.at, snapshots=snapshots)
            folds = [after]
            output: JSONValue = after.state
            if args.diff_from is not None:
                before = fold_world_state(ledger, run_id, args.diff_from, snapshots=snapshots)
                folds.append(before)
                output = diff_patch(before.state, output)
        except ProjectionError as e:
            raise CliError(f"{type(e).__name__}: {e}") from e
    print(json.dumps(output, indent=2, ensure_ascii=False, sort_keys=True))
    for line in snapshot_notes(run_id, folds):
        print(line, file=sys.stderr)
    return 0


def snapshot_notes(run_id: str, folds: list[FoldedState]) -> list[str]:
    """One stderr line per snapshot an answer started from: it is derived, not re-verified."""
    used = {f.snapshot.position: f.snapshot for f in folds if f.snapshot is not None}
    notes = []
    for position, snapshot in sorted(used.items()):
        if snapshot.event_hash:
            checked = "its event hash matches the event there"
        else:
            checked = "written before snapshots carried an event hash"
        notes.append(
            f"agentledger: note: started from the snapshot at position {position} ({checked}); "
            f"its state is derived data, not re-verified: run `agentledger verify --deep {run_id}`"
        )
    return notes
