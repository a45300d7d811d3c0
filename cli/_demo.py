"""`agentledger demo`: run the real Pipeline offline on a bundled scenario, then show and verify it.

Runs `agentledger.agents.run_agent` with the `demo_pipeline` scenario (scripted planner,
executor and synthesizer models shipped as package data) and the offline built-in tools, into
the ledger named by --db (default ./agentledger.db), then prints the timeline, the answer, the
world state and the verification verdict. No keys, no network, a second or two. Must not
record anything by hand: the demo shows the real agent code path.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from agentledger.agents import AgentError, run_agent
from agentledger.agents.testing import load_scenario
from agentledger.cli._common import CliError, open_ledger, plural
from agentledger.cli._format import terminal_width, timeline
from agentledger.ledger import RecordedEvent

__all__ = ["cmd_demo", "register"]


def command_name() -> str:
    """How to call this command again from here: ``.venv/bin/agentledger`` after ``make demo``.

    The path the command was started by, relative to the working directory when it lies
    inside it; plain ``agentledger`` when it was found on PATH (or run some other way).
    """
    started = Path(sys.argv[0])
    if started.name != "agentledger":
        return "agentledger"
    if not started.is_absolute():
        return str(started)
    try:
        return str(started.relative_to(Path.cwd()))
    except ValueError:
        return "agentledger"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the demo command."""
    p = sub.add_parser("demo", help="run the pipeline agent offline, then show and verify it")
    p.add_argument(
        "--scenario", default="demo_pipeline", help="bundled scenario (default: demo_pipeline)"
    )
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the scenario, print what was recorded, verify it."""
    bundled = scenario_names()
    if args.scenario not in bundled:
        raise CliError(f"no bundled scenario {args.scenario!r}: choose one of {', '.join(bundled)}")
    scenario = load_scenario(args.scenario)
    with open_ledger(args) as ledger:
        try:
            result = run_agent(
                ledger,
                scenario.agent,
                scenario.question,
                models=scenario.models,
                config=scenario.config,
                tags=["demo"],
            )
        except AgentError as error:  # the ledger refused a write (a damaged file, a full disk)
            raise CliError(str(error)) from None
        records = ledger.events(result.run_id)
        print(f"Recorded run {result.run_id} ({scenario.agent}) into {ledger.url}\n")
        print(f"Question: {scenario.question}\n")
        print(timeline(records, terminal_width(sys.stdout)))
        print(f"\nAnswer ({result.status}): {result.answer}")
        print(f"Evidence cited: {', '.join(result.evidence_ids) or '(none)'}")
        state = json.dumps(result.world_state, indent=2, ensure_ascii=False)
        print(f"\nWorld state (the fold of {_deltas(records)} deltas):\n{state}")
        usage = result.usage
        print(
            f"\nUsage: {usage.model_calls} model calls, {usage.tool_calls} tool calls, "
            f"{usage.total_tokens} tokens (scripted models: estimated, $0)"
        )
        report = ledger.verify(result.run_id)
        verdict = "intact" if report.ok else "BROKEN"
        checked = (
            f"{plural(report.events_checked, 'event')}, {plural(report.blobs_checked, 'blob')}"
        )
        print(f"Verify: {verdict} ({checked})")
        for problem in report.problems:
            print(f"  {problem}")
        short = result.run_id[:8]
        me = command_name()
        print(
            f"\nNext: {me} show {short}   {me} replay {short}   {me} rerun {short}   "
            f"{me} report {short} -o run.html   {me} verify"
        )
        return 0 if report.ok else 1


def scenario_names() -> list[str]:
    """The scenarios shipped with ``agentledger.agents`` (its ``*.json`` files), sorted."""
    files = resources.files("agentledger.agents").iterdir()
    return sorted(f.name.removesuffix(".json") for f in files if f.name.endswith(".json"))


def _deltas(records: Sequence[RecordedEvent]) -> int:
    return sum(1 for r in records if r.kind == "DeltaApplied")
