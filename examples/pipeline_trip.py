"""Seed 000 (Kura/Vaya): planner -> executor -> synthesizer over a world-state blackboard.

The planner emits a strict JSON plan (one step uses forEach over two stops), the executor calls
exactly one tool per step, each result is merged into the world state as a JSON Merge Patch, and
the synthesizer answers citing evidence ids. Offline: scripted models, built-in tools.

    python examples/pipeline_trip.py [LEDGER_URL]      (default: memory://)
"""

from __future__ import annotations

import json
import sys

from agentledger.agents import run_agent
from agentledger.agents.testing import pipeline_script
from agentledger.ledger import Ledger

QUESTION = "What's the weather at the Old Town and the harbour on 13 June 2026, and the route?"

PLAN = {
    "steps": [
        {
            "goal": "weather at each stop",
            "tool": "weather",
            "args": {"date": "2026-06-13"},
            "forEach": {"arg": "place", "values": ["Old Town", "Harbour Front"]},
        },
        {
            "goal": "route between the stops",
            "tool": "transit",
            "args": {"origin": "Old Town", "destination": "Harbour Front", "mode": "walk"},
        },
    ],
    "needs_clarification": None,
}
ANSWER = (
    "Both stops look dry on 13 June [weather:place:old-town:2026-06-13] "
    "[weather:place:harbour:2026-06-13], and the walk between them is short "
    "[route:place:old-town->place:harbour:walk]."
)


def main() -> int:
    models = pipeline_script(
        plan=PLAN,
        calls=[
            ("weather", {"place": "Old Town", "date": "2026-06-13"}),
            ("weather", {"place": "Harbour Front", "date": "2026-06-13"}),
            ("transit", {"origin": "Old Town", "destination": "Harbour Front", "mode": "walk"}),
        ],
        answer=ANSWER,
    )
    with Ledger.open(sys.argv[1] if len(sys.argv) > 1 else "memory://") as ledger:
        result = run_agent(ledger, "pipeline", QUESTION, models=models)
        print(f"answer: {result.answer}")
        print(f"world state snippets: {json.dumps(result.world_state['snippets'], indent=1)}")
        kinds = [e.kind for e in ledger.events(result.run_id)]
        checks = {
            "hash chain verifies": ledger.verify(result.run_id).ok,
            "answered": result.status == "answered",
            "three tool calls (forEach ran twice)": kinds.count("ToolCalled") == 3,
            "every citation is tool evidence": len(result.evidence_ids) == 3,
        }
    for name, ok in checks.items():
        print(f"[{'ok' if ok else 'FAILED'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
