"""The tool-calling agent: its loop, agent-as-tool recorded inline, and forks as linked runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentledger.agents import (
    AgentConfig,
    ForkRefusedError,
    GuardrailLimits,
    fork_agent,
    run_agent,
)
from agentledger.agents.testing import (
    event_kinds,
    memory_ledger,
    pipeline_script,
    tool_agent_script,
)
from agentledger.ledger import Ledger

SCOUT: dict[str, Any] = {
    "name": "scout",
    "description": "finds places",
    "tools": ["find_pois", "geocode"],
}
CAFE_ID = "poi:cafe-brasa"


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def payloads(ledger: Ledger, run_id: str, kind: str) -> list[dict[str, Any]]:
    """The payloads of one kind of event in a run."""
    return [e.payload for e in ledger.events(run_id) if e.kind == kind]


def test_the_loop_calls_tools_until_the_model_answers(book: Ledger) -> None:
    """A tool turn then a text turn: the tool result goes back as a tool message."""
    models = tool_agent_script(turns=[("calculator", {"expression": "6*7"}), "6 x 7 = 42."])
    result = run_agent(book, "tools", "What is 6 times 7?", models=models)
    assert event_kinds(book, result.run_id) == [
        "RunStarted",
        "PolicyDecided",
        "StepStarted",
        "ModelCalled",
        "ToolCalled",
        "ToolReturned",
        "DeltaApplied",
        "StepCompleted",
        "StepStarted",
        "ModelCalled",
        "StepCompleted",
        "SynthesisProduced",
        "RunCompleted",
    ]
    assert result.answer == "6 x 7 = 42."
    second = models["agent"].requests[1].messages
    assert [m.role for m in second] == ["system", "user", "assistant", "tool"]
    assert second[-1].tool_call_id == "call_1"
    assert '"result": 42' in second[-1].content
    assert result.world_state["results"]["tool-1"]["data"]["result"] == 42


def test_a_sub_agent_runs_inline_as_a_tool_with_its_own_actor(book: Ledger) -> None:
    """ask_scout is one ToolCalled; the inner agent's events come before its ToolReturned.

    Its model calls have actor agent:scout and its steps parent_step_id = the outer turn.
    """
    models = tool_agent_script(
        turns=[("ask_scout", {"task": "a cafe near the harbour"}), f"Try Café Brasa [{CAFE_ID}]."],
        sub_agents={
            "scout": [
                ("find_pois", {"near": "Harbour Front", "category": "cafe"}),
                f"Café Brasa [{CAFE_ID}]",
            ]
        },
    )
    config = AgentConfig(options={"sub_agents": [SCOUT]})
    result = run_agent(book, "tools", "Coffee near the harbour?", models=models, config=config)
    events = book.events(result.run_id)
    called = [e for e in events if e.kind == "ToolCalled"]
    assert [c.payload["tool"] for c in called] == ["ask_scout", "find_pois"]
    returned = [e for e in events if e.kind == "ToolReturned"]
    assert returned[-1].payload["call_id"] == "tool-1"
    assert returned[-1].payload["data"] == {"agent": "scout", "answer": f"Café Brasa [{CAFE_ID}]"}
    assert called[0].position < called[1].position < returned[-1].position
    actors = [e.payload["actor"] for e in events if e.kind == "ModelCalled"]
    assert actors == ["agent", "agent:scout", "agent:scout", "agent"]
    inner = [
        e.payload for e in events if e.kind == "StepStarted" and e.payload["name"] != "agent:turn"
    ]
    assert {s["parent_step_id"] for s in inner} == {"step-1"}
    assert result.evidence_ids == (CAFE_ID,)
    assert {t["name"] for t in models["agent:scout"].requests[0].tools} == {"find_pois", "geocode"}
    assert "ask_scout" in {t["name"] for t in models["agent"].requests[0].tools}
    started = events[0].payload["config"]
    assert set(started["models"]) == {"agent", "agent:scout"}
    assert started["prompts"]["agent:scout"]["name"] == "tools.subagent"


def test_a_sub_agent_call_without_a_task_is_a_failed_tool_result(book: Ledger) -> None:
    """ask_scout({}) fails as invalid arguments without running the inner agent."""
    models = tool_agent_script(
        turns=[("ask_scout", {}), "I could not ask."], sub_agents={"scout": []}
    )
    config = AgentConfig(options={"sub_agents": [SCOUT]})
    result = run_agent(book, "tools", "Anything?", models=models, config=config)
    returned = payloads(book, result.run_id, "ToolReturned")[0]
    assert returned["error"]["code"] == "invalid_arguments"


def test_max_iterations_stops_an_agent_that_keeps_calling_tools(book: Ledger) -> None:
    """Tool calls on every turn trip max_steps after max_iterations and fall back."""
    turn = ("calculator", {"expression": "1+1"})
    models = tool_agent_script(turns=[turn, turn])
    config = AgentConfig(options={"max_iterations": 2})
    result = run_agent(book, "tools", "1+1 forever", models=models, config=config)
    trips = payloads(book, result.run_id, "GuardrailTripped")
    assert [(t["guardrail"], t["limit"]) for t in trips] == [("max_steps", 2)]
    assert result.status == "fallback"
    assert "1+1 = 2" in result.answer


def test_a_fork_is_a_new_run_linked_to_its_parent_with_the_copied_conversation(
    book: Ledger,
) -> None:
    """fork_agent starts a relation=fork run continuing a copy of the conversation.

    It links to the parent's last finished turn; the parent run is unchanged.
    """
    parent = run_agent(
        book,
        "tools",
        "What is 6 times 7?",
        models=tool_agent_script(turns=[("calculator", {"expression": "6*7"}), "42."]),
    )
    before = [e.hash for e in book.events(parent.run_id)]
    models = tool_agent_script(turns=["And doubled, 84."])
    child = fork_agent(book, parent.run_id, "And doubled?", models=models)
    started = book.events(child.run_id)[0].payload
    assert started["relation"] == "fork"
    assert started["parent_run_id"] == parent.run_id
    turn = [e for e in book.events(parent.run_id) if e.kind == "ModelCalled"][-1]
    assert started["parent_position"] == turn.position
    assert [m["role"] for m in started["input"]["history"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    sent = models["agent"].requests[0].messages
    assert [m.content for m in sent[-2:]] == ["42.", "And doubled?"]
    assert child.answer == "And doubled, 84."
    assert [e.hash for e in book.events(parent.run_id)] == before
    assert book.verify(child.run_id).ok


def test_two_forks_of_one_run_are_independent(book: Ledger) -> None:
    """Forking twice gives two runs that share the parent's history but not each other's."""
    parent = run_agent(book, "tools", "Say hi", models=tool_agent_script(turns=["Hi."]))
    one = fork_agent(book, parent.run_id, "In French?", models=tool_agent_script(turns=["Salut."]))
    two = fork_agent(book, parent.run_id, "In Dutch?", models=tool_agent_script(turns=["Hoi."]))
    histories = [book.events(run.run_id)[0].payload["input"]["history"] for run in (one, two)]
    assert histories[0] == histories[1]
    assert (one.answer, two.answer) == ("Salut.", "Hoi.")


def test_only_conversational_runs_can_be_forked(book: Ledger) -> None:
    """Forking a pipeline run is refused with a reason."""
    plan = {"steps": [], "needs_clarification": "Which?"}
    run = run_agent(book, "pipeline", "Which?", models=pipeline_script(plan=plan))
    with pytest.raises(ForkRefusedError, match="keeps no single conversation"):
        fork_agent(book, run.run_id, "More", models=tool_agent_script(turns=[]))


def test_tool_agent_tool_subset_limits_what_the_model_is_offered(book: Ledger) -> None:
    """options.tools restricts the offered schemas (sub-agents are still offered)."""
    models = tool_agent_script(turns=["ok"], sub_agents={"scout": []})
    config = AgentConfig(
        options={"tools": ["calculator"], "sub_agents": [SCOUT]},
        limits=GuardrailLimits(max_steps=3),
    )
    run_agent(book, "tools", "hi", models=models, config=config)
    assert [t["name"] for t in models["agent"].requests[0].tools] == ["calculator", "ask_scout"]


def test_a_halt_inside_a_sub_agent_still_closes_its_tool_call(book: Ledger) -> None:
    """A token budget hit by the inner agent records ToolReturned(halted), then the fallback."""
    models = tool_agent_script(
        turns=[("ask_scout", {"task": "a cafe"})], sub_agents={"scout": ["unused"]}
    )
    config = AgentConfig(options={"sub_agents": [SCOUT]}, limits=GuardrailLimits(token_budget=10))
    result = run_agent(book, "tools", "Coffee?", models=models, config=config)
    assert event_kinds(book, result.run_id)[4:] == [
        "ToolCalled",
        "StepStarted",
        "GuardrailTripped",
        "StepCompleted",
        "ToolReturned",
        "StepCompleted",
        "SynthesisProduced",
        "RunCompleted",
    ]
    returned = payloads(book, result.run_id, "ToolReturned")[0]
    assert (returned["ok"], returned["error"]["code"]) == (False, "halted")
    assert result.status == "stopped"
    assert len(models["agent:scout"].requests) == 0


def test_a_fork_can_start_from_an_earlier_turn_or_is_refused_before_any(book: Ledger) -> None:
    """at_position picks the last finished turn at or before it; none there is refused."""
    first = run_agent(book, "tools", "Say hi", models=tool_agent_script(turns=["Hi."]))
    turn = next(e for e in book.events(first.run_id) if e.kind == "ModelCalled")
    child = fork_agent(
        book,
        first.run_id,
        "Again?",
        models=tool_agent_script(turns=["Hi again."]),
        at_position=turn.position,
    )
    assert book.events(child.run_id)[0].payload["parent_position"] == turn.position
    with pytest.raises(ForkRefusedError, match="no finished turn"):
        fork_agent(book, first.run_id, "x", models=tool_agent_script(turns=[]), at_position=2)
