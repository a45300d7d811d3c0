"""Seed 004 (Voice2Action): a DELEGATE / DONE coordinator over worker agents.

The coordinator delegates a weather lookup to the utility worker three times with the same
arguments: the repetition guard trips and nudges it. It then delegates a reminder to the office
worker (a terminal action) and says DONE. The action log lives in the world state, keyed by
action id. Offline.

    python examples/coordinator_workers.py [LEDGER_URL]      (default: memory://)
"""

from __future__ import annotations

import json
import sys

from agentledger.agents import run_agent
from agentledger.agents.testing import coordinator_script
from agentledger.ledger import Ledger

TRANSCRIPT = "Remind me at three on 13 June 2026 to walk at the harbour if it is dry."
WEATHER = {"place": "Harbour Front", "date": "2026-06-13"}
REMINDER = {"text": "Walk at the harbour", "when": "2026-06-13T15:00"}


def delegate(agent: str, task: str) -> dict[str, str]:
    return {"Action": "DELEGATE", "Agent": agent, "Task": task, "Summary": ""}


def main() -> int:
    check_weather = delegate("utility", "weather at Harbour Front on 2026-06-13")
    models = coordinator_script(
        decisions=[
            check_weather,
            check_weather,
            check_weather,
            delegate("office", "remind at 15:00 on 2026-06-13: walk at the harbour"),
            {
                "Action": "DONE",
                "Summary": "It will be dry [weather:place:harbour:2026-06-13]; reminder set "
                "for 15:00.",
            },
        ],
        workers={
            "utility": [("weather", WEATHER)] * 3,
            "office": [("create_reminder", REMINDER)],
        },
    )
    with Ledger.open(sys.argv[1] if len(sys.argv) > 1 else "memory://") as ledger:
        result = run_agent(ledger, "coordinator", TRANSCRIPT, models=models)
        print(f"answer: {result.answer}")
        print(f"action log: {json.dumps(result.world_state['actions'], indent=1)}")
        trips = [
            e.payload["guardrail"]
            for e in ledger.events(result.run_id)
            if e.kind == "GuardrailTripped"
        ]
        actions = result.world_state["actions"]
        checks = {
            "hash chain verifies": ledger.verify(result.run_id).ok,
            "the repetition guard nudged": trips == ["repetition"],
            "a reminder was created": any(a["tool"] == "create_reminder" for a in actions.values()),
            "no fallback note was needed": len(actions) == 4,
        }
    for name, ok in checks.items():
        print(f"[{'ok' if ok else 'FAILED'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
