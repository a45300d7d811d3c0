"""The REASON / THINK / TOOL loop, recorded event by event."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentledger.agents import run_agent
from agentledger.agents.testing import event_kinds, memory_ledger, reasoning_script
from agentledger.ledger import Ledger

PLAN = {"plan": ["TOOL", "ANSWER"], "needs_clarification": None}
DONE = {"tool": "", "args": {}}


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def test_reason_tool_answer_records_each_node(book: Ledger) -> None:
    """Plan, one tool choice, its result, 'done', the answer: in that order."""
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "calculator", "args": {"expression": "(12.5 + 7) * 3"}}, DONE],
        answer="(12.5 + 7) * 3 = 58.5",
    )
    result = run_agent(book, "reasoning", "What is (12.5 + 7) * 3?", models=models)
    assert event_kinds(book, result.run_id) == [
        "RunStarted",
        "PolicyDecided",
        "DeltaApplied",
        "StepStarted",
        "ModelCalled",
        "PlanProposed",
        "StepCompleted",
        "StepStarted",
        "ModelCalled",
        "StepCompleted",
        "StepStarted",
        "ToolCalled",
        "ToolReturned",
        "DeltaApplied",
        "StepCompleted",
        "StepStarted",
        "ModelCalled",
        "StepCompleted",
        "StepStarted",
        "ModelCalled",
        "StepCompleted",
        "SynthesisProduced",
        "RunCompleted",
    ]
    assert result.answer == "(12.5 + 7) * 3 = 58.5"
    assert result.world_state["results"]["step-3"]["data"] == {
        "expression": "(12.5 + 7) * 3",
        "result": 58.5,
    }
    names = [e.payload["name"] for e in book.events(result.run_id) if e.kind == "StepStarted"]
    assert names == ["reason:plan", "reason:select", "tool", "reason:select", "answer"]


def test_think_repairs_a_failed_tool_request(book: Ledger) -> None:
    """After a failure THINK proposes a repaired request, which runs next."""
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "geocode", "args": {"place": "Olde Towne"}}, DONE],
        repairs=[{"tool": "geocode", "args": {"place": "Old Town"}}],
        answer="Old Town is in the centre [place:old-town].",
    )
    result = run_agent(book, "reasoning", "Where is Olde Towne?", models=models)
    names = [e.payload["name"] for e in book.events(result.run_id) if e.kind == "StepStarted"]
    assert names == [
        "reason:plan",
        "reason:select",
        "tool",
        "think",
        "tool",
        "reason:select",
        "answer",
    ]
    think_request = models["thinker"].requests[0].messages[-1].content
    assert "not_found" in think_request
    assert "Olde Towne" in think_request
    assert result.world_state["errors"]["step-3"]["code"] == "not_found"
    assert result.world_state["evidence"] == {"tool-2": ["place:old-town"]}
    assert result.evidence_ids == ("place:old-town",)


def test_think_can_give_up_and_hand_back_to_reason(book: Ledger) -> None:
    """An empty repair means no retry: REASON chooses again."""
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "calculator", "args": {"expression": "1/0"}}, DONE],
        repairs=[DONE],
        answer="Division by zero is undefined.",
    )
    result = run_agent(book, "reasoning", "What is 1/0?", models=models)
    assert event_kinds(book, result.run_id).count("ToolCalled") == 1
    assert len(models["reasoner"].requests) == 3
    assert result.status == "answered"


def test_reasoning_plan_can_ask_for_clarification(book: Ledger) -> None:
    """needs_clarification in REASON's plan ends the run with the question."""
    models = reasoning_script(plan={"plan": [], "needs_clarification": "Which city?"})
    result = run_agent(book, "reasoning", "How far is it?", models=models)
    assert result.status == "clarification"
    assert event_kinds(book, result.run_id)[-2:] == ["ClarificationRequested", "RunCompleted"]


def test_a_bad_tool_choice_after_one_retry_falls_back(book: Ledger) -> None:
    """Two unparsable tool choices end in the recorded fallback answer."""
    models = reasoning_script(plan=PLAN, choices=["calculator please", "{'tool': 1}"])
    result = run_agent(book, "reasoning", "2+2?", models=models)
    assert result.status == "fallback"
    trips = [
        (e.payload["guardrail"], e.payload["action"])
        for e in book.events(result.run_id)
        if e.kind == "GuardrailTripped"
    ]
    assert trips == [("strict_json", "retry"), ("strict_json", "fallback")]


def test_a_fenced_or_double_encoded_json_answer_is_accepted(book: Ledger) -> None:
    """A JSON object inside a code fence, or inside a JSON string, parses without a retry."""
    fenced = '```json\n{"plan": ["TOOL"]}\n```'
    double = '"{\\"tool\\": \\"\\", \\"args\\": {}}"'
    models = reasoning_script(plan=fenced, choices=[double], answer="Nothing to compute.")
    result = run_agent(book, "reasoning", "Hi", models=models)
    assert "GuardrailTripped" not in event_kinds(book, result.run_id)
    assert result.status == "answered"
