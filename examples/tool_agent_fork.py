"""Seed 003 (Tantra): a tool-calling agent with an agent-as-tool, hooks, usage, and a fork.

The agent asks its "scout" sub-agent (exposed as the tool ask_scout) to find a cafe; the scout's
own model calls and tool calls are recorded inline, between ask_scout's ToolCalled and
ToolReturned. Event hooks print each call as it is recorded. Then the conversation is forked into
a new run linked to the parent (relation "fork"), which continues with a different question.
Offline.

    python examples/tool_agent_fork.py [LEDGER_URL]      (default: memory://)
"""

from __future__ import annotations

import sys
from typing import Any

from agentledger.agents import (
    AgentConfig,
    ModelCallInfo,
    RunHooks,
    ToolCallInfo,
    fork_agent,
    run_agent,
)
from agentledger.agents.testing import tool_agent_script
from agentledger.ledger import Ledger

SCOUT: dict[str, Any] = {
    "name": "scout",
    "description": "finds places to eat and drink",
    "instructions": "Find places with the find_pois tool.",
    "tools": ["find_pois"],
}


def on_model(info: ModelCallInfo) -> None:
    print(f"  hook: model call by {info.role} at position {info.position}")


def on_tool(info: ToolCallInfo) -> None:
    print(f"  hook: tool {info.name} ok={info.result.ok}")


def main() -> int:
    models = tool_agent_script(
        turns=[
            ("ask_scout", {"task": "a cafe near the harbour"}),
            "Café Brasa is the closest cafe to the harbour [poi:cafe-brasa].",
        ],
        sub_agents={
            "scout": [
                ("find_pois", {"near": "Harbour Front", "category": "cafe", "limit": 1}),
                "Café Brasa [poi:cafe-brasa]",
            ]
        },
    )
    config = AgentConfig(options={"sub_agents": [SCOUT]})
    hooks = RunHooks(on_model_call=on_model, on_tool_call=on_tool)
    with Ledger.open(sys.argv[1] if len(sys.argv) > 1 else "memory://") as ledger:
        parent = run_agent(
            ledger,
            "tools",
            "Where can I get coffee by the harbour?",
            models=models,
            config=config,
            hooks=hooks,
        )
        print(f"answer: {parent.answer}")
        print(f"usage: {parent.usage.total_tokens} tokens in {parent.usage.model_calls} calls")
        fork_models = tool_agent_script(
            turns=["It opens early; check its hours in the list above."], sub_agents={"scout": []}
        )
        child = fork_agent(ledger, parent.run_id, "Is it open early?", models=fork_models)
        started = ledger.events(child.run_id)[0].payload
        print(f"fork {child.run_id}: {started['relation']} of {started['parent_run_id']}")
        print(f"fork answer: {child.answer}")
        actors = [
            e.payload["actor"] for e in ledger.events(parent.run_id) if e.kind == "ModelCalled"
        ]
        checks = {
            "both hash chains verify": ledger.verify(parent.run_id).ok
            and ledger.verify(child.run_id).ok,
            "the sub-agent's calls are recorded inline": "agent:scout" in actors,
            "the fork links to its parent": started["parent_run_id"] == parent.run_id,
            "the fork carries the conversation": len(started["input"]["history"]) >= 4,
        }
    for name, ok in checks.items():
        print(f"[{'ok' if ok else 'FAILED'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
