"""The router: a budgeted router plan, specialists as tools, grounded chat."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentledger.agents import AgentConfig, run_agent
from agentledger.agents.testing import event_kinds, memory_ledger, router_script
from agentledger.ledger import Ledger

RETRIEVE = {"agent": "retriever", "args": {"near": "Old Town", "category": "cafe", "limit": 2}}
WEATHER = {"agent": "weather", "args": {"place": "Old Town", "date": "2026-06-13"}}
ROUTE = {"agent": "routing", "args": {"origin": "Central Station", "destination": "Old Town"}}
QUESTION = "A cafe in Old Town on 13 June 2026, the weather, and how to get there?"


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def payloads(ledger: Ledger, run_id: str, kind: str) -> list[dict[str, Any]]:
    """The payloads of one kind of event in a run."""
    return [e.payload for e in ledger.events(run_id) if e.kind == kind]


def cafe_ids() -> list[str]:
    """The evidence ids find_pois returns for the retriever step."""
    from agentledger.tools import builtin_registry

    data = builtin_registry().call("find_pois", RETRIEVE["args"]).data
    assert isinstance(data, dict)
    ids = data["evidence_ids"]
    assert isinstance(ids, list)
    return [str(i) for i in ids]


def test_router_runs_planned_specialists_then_chat(book: Ledger) -> None:
    """A three-specialist plan: route, three tool steps, chat, answer."""
    first = cafe_ids()[0]
    plan = {"router_plan": [RETRIEVE, WEATHER, ROUTE, {"agent": "chat"}], "risk_tags": []}
    models = router_script(plan=plan, answer=f"Try [{first}].")
    result = run_agent(book, "router", QUESTION, models=models)
    specialist = ["StepStarted", "ToolCalled", "ToolReturned", "DeltaApplied", "StepCompleted"]
    assert event_kinds(book, result.run_id) == [
        "RunStarted",
        "PolicyDecided",
        "DeltaApplied",
        "StepStarted",
        "ModelCalled",
        "PlanProposed",
        "StepCompleted",
        *specialist,
        *specialist,
        *specialist,
        "StepStarted",
        "ModelCalled",
        "StepCompleted",
        "SynthesisProduced",
        "RunCompleted",
    ]
    names = [p["name"] for p in payloads(book, result.run_id, "StepStarted")]
    assert names == ["route", "agent:retriever", "agent:weather", "agent:routing", "chat"]
    assert [p["tool"] for p in payloads(book, result.run_id, "ToolCalled")] == [
        "find_pois",
        "weather",
        "transit",
    ]
    assert result.evidence_ids == (first,)
    brief = models["chat"].requests[0].messages[-1].content
    assert first in brief


def test_an_exhausted_router_budget_stops_gracefully(book: Ledger) -> None:
    """Past the budget the router records router_budget (stop) and chat answers anyway."""
    plan = {"router_plan": [RETRIEVE, WEATHER, ROUTE]}
    models = router_script(plan=plan, answer="Only the cafes are known so far.")
    config = AgentConfig(options={"budget": 1})
    result = run_agent(book, "router", QUESTION, models=models, config=config)
    trip = payloads(book, result.run_id, "GuardrailTripped")[0]
    assert (trip["guardrail"], trip["action"], trip["limit"], trip["observed"]) == (
        "router_budget",
        "stop",
        1,
        3,
    )
    assert len(payloads(book, result.run_id, "ToolCalled")) == 1
    assert result.status == "answered"


def test_chat_citing_a_place_no_tool_returned_is_corrected(book: Ledger) -> None:
    """Evidence discipline: the chat's invented id trips evidence, then it is removed."""
    models = router_script(
        plan={"router_plan": [RETRIEVE]},
        answer=["Visit [poi:invented].", "Visit [poi:invented-again]."],
    )
    result = run_agent(book, "router", QUESTION, models=models)
    trips = [
        (t["guardrail"], t["action"]) for t in payloads(book, result.run_id, "GuardrailTripped")
    ]
    assert trips == [("evidence", "reask"), ("evidence", "remove")]
    assert result.answer == "Visit."
    assert result.evidence_ids == ()


def test_router_clarification_bypasses_the_plan(book: Ledger) -> None:
    """needs_clarification asks the follow-up question at once."""
    models = router_script(plan={"router_plan": [], "needs_clarification": "Which day?"})
    result = run_agent(book, "router", "Is it nice out?", models=models)
    assert result.answer == "Which day?"
    assert "ToolCalled" not in event_kinds(book, result.run_id)


def test_an_unknown_specialist_is_an_error_in_world_state(book: Ledger) -> None:
    """A planned agent with no tool is skipped with an error keyed by its step."""
    models = router_script(plan={"router_plan": [{"agent": "admin_cms"}]}, answer="Nothing.")
    result = run_agent(book, "router", "Import everything", models=models)
    assert result.world_state["errors"]["step-2"]["code"] == "unknown_specialist"
