"""The DELEGATE / DONE coordinator over worker agents, recorded event by event."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentledger.agents import AgentConfig, GuardrailLimits, run_agent
from agentledger.agents.testing import coordinator_script, event_kinds, memory_ledger
from agentledger.ledger import Ledger

WEATHER = {"place": "Harbour Front", "date": "2026-06-13"}
WEATHER_ID = "weather:place:harbour:2026-06-13"
REMINDER = {"text": "Harbour walk", "when": "2026-06-13T15:00"}


def delegate(agent: str, task: str) -> dict[str, str]:
    """A DELEGATE decision."""
    return {"Action": "DELEGATE", "Agent": agent, "Task": task, "Summary": ""}


def done(summary: str) -> dict[str, str]:
    """A DONE decision."""
    return {"Action": "DONE", "Agent": "", "Task": "", "Summary": summary}


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def payloads(ledger: Ledger, run_id: str, kind: str) -> list[dict[str, Any]]:
    """The payloads of one kind of event in a run."""
    return [e.payload for e in ledger.events(run_id) if e.kind == kind]


def test_delegations_run_one_worker_tool_each_and_done_answers(book: Ledger) -> None:
    """Two delegations (lookup, then a reminder) and DONE; the action log has both."""
    models = coordinator_script(
        decisions=[
            delegate("utility", "weather at Harbour Front on 2026-06-13"),
            delegate("office", "remind me at 15:00 on 2026-06-13 to walk at the harbour"),
            done(f"Sunny [{WEATHER_ID}]; reminder set for 15:00."),
        ],
        workers={"utility": [("weather", WEATHER)], "office": [("create_reminder", REMINDER)]},
    )
    question = "Check the harbour weather on 13 June 2026 and remind me to walk at 15:00."
    result = run_agent(book, "coordinator", question, models=models)
    delegated = [
        "StepStarted",
        "ModelCalled",
        "ToolCalled",
        "ToolReturned",
        "DeltaApplied",
        "StepCompleted",
    ]
    coordinated = ["StepStarted", "ModelCalled", "StepCompleted"]
    assert event_kinds(book, result.run_id) == [
        "RunStarted",
        "PolicyDecided",
        "DeltaApplied",
        *coordinated,
        *delegated,
        *coordinated,
        *delegated,
        *coordinated,
        "SynthesisProduced",
        "RunCompleted",
    ]
    actions = result.world_state["actions"]
    assert list(actions) == ["action-1", "action-2"]
    assert actions["action-1"]["tool"] == "weather"
    assert actions["action-2"] == {
        "agent": "office",
        "task": "remind me at 15:00 on 2026-06-13 to walk at the harbour",
        "ok": True,
        "tool": "create_reminder",
        "args": REMINDER,
    }
    assert result.answer == f"Sunny [{WEATHER_ID}]; reminder set for 15:00."
    assert result.evidence_ids == (WEATHER_ID,)
    worker_request = models["worker:utility"].requests[0]
    assert {t["name"] for t in worker_request.tools} == {
        "geocode",
        "weather",
        "transit",
        "find_pois",
        "calculator",
    }
    feedback = models["coordinator"].requests[1].messages[-1].content
    assert feedback.startswith("Result from utility:")


def test_the_coordinator_prompt_holds_the_catalog_not_tool_names(book: Ledger) -> None:
    """The coordinator sees the worker catalog; tool names stay out of its prompt."""
    models = coordinator_script(
        decisions=[delegate("office", "note it"), done("Noted.")],
        workers={"office": [("add_note", {"text": "it"})]},
    )
    run_agent(book, "coordinator", "Note it", models=models)
    system = models["coordinator"].requests[0].messages[0].content
    assert "- utility: looks things up" in system
    assert "- office: acts" in system
    assert "find_pois" not in system
    assert '"Action":"DELEGATE|DONE"' in system


def test_repeated_identical_retrievals_trip_the_guard_and_nudge(book: Ledger) -> None:
    """The third identical weather lookup records GuardrailTripped(repetition) and a nudge."""
    ask = delegate("utility", "weather again")
    models = coordinator_script(
        decisions=[ask, ask, ask, done(f"Sunny [{WEATHER_ID}].")],
        workers={"utility": [("weather", WEATHER)] * 3, "office": [("add_note", {"text": "x"})]},
    )
    result = run_agent(
        book, "coordinator", "Weather at the harbour on 13 June 2026?", models=models
    )
    trips = payloads(book, result.run_id, "GuardrailTripped")
    repetition = [t for t in trips if t["guardrail"] == "repetition"]
    assert len(repetition) == 1
    assert (repetition[0]["action"], repetition[0]["limit"], repetition[0]["observed"]) == (
        "nudge",
        3,
        3,
    )
    nudge = models["coordinator"].requests[3].messages[-1].content
    assert "requested this same weather lookup 3 times" in nudge


def test_no_terminal_action_triggers_the_fallback_note_with_autofilled_text(book: Ledger) -> None:
    """Without a create/send/update action the orchestrator adds a note of the request."""
    models = coordinator_script(
        decisions=[delegate("utility", "weather"), done(f"Sunny [{WEATHER_ID}].")],
        workers={"utility": [("weather", WEATHER)], "office": []},
    )
    question = "Weather at the harbour on 13 June 2026?"
    result = run_agent(book, "coordinator", question, models=models)
    kinds = event_kinds(book, result.run_id)
    assert kinds[-8:] == [
        "StepStarted",
        "GuardrailTripped",
        "ToolCalled",
        "ToolReturned",
        "DeltaApplied",
        "StepCompleted",
        "SynthesisProduced",
        "RunCompleted",
    ]
    trip = payloads(book, result.run_id, "GuardrailTripped")[0]
    assert (trip["guardrail"], trip["action"]) == ("terminal_intent", "fallback_action")
    note = payloads(book, result.run_id, "ToolCalled")[-1]
    assert (note["tool"], note["arguments"]) == ("add_note", {"text": question})
    assert result.world_state["actions"]["action-2"]["agent"] == "orchestrator"


def test_a_worker_fallback_call_with_empty_arguments_is_autofilled(book: Ledger) -> None:
    """A worker calling the fallback tool with an empty body gets it filled from the request."""
    models = coordinator_script(
        decisions=[delegate("office", "keep a note of this"), done("Noted.")],
        workers={"office": [("add_note", {"text": ""})]},
    )
    result = run_agent(book, "coordinator", "Bring umbrellas to the picnic", models=models)
    called = payloads(book, result.run_id, "ToolCalled")
    assert [c["arguments"] for c in called] == [{"text": "Bring umbrellas to the picnic"}]


def test_delegating_to_an_unknown_worker_is_reported_back(book: Ledger) -> None:
    """An unknown worker is logged as a failed action and told to the coordinator."""
    models = coordinator_script(
        decisions=[delegate("travel", "book a flight"), done("I cannot book flights.")],
        workers={"office": [("add_note", {"text": "flight"})]},
    )
    result = run_agent(book, "coordinator", "Book a flight", models=models)
    assert result.world_state["actions"]["action-1"]["ok"] is False
    assert "no worker called 'travel'" in result.world_state["errors"]["action-1"]["message"]
    told = models["coordinator"].requests[1].messages[-1].content
    assert told.startswith("Delegation failed:")


def test_the_coordinator_loop_is_bounded_by_max_steps(book: Ledger) -> None:
    """A coordinator that never says DONE is stopped by max_steps and falls back."""
    ask = delegate("utility", "compute")
    models = coordinator_script(
        decisions=[ask, ask],
        workers={"utility": [("calculator", {"expression": "1+1"})] * 2, "office": []},
    )
    config = AgentConfig(limits=GuardrailLimits(max_steps=2))
    result = run_agent(book, "coordinator", "1+1", models=models, config=config)
    trips = [
        (t["guardrail"], t["action"]) for t in payloads(book, result.run_id, "GuardrailTripped")
    ]
    assert trips == [("max_steps", "stop"), ("terminal_intent", "fallback_action")]
    assert result.status == "fallback"
    assert "did not reach DONE" in result.answer


def test_invalid_coordinator_json_is_retried_with_the_error(book: Ledger) -> None:
    """A decision with an unknown Action fails validation, is retried, then accepted."""
    models = coordinator_script(
        decisions=[{"Action": "MAYBE"}, done("Nothing to do.")],
        workers={"office": [("add_note", {"text": "x"})]},
    )
    result = run_agent(book, "coordinator", "Anything?", models=models)
    retry = models["coordinator"].requests[1].messages[-1].content
    assert "Action" in retry
    assert "does not match the contract" in retry
    assert result.answer == "Nothing to do."


def test_a_done_summary_citing_unknown_evidence_is_reasked(book: Ledger) -> None:
    """The DONE summary is held to the evidence discipline like any answer."""
    models = coordinator_script(
        decisions=[
            delegate("utility", "weather"),
            done("Sunny [weather:somewhere-else]."),
            done(f"Sunny [{WEATHER_ID}]."),
        ],
        workers={"utility": [("weather", WEATHER)], "office": []},
    )
    result = run_agent(
        book, "coordinator", "Weather on 13 June 2026 at the harbour?", models=models
    )
    trips = [
        (t["guardrail"], t["action"]) for t in payloads(book, result.run_id, "GuardrailTripped")
    ]
    assert ("evidence", "reask") in trips
    assert result.answer == f"Sunny [{WEATHER_ID}]."
