"""Regenerate the golden recorded runs in ``tests/golden/`` (deterministically).

Run: ``.venv/bin/python tests/golden/make_golden.py`` (``--out DIR`` writes elsewhere; the
up-to-date test in ``tests/test_replay_golden.py`` does that and compares).

Owns the recipe of every golden file: the scripted runs (one per orchestration, copied from the
RUNS of ``tests/test_agents_runner.py`` so this script imports no test module), the one
deliberately divergent pipeline run and its sidecar, and the old-schema tools run. Runs are
recorded in a memory ledger with a ``StepClock`` and ``SequentialIds`` (seeded per file), and
tool latencies are pinned, so two generations write byte-identical files (only the recorded code
version follows the installed package). Must not import test modules, and must not write
anywhere but the chosen output directory.

Files:

- ``<agent>.jsonl`` for pipeline, reasoning, coordinator, tools, router: ``Ledger.export_run``.
- ``divergent_pipeline.jsonl``: the demo pipeline run recorded through ``AlteringRecorder``,
  which changes one value in the DeltaApplied of the second executor step before it is hashed.
  The file imports and verifies (the chain is honest about what was recorded), but the patch is
  not what the code derives from the recorded tool result, so replay diverges exactly there.
  ``divergent_pipeline.expected.json`` records that position and kind.
- ``old_schema_tools.jsonl``: a tools-agent run whose ToolReturned events are rewritten to
  class_version 1 (``latency_s`` in seconds instead of ``latency_ms``) with every hash, ``prev``
  link and the RunCompleted head hash recomputed by the ledger's own hashing: what a file
  recorded before ToolReturned v2 looks like.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentledger.agents import AgentConfig, run_agent
from agentledger.agents.models import ScriptedModel
from agentledger.agents.testing import (
    coordinator_script,
    load_scenario,
    reasoning_script,
    router_script,
    tool_agent_script,
)
from agentledger.ledger import (
    GENESIS,
    Ledger,
    RunRecorder,
    SequentialIds,
    StepClock,
    envelope_hash,
)
from agentledger.ledger._canonical import loads
from agentledger.tools import ToolRegistry, ToolResult, builtin_registry

GOLDEN_DIR = Path(__file__).resolve().parent
AGENTS = ("pipeline", "reasoning", "coordinator", "tools", "router")
DIVERGENT = "divergent_pipeline"
OLD_SCHEMA = "old_schema_tools"
PINNED_LATENCY_MS = 2.0
"""Every tool call of a golden run reports this latency (real ones vary from run to run)."""

RunSpec = tuple[str, str, dict[str, ScriptedModel], AgentConfig]
SCOUT: dict[str, Any] = {"name": "scout", "description": "finds places", "tools": ["find_pois"]}


# The runs (copied from tests/test_agents_runner.py RUNS) -----------------------------------------


def pipeline_run() -> RunSpec:
    """The bundled demo scenario: plan, three tool steps, a cited answer."""
    scenario = load_scenario()
    return scenario.agent, scenario.question, scenario.models, scenario.config


def reasoning_run() -> RunSpec:
    """A REASON/THINK/TOOL run with a failure, a repair, bad JSON and an evidence reask."""
    models = reasoning_script(
        plan=["plan?", {"plan": ["TOOL", "ANSWER"]}],
        choices=[{"tool": "geocode", "args": {"place": "Olde"}}, {"tool": ""}],
        repairs=[{"tool": "geocode", "args": {"place": "Old Town"}}],
        answer=["Here [poi:nope].", "Here [place:old-town]."],
    )
    return "reasoning", "Where is Olde?", models, AgentConfig(seed=3)


def coordinator_run() -> RunSpec:
    """A coordinator run with a delegation and the fallback note."""
    models = coordinator_script(
        decisions=[
            {"Action": "DELEGATE", "Agent": "utility", "Task": "6*7"},
            {"Action": "DONE", "Summary": "42"},
        ],
        workers={"utility": [("calculator", {"expression": "6*7"})]},
    )
    return "coordinator", "What is 6*7? My mail is a@b.org", models, AgentConfig()


def tools_run() -> RunSpec:
    """A tool-agent run with a sub-agent."""
    models = tool_agent_script(
        turns=[("ask_scout", {"task": "cafe near Old Town"}), "See [poi:cafe-brasa]? maybe."],
        sub_agents={"scout": [("find_pois", {"near": "Old Town", "category": "cafe"}), "found"]},
    )
    return "tools", "Coffee?", models, AgentConfig(options={"sub_agents": [SCOUT]})


def router_run() -> RunSpec:
    """A router run over budget."""
    step = {"agent": "geo", "args": {"place": "Old Town"}}
    models = router_script(plan={"router_plan": [step, step]}, answer="At [place:old-town].")
    return "router", "Where is Old Town?", models, AgentConfig(options={"budget": 1})


RUNS: Mapping[str, Callable[[], RunSpec]] = {
    "pipeline": pipeline_run,
    "reasoning": reasoning_run,
    "coordinator": coordinator_run,
    "tools": tools_run,
    "router": router_run,
}


# Recording ----------------------------------------------------------------------------------------


class PinnedLatencyTools(ToolRegistry):
    """The built-in tools, each result reporting ``PINNED_LATENCY_MS``.

    Tool latency is measured with ``time.perf_counter``, so it differs on every run; replay
    ignores it, but a golden file should not change when nothing but the machine's speed did.
    """

    def __init__(self) -> None:
        super().__init__(builtin_registry())

    def call(self, name: str, arguments: object) -> ToolResult:
        """The real tool's result, with the pinned latency."""
        result = super().call(name, arguments)
        return result.model_copy(update={"latency_ms": PINNED_LATENCY_MS})


def golden_ledger(seed: str) -> Ledger:
    """A memory ledger whose timestamps and ids depend only on ``seed``."""
    # Recorded without redaction, as they were before it existed: the files stay byte-identical.
    return Ledger.open(
        "memory://", clock=StepClock(), ids=SequentialIds(f"golden-{seed}"), redaction=None
    )


def record(
    name: str, seed: str, factory: Callable[[Ledger], Any] | None = None
) -> tuple[Ledger, str]:
    """Record the run ``RUNS[name]`` in a fresh golden ledger; return it and the run id.

    ``factory(ledger)``, when given, returns the recorder factory passed to ``run_agent``.
    """
    ledger = golden_ledger(seed)
    agent, question, models, config = RUNS[name]()
    result = run_agent(
        ledger,
        agent,
        question,
        models=models,
        config=config,
        tools=PinnedLatencyTools(),
        recorder_factory=factory(ledger) if factory is not None else None,
    )
    return ledger, result.run_id


class AlteringRecorder(RunRecorder):
    """Records normally, except that the second executor step's delta is altered once.

    An executor step's delta is the one carrying ``results``; in the second one, the first
    number of the step's result data (in key order) is increased by 27 before the event is
    built and hashed. ``altered_at`` is the position it got.
    """

    def __init__(self, ledger: Ledger, run_id: str) -> None:
        super().__init__(ledger, ledger.load(run_id))
        self.result_deltas = 0
        self.altered_at: int | None = None

    def delta(
        self,
        patch: Mapping[str, Any],
        *,
        step_id: str | None = None,
        source: str | None = None,
        caused_by: int | None = None,
    ) -> int:
        """Record ``patch``; the second executor step's patch is altered first."""
        if "results" in patch:
            self.result_deltas += 1
            if self.result_deltas == 2:
                patch = altered(patch)
                position = super().delta(patch, step_id=step_id, source=source, caused_by=caused_by)
                self.altered_at = position
                return position
        return super().delta(patch, step_id=step_id, source=source, caused_by=caused_by)


def altered(patch: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an executor delta with the first number of its result data changed."""
    changed = copy.deepcopy(dict(patch))
    for result in changed["results"].values():
        data = result["data"]
        for key in sorted(data):
            value = data[key]
            if isinstance(value, int | float) and not isinstance(value, bool):
                data[key] = value + 27
                return changed
    msg = "the executor delta has no number to alter"
    raise ValueError(msg)


def record_divergent() -> tuple[Ledger, str, int]:
    """The demo pipeline run with one altered DeltaApplied; returns ledger, run, position."""
    recorders: list[AlteringRecorder] = []

    def factory(ledger: Ledger) -> Callable[..., RunRecorder]:
        def open_run(agent: str, input: Any = None, **kwargs: Any) -> RunRecorder:  # noqa: A002
            plain = ledger.record_run(agent, input=input, **kwargs)
            recorder = AlteringRecorder(ledger, plain.run_id)
            recorders.append(recorder)
            return recorder

        return open_run

    ledger, run_id = record("pipeline", DIVERGENT, factory)
    position = recorders[0].altered_at
    if position is None:
        msg = "the demo pipeline run had fewer than two executor steps"
        raise RuntimeError(msg)
    return ledger, run_id, position


# The old-schema file ------------------------------------------------------------------------------


def downgrade_tool_returned(payload: dict[str, Any]) -> dict[str, Any]:
    """A ToolReturned v2 payload as version 1 wrote it: ``latency_s`` (seconds)."""
    old = {k: v for k, v in payload.items() if k != "latency_ms"}
    old["latency_s"] = float(payload.get("latency_ms", 0.0)) / 1000.0
    return old


def rechain(lines: list[str], rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> list[str]:
    """An export's lines with each event passed through ``rewrite`` and the chain recomputed.

    ``rewrite`` gets an event line (envelope plus ``"type"``) and returns it changed; every
    event's ``prev`` then links to its predecessor's new hash, a terminal event's ``head_hash``
    is that too, and every hash is recomputed with the ledger's ``envelope_hash``.
    """
    out = [lines[0]]
    prev = GENESIS
    for line in lines[1:]:
        item = loads(line)
        if item.get("type") != "event":
            out.append(line)
            continue
        item = rewrite(item)
        item["prev"] = prev
        if item["kind"] in ("RunCompleted", "RunFailed"):
            item["payload"] = {**item["payload"], "head_hash": prev}
        envelope = {k: v for k, v in item.items() if k not in ("type", "hash")}
        item["hash"] = prev = envelope_hash(envelope)
        out.append(json.dumps(item, ensure_ascii=False))
    return out


def to_version_1(item: dict[str, Any]) -> dict[str, Any]:
    """A ToolReturned event line as version 1; any other line unchanged."""
    if item["kind"] != "ToolReturned":
        return item
    return {**item, "version": 1, "payload": downgrade_tool_returned(item["payload"])}


def write_old_schema(path: Path) -> None:
    """Record the tools run and write it with its ToolReturned events at version 1."""
    ledger, run_id = record("tools", OLD_SCHEMA)
    with tempfile.TemporaryDirectory() as tmp:
        exported = Path(tmp) / "current.jsonl"
        ledger.export_run(run_id, exported)
        lines = exported.read_text(encoding="utf-8").split("\n")
    lines = [line for line in lines if line.strip()]
    path.write_text("\n".join(rechain(lines, to_version_1)) + "\n", encoding="utf-8")


# Main ---------------------------------------------------------------------------------------------


def generate(out: Path) -> list[Path]:
    """Write every golden file into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in AGENTS:
        ledger, run_id = record(name, name)
        path = out / f"{name}.jsonl"
        ledger.export_run(run_id, path)
        written.append(path)
    ledger, run_id, position = record_divergent()
    path = out / f"{DIVERGENT}.jsonl"
    ledger.export_run(run_id, path)
    sidecar = out / f"{DIVERGENT}.expected.json"
    sidecar.write_text(
        json.dumps({"position": position, "kind": "DeltaApplied"}, indent=2) + "\n",
        encoding="utf-8",
    )
    written += [path, sidecar]
    path = out / f"{OLD_SCHEMA}.jsonl"
    write_old_schema(path)
    written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Regenerate the golden files (default: next to this script)."""
    parser = argparse.ArgumentParser(description="Regenerate the golden recorded runs.")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR, help="output directory")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
