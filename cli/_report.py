"""`agentledger report RUN [-o FILE] [--checkpoint FILE --vkey KEY]`: one HTML page for auditors.

``report A --diff B`` and ``report --cohort --a-tag T1 --b-tag T2`` (the selections of `diff
--cohort`) write a diff page instead.

Reads the run, resolves every blob its events refer to (each conversation message once: a
model call gets only the messages no earlier call showed), verifies its chain (and, when given,
the ledger against a signed checkpoint), folds its world state, and hands all of it to
`render_report`. Writes the page to FILE (or stdout). Must not append events or write
snapshots: a report reads the ledger only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from functools import partial
from typing import Any

from agentledger.cli._common import CliError, open_ledger, resolve_run, write_output
from agentledger.cli._diff_command import add_cohort_arguments, cohort_selection
from agentledger.cli._report_html import ReportData, Seen, render_report
from agentledger.cli._trust_commands import verifier_keys
from agentledger.ledger import Ledger, LedgerError, RecordedEvent, blob_refs_in
from agentledger.projections import ProjectionError, world_state

__all__ = ["build_report", "new_messages", "read_ahead", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the report command."""
    p = sub.add_parser(
        "report", help="one self-contained HTML page of a run for auditors (works offline)"
    )
    p.add_argument("run", nargs="?", help="run id or a unique prefix (none with --cohort)")
    p.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")
    p.add_argument(
        "--diff",
        metavar="RUN_B",
        help="instead, the causal diff of RUN_B against RUN, side by side (as `diff` finds it)",
    )
    p.add_argument(
        "--pdf",
        metavar="FILE",
        help="print the report to this PDF file through a headless Chromium (instead of HTML, "
        "unless -o is given too)",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="FILE|DIR",
        help="also show the verdict against this signed checkpoint (repeatable; needs --vkey)",
    )
    p.add_argument(
        "--vkey",
        action="append",
        default=[],
        metavar="KEY|FILE",
        help="the verifier key that signs the checkpoints",
    )
    add_cohort_arguments(
        p,
        "instead, the cohort diff of two selections of runs paired by input (as `diff --cohort` "
        "finds it), with every run verified",
    )
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """Write the page; exit 1 when a run (or the checkpoint check) is broken, as `verify`."""
    if args.checkpoint and not args.vkey:
        raise CliError("report --checkpoint needs --vkey: the verifier key that signs it")
    if args.diff and args.checkpoint:
        raise CliError("report --diff takes no --checkpoint: verify each run with `verify`")
    if args.cohort and (args.run or args.diff or args.checkpoint):
        raise CliError(
            "report --cohort takes --a-*/--b-* selections, not RUN, --diff or --checkpoint"
        )
    if not args.cohort and not args.run:
        raise CliError("report needs a run: agentledger report RUN (or --cohort ...)")
    keys = verifier_keys(args.vkey)
    with open_ledger(args, read_only="auto") as ledger:
        if args.cohort:
            page, intact = _cohort_page(ledger, args)
        elif args.diff:
            run_id = resolve_run(ledger, args.run)
            page, intact = _diff_page(ledger, run_id, resolve_run(ledger, args.diff))
        else:
            run_id = resolve_run(ledger, args.run)
            data = build_report(ledger, run_id, checkpoints=args.checkpoint, verifier_keys=keys)
            page = render_report(data)
            intact = data.verify.ok and (data.checkpoint is None or data.checkpoint.ok)
    if args.pdf:
        from agentledger.cli._report_pdf import print_pdf

        print_pdf(page, args.pdf)
    if args.output or not args.pdf:
        write_output(args.output, page)
    return 0 if intact else 1


def _diff_page(ledger: Ledger, run_a: str, run_b: str) -> tuple[str, bool]:
    """The diff page of run B against run A, and whether both runs verify intact."""
    from agentledger.cli._report_diff import render_diff_page
    from agentledger.replay import diff_runs

    verify_a, verify_b = ledger.verify(run_a), ledger.verify(run_b)
    page = render_diff_page(diff_runs(ledger, run_a, run_b), verify_a, verify_b)
    return page, verify_a.ok and verify_b.ok


def _cohort_page(ledger: Ledger, args: argparse.Namespace) -> tuple[str, bool]:
    """The cohort diff page of the two ``--a-*``/``--b-*`` selections; whether all verify."""
    from agentledger.cli._report_cohort import render_cohort_page
    from agentledger.replay import ReplayUsageError, cohort_diff

    selection_a = cohort_selection(ledger, args, "a")
    selection_b = cohort_selection(ledger, args, "b")
    try:
        diff = cohort_diff(ledger, selection_a, selection_b)
    except ReplayUsageError as error:
        raise CliError(str(error)) from None
    run_ids = [p.a_run for p in diff.pairs] + [p.b_run for p in diff.pairs]
    run_ids += [u.run_id for u in diff.unpaired]
    reports = {run_id: ledger.verify(run_id) for run_id in dict.fromkeys(run_ids)}
    page = render_cohort_page(diff, reports)
    return page, all(report.ok for report in reports.values())


def _resolve(
    ledger: Ledger,
    kind: str,
    payload: dict[str, Any],
    position: int,
    *,
    seen: dict[str, Seen],
    read: Mapping[str, Any],
) -> dict[str, Any]:
    """The blobs an event refers to (a model call's as ``messages``/``response``/``tools``).

    A model call's ``messages`` are only those no earlier call showed; ``earlier`` then says
    how many came before them and which call shows them (see `_new_messages`). ``read``
    holds the blobs already read (see `read_ahead`).
    """
    found: dict[str, Any] = {}
    if kind == "ModelCalled":
        found.update(new_messages(ledger, payload["messages_ref"], position, seen, read))
        if payload.get("response_ref"):
            response = _blob(ledger, read, payload["response_ref"])
            found["response"] = (
                response.get("message", response) if isinstance(response, dict) else response
            )
            total = found.get("earlier", Seen(0, 0)).count + len(found["messages"])
            seen.setdefault(payload["response_ref"], Seen(position, total + 1, response=True))
        if payload.get("tools_ref"):
            found["tools"] = _blob(ledger, read, payload["tools_ref"])
    else:
        for ref in blob_refs_in(payload):
            found[ref] = _blob(ledger, read, ref)
    return found


def read_ahead(ledger: Ledger, records: Sequence[RecordedEvent]) -> dict[str, Any]:
    """Every blob the events refer to, conversation nodes included, in a few batched queries.

    The conversation chains are read in one query (`Ledger.message_nodes`), not node by
    node. When something cannot be read in a batch the result leaves it out, and it is read
    alone later (and shown as unreadable there, as verify reports it).
    """
    heads: list[str] = []
    others: list[str] = []
    for record in records:
        payload = record.payload
        if record.kind == "ModelCalled":
            heads += [payload[k] for k in ("messages_ref", "response_ref") if payload.get(k)]
            others += [payload["tools_ref"]] if payload.get("tools_ref") else []
        else:
            others += blob_refs_in(payload)
    read: dict[str, Any] = {}
    with suppress(LedgerError):  # a broken chain: its nodes are read one by one, with a note
        read.update(ledger.message_nodes(heads))
    with suppress(LedgerError):  # a blob that does not unpack: read alone, it says so
        read.update(ledger.blobs(list(dict.fromkeys(others))))
    return read


def _blob(ledger: Ledger, read: Mapping[str, Any], ref: str) -> Any:
    """The blob at ``ref``: read ahead, or read now (a note when it cannot be read)."""
    if ref in read:
        return read[ref]
    return _read(partial(ledger.blob, ref))


def new_messages(
    ledger: Ledger,
    head: str,
    position: int,
    seen: dict[str, Seen],
    read: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The messages of the conversation chain at `head` that no earlier call showed.

    Walks from the head node towards the first message and stops at a node an earlier call
    showed (its message, or its response): the ``count`` messages up to that node are the
    first ``count`` of that call's conversation. Each node is read once per report, so a
    conversation that grows call by call costs linear time and page size, not quadratic;
    ``read`` holds the nodes already read in batches (`read_ahead`).
    """
    new: list[tuple[str, Any]] = []
    current: str | None = head
    while current is not None and current not in seen:
        ref = current
        node = _blob(ledger, read or {}, ref)
        if not isinstance(node, dict):
            new.append(("", node if isinstance(node, str) else f"(message node {ref} unreadable)"))
            current = None
            break
        if node.get("message") is not None:
            new.append((ref, node["message"]))
        parent = node.get("parent_ref")
        current = parent if isinstance(parent, str) else None
    new.reverse()
    earlier = seen.get(current) if current is not None else None
    count = earlier.count if earlier else 0
    for offset, (ref, _) in enumerate(new, start=1):
        if ref:
            seen.setdefault(ref, Seen(position, count + offset))
    found: dict[str, Any] = {"messages": [message for _, message in new]}
    if earlier is not None and earlier.count:
        found["earlier"] = earlier
    return found


def _read(load: Callable[[], Any]) -> Any:
    """A blob's content, or a note saying why it could not be read (verify names it too)."""
    try:
        return load()
    except LedgerError as e:
        return f"(blob unreadable: {type(e).__name__}: {e})"


def build_report(
    ledger: Ledger,
    run_id: str,
    *,
    checkpoints: list[str] | None = None,
    verifier_keys: list[str] | None = None,
) -> ReportData:
    """Read what the page of `run_id` shows: events, resolved blobs, verdicts, final state."""
    events = ledger.events(run_id)
    resolved: dict[int, dict[str, Any]] = {}
    seen: dict[str, Seen] = {}
    read = read_ahead(ledger, events)
    for record in events:
        found = _resolve(ledger, record.kind, record.payload, record.position, seen=seen, read=read)
        if found:
            resolved[record.position] = found
    verdict = ledger.verify(run_id)
    checkpoint = None
    if checkpoints:
        checkpoint = ledger.verify(
            run_id, checkpoint=checkpoints, verifier_keys=verifier_keys or []
        )
    try:
        state = world_state(ledger, run_id)
    except ProjectionError as e:
        raise CliError(f"cannot fold the world state: {type(e).__name__}: {e}") from e
    return ReportData(
        run=ledger.run(run_id),
        events=events,
        resolved=resolved,
        verify=verdict,
        final_state=state,
        checkpoint=checkpoint,
        checkpoint_files=list(checkpoints or []),
    )
