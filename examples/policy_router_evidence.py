"""Seed 002 (MumbAI): policy gate, a budgeted router plan, and evidence discipline.

The question carries an email address and a phone number: the policy gate redacts them before
anything is recorded. The router plans three specialists but its budget allows two, so the run
records a router_budget trip and stops gracefully. The chat agent first cites a place no tool
returned; the evidence guardrail re-asks once and the corrected answer is kept. Offline.

    python examples/policy_router_evidence.py [LEDGER_URL]      (default: memory://)
"""

from __future__ import annotations

import sys

from agentledger.agents import AgentConfig, run_agent
from agentledger.agents.testing import router_script
from agentledger.ledger import Ledger

QUESTION = (
    "I'm near the museums on 13 June 2026: a gallery and the weather? Reply to "
    "ana@example.com or +34 612 345 678."
)
PLAN = {
    "router_plan": [
        {"agent": "retriever", "args": {"near": "Museum Quarter", "category": "gallery"}},
        {"agent": "weather", "args": {"place": "Museum Quarter", "date": "2026-06-13"}},
        {"agent": "routing", "args": {"origin": "Museum Quarter", "destination": "Old Town"}},
        {"agent": "chat"},
    ],
    "needs_clarification": None,
    "risk_tags": ["contact"],
}


def main() -> int:
    models = router_script(
        plan=PLAN,
        answer=[
            "Visit the Grand Gallery [poi:grand-gallery].",
            (
                "Visit the Lantern Glass Gallery [poi:lantern-gallery]; the weather is in the "
                "forecast [weather:place:museum-quarter:2026-06-13]."
            ),
        ],
    )
    config = AgentConfig(options={"budget": 2})
    with Ledger.open(sys.argv[1] if len(sys.argv) > 1 else "memory://") as ledger:
        result = run_agent(ledger, "router", QUESTION, models=models, config=config)
        events = ledger.events(result.run_id)
        recorded_question = events[0].payload["input"]["question"]
        decision = events[1].payload
        trips = [
            (e.payload["guardrail"], e.payload["action"])
            for e in events
            if e.kind == "GuardrailTripped"
        ]
        print(f"recorded question: {recorded_question}")
        print(f"policy: {decision['decision']} {decision.get('redactions')}")
        print(f"guardrails: {trips}")
        print(f"answer: {result.answer}")
        checks = {
            "hash chain verifies": ledger.verify(result.run_id).ok,
            "no raw email or phone recorded": "ana@example.com" not in recorded_question
            and "612 345 678" not in recorded_question,
            "router budget stopped the plan": ("router_budget", "stop") in trips,
            "invented evidence was re-asked": ("evidence", "reask") in trips,
            "only tool evidence is cited": "poi:grand-gallery" not in result.evidence_ids,
        }
    for name, ok in checks.items():
        print(f"[{'ok' if ok else 'FAILED'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
