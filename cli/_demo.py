"""`agentledger demo`: record a sample multi-step run offline, then show and verify it.

Uses only the public recording API (`Ledger.record_run`), the same one users embed: a plan from
a model call, two tool calls with their deltas to the world state, and an answer that cites the
tools' evidence. No keys, no network.
"""

from __future__ import annotations

import argparse
import json

from agentledger.cli._common import open_ledger
from agentledger.cli._format import timeline
from agentledger.ledger import Ledger, RunRecorder
from agentledger.projections import fold_patches

__all__ = ["record_sample_run", "register"]

QUESTION = "Is it a good afternoon for the harbour walk, and how do I get there from Central?"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the demo command."""
    p = sub.add_parser("demo", help="record, show and verify an offline sample run")
    p.set_defaults(func=cmd_demo)


def record_sample_run(ledger: Ledger) -> RunRecorder:
    """Record the sample run and return its (closed) recorder."""
    with ledger.record_run("sample-pipeline", input=QUESTION, tags=["demo"]) as run:
        system = run.prompt("planner", "v1", "Plan the steps as strict JSON.")
        messages = [
            {"role": "system", "content": "Plan the steps as strict JSON."},
            {"role": "user", "content": QUESTION},
        ]
        plan = {
            "steps": [
                {"tool": "weather", "args": {"place": "Harbour"}},
                {"tool": "transit", "args": {"origin": "Central", "destination": "Harbour"}},
            ]
        }
        with run.step("plan") as step:
            call = run.model_call(
                provider="scripted",
                model="demo-planner",
                messages=messages,
                response={"role": "assistant", "content": json.dumps(plan)},
                usage={"input_tokens": 42, "output_tokens": 31, "total_tokens": 73},
                prompt=system,
                step_id=step,
                finish_reason="stop",
            )
            run.plan(plan, step_id=step, caused_by=call.position)
        with run.step("weather", plan["steps"][0]["args"]) as step:
            call_id = run.tool(
                "weather",
                {"place": "Harbour"},
                step_id=step,
                result={
                    "place": "Harbour",
                    "forecast": "sunny",
                    "temp_c": 19,
                    "evidence_id": "wx:harbour:pm",
                },
            )
            run.delta(
                {
                    "weather": {"Harbour": {"forecast": "sunny", "temp_c": 19}},
                    "evidence": {call_id: "wx:harbour:pm"},
                },
                step_id=step,
                source=call_id,
            )
        with run.step("transit", plan["steps"][1]["args"]) as step:
            call_id = run.tool(
                "transit",
                {"origin": "Central", "destination": "Harbour"},
                step_id=step,
                result={
                    "mode": "tram",
                    "line": "T2",
                    "minutes": 14,
                    "evidence_id": "tr:central-harbour",
                },
            )
            run.delta(
                {
                    "route": {"mode": "tram", "line": "T2", "minutes": 14},
                    "evidence": {call_id: "tr:central-harbour"},
                },
                step_id=step,
                source=call_id,
            )
        run.answer(
            "Yes: sunny and 19 °C at the Harbour this afternoon. Take tram T2 from Central "
            "(about 14 minutes).",
            evidence_ids=["wx:harbour:pm", "tr:central-harbour"],
        )
    return run


def cmd_demo(args: argparse.Namespace) -> int:
    """Record, show and verify the sample run."""
    with open_ledger(args) as ledger:
        run = record_sample_run(ledger)
        records = ledger.events(run.run_id)
        print(f"Recorded run {run.run_id} into {ledger.url}\n")
        print(timeline(records))
        answer = next(r.payload.get("answer") for r in records if r.kind == "SynthesisProduced")
        state = fold_patches(r.payload["patch"] for r in records if r.kind == "DeltaApplied")
        print(f"\nAnswer: {answer}")
        print(f"\nWorld state:\n{json.dumps(state, indent=2, ensure_ascii=False)}")
        report = ledger.verify(run.run_id)
        verdict = "intact" if report.ok else "BROKEN"
        print(f"\nVerify: {verdict} ({report.events_checked} events, {report.blobs_checked} blobs)")
        print(f"\nNext: agentledger show {run.run_id[:8]}   agentledger verify   agentledger runs")
        return 0 if report.ok else 1
