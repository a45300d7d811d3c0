"""Seed 001 (minimal-agent-framework): the REASON / THINK / TOOL loop under guardrails.

REASON plans and picks a tool; the call fails (an unknown place); THINK proposes a repaired
request, which runs; REASON then picks a tool above the run's risk limit, which the max_tool_risk
guardrail refuses before it is called. Every node and every trip is an event. Offline.

    python examples/reasoning_guardrails.py [LEDGER_URL]      (default: memory://)
"""

from __future__ import annotations

import sys

from agentledger.agents import AgentConfig, GuardrailLimits, run_agent
from agentledger.agents.testing import reasoning_script
from agentledger.ledger import Ledger

QUESTION = "Where is the Olde Towne, and message Sam that I'm on my way?"


def main() -> int:
    models = reasoning_script(
        plan={"plan": ["TOOL", "THINK", "TOOL", "ANSWER"]},
        choices=[
            {"tool": "geocode", "args": {"place": "Olde Towne"}},
            {"tool": "send_message", "args": {"to": "Sam", "subject": "", "body": "On my way"}},
            {"tool": "", "args": {}},
        ],
        repairs=[
            {"tool": "geocode", "args": {"place": "Old Town"}},
            {"tool": "", "args": {}},
        ],
        answer="The Old Town is in the centre [place:old-town]. I was not allowed to message Sam.",
    )
    config = AgentConfig(limits=GuardrailLimits(max_steps=6, max_tool_risk="medium"))
    with Ledger.open(sys.argv[1] if len(sys.argv) > 1 else "memory://") as ledger:
        result = run_agent(ledger, "reasoning", QUESTION, models=models, config=config)
        print(f"answer: {result.answer}")
        events = ledger.events(result.run_id)
        for event in events:
            if event.kind == "GuardrailTripped":
                print(f"guardrail: {event.payload['guardrail']} -> {event.payload['action']}")
        steps = [e.payload["name"] for e in events if e.kind == "StepStarted"]
        print(f"steps: {' '.join(steps)}")
        trips = {e.payload["guardrail"] for e in events if e.kind == "GuardrailTripped"}
        checks = {
            "hash chain verifies": ledger.verify(result.run_id).ok,
            "THINK repaired the failed call": "think" in steps,
            "the high-risk tool was refused": "max_tool_risk" in trips,
            "the answer cites tool evidence": result.evidence_ids == ("place:old-town",),
        }
    for name, ok in checks.items():
        print(f"[{'ok' if ok else 'FAILED'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
