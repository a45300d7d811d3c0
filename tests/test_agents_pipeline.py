"""The planner -> executor -> synthesizer pipeline, recorded event by event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentledger.agents import AgentConfig, AgentRunError, GuardrailLimits, run_agent
from agentledger.agents.models import ModelCallError, ModelRequest, ModelResponse, ScriptedModel
from agentledger.agents.testing import (
    event_kinds,
    json_answer,
    memory_ledger,
    pipeline_script,
    tool_call,
)
from agentledger.ledger import Ledger

QUESTION = "Is 13 June 2026 good for a harbour walk, and how do I get there from Central Station?"
WEATHER_ARGS = {"place": "Harbour Front", "date": "2026-06-13"}
ROUTE_ARGS = {"origin": "Central Station", "destination": "Harbour Front"}
WEATHER_ID = "weather:place:harbour:2026-06-13"
ROUTE_ID = "route:place:central-station->place:harbour:transit"
PLAN = {
    "steps": [
        {"goal": "weather at the harbour", "tool": "weather", "args": WEATHER_ARGS},
        {"goal": "route from the station", "tool": "transit", "args": ROUTE_ARGS},
    ],
    "needs_clarification": None,
}
ANSWER = f"Sunny [{WEATHER_ID}]; the tram takes 14 minutes [{ROUTE_ID}]."
EXECUTED = [
    "StepStarted",
    "ModelCalled",
    "ToolCalled",
    "ToolReturned",
    "DeltaApplied",
    "StepCompleted",
]


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def happy_models() -> dict[str, ScriptedModel]:
    """Scripted models for a two-step plan that answers with both evidence ids."""
    return pipeline_script(
        plan=PLAN, calls=[("weather", WEATHER_ARGS), ("transit", ROUTE_ARGS)], answer=ANSWER
    )


def payloads(ledger: Ledger, run_id: str, kind: str) -> list[dict[str, Any]]:
    """The payloads of one kind of event in a run, in order."""
    return [e.payload for e in ledger.events(run_id) if e.kind == kind]


def test_pipeline_records_plan_steps_deltas_and_answer_in_order(ledger: Ledger) -> None:
    """A two-step plan records policy, query seed, plan, two executed steps, synthesis."""
    result = run_agent(ledger, "pipeline", QUESTION, models=happy_models())
    assert event_kinds(ledger, result.run_id) == [
        "RunStarted",
        "PolicyDecided",
        "DeltaApplied",
        "StepStarted",
        "ModelCalled",
        "PlanProposed",
        "StepCompleted",
        *EXECUTED,
        *EXECUTED,
        "StepStarted",
        "ModelCalled",
        "StepCompleted",
        "SynthesisProduced",
        "RunCompleted",
    ]
    assert result.status == "answered"
    assert result.answer == ANSWER
    assert result.evidence_ids == (WEATHER_ID, ROUTE_ID)
    assert ledger.verify(result.run_id).ok


def test_pipeline_world_state_holds_results_snippets_and_evidence_by_id(book: Ledger) -> None:
    """Results and snippets are keyed by step id, evidence by call id, the query is seeded."""
    result = run_agent(book, "pipeline", QUESTION, models=happy_models())
    world = result.world_state
    assert world["query"] == {"raw": QUESTION}
    assert set(world["results"]) == {"step-2", "step-3"}
    assert world["results"]["step-2"]["data"]["condition"] == "sunny"
    assert world["results"]["step-3"]["data"]["duration_min"] == 14
    assert world["evidence"] == {"tool-1": [WEATHER_ID], "tool-2": [ROUTE_ID]}
    assert "errors" not in world
    assert world["snippets"]["step-2"].startswith("Weather at Harbour Front on 2026-06-13: sunny")


def test_pipeline_model_calls_carry_roles_prompts_and_conversations(book: Ledger) -> None:
    """Each ModelCalled names its role, prompt version and a conversation of plain dicts."""
    models = happy_models()
    result = run_agent(book, "pipeline", QUESTION, models=models)
    calls = payloads(book, result.run_id, "ModelCalled")
    assert [c["actor"] for c in calls] == ["planner", "executor", "executor", "synthesizer"]
    assert {c["prompt"]["name"] for c in calls} == {
        "pipeline.planner",
        "pipeline.executor",
        "pipeline.synthesizer",
    }
    history = book.conversation(calls[0]["messages_ref"])
    assert history[0]["role"] == "system"
    assert json.loads(history[1]["content"])["question"] == QUESTION
    executor_request = models["executor"].requests[0]
    assert {t["name"] for t in executor_request.tools} >= {"weather", "transit", "find_pois"}


def test_run_started_records_the_full_configuration_identity(book: Ledger) -> None:
    """RunStarted holds models by role, prompt refs, tool versions, code version, settings."""
    config = AgentConfig(seed=11, limits=GuardrailLimits(max_steps=5))
    result = run_agent(book, "pipeline", QUESTION, models=happy_models(), config=config)
    started = book.events(result.run_id)[0].payload
    identity = started["config"]
    assert started["input"] == {"question": QUESTION}
    assert set(identity["models"]) == {"planner", "executor", "synthesizer"}
    assert identity["models"]["planner"] == {
        "provider": "scripted",
        "model": "planner",
        "params": {"temperature": 0.0, "max_tokens": 1024},
    }
    assert identity["prompts"]["planner"]["version"] == "v1"
    assert identity["tools"]["weather"] == "1"
    assert identity["code_version"] != ""
    assert identity["settings"]["seed"] == 11
    assert identity["settings"]["limits"]["max_steps"] == 5
    assert identity["settings"]["options"] == {"tools": None}


def test_for_each_runs_one_step_per_value(book: Ledger) -> None:
    """A forEach step is executed once per value, each recorded as its own step."""
    plan = {
        "steps": [
            {
                "goal": "locate",
                "tool": "geocode",
                "args": {},
                "forEach": {"arg": "place", "values": ["Old Town", "Harbour Front"]},
            }
        ]
    }
    models = pipeline_script(
        plan=plan,
        calls=[("geocode", {"place": "Old Town"}), ("geocode", {"place": "Harbour Front"})],
        answer="Both found [place:old-town] [place:harbour].",
    )
    result = run_agent(book, "pipeline", "Where are the old town and the harbour?", models=models)
    started = [p for p in payloads(book, result.run_id, "StepStarted") if p["name"] == "execute"]
    assert [s["args"]["args"]["place"] for s in started] == ["Old Town", "Harbour Front"]
    assert result.evidence_ids == ("place:old-town", "place:harbour")


def test_bad_plan_json_is_retried_once_with_the_parse_error(book: Ledger) -> None:
    """Broken JSON trips strict_json (retry); the retry request quotes the parse error."""
    models = pipeline_script(
        plan=["Sure! Here is the plan: steps...", PLAN],
        calls=[("weather", WEATHER_ARGS), ("transit", ROUTE_ARGS)],
        answer=ANSWER,
    )
    result = run_agent(book, "pipeline", QUESTION, models=models)
    assert result.status == "answered"
    kinds = event_kinds(book, result.run_id)
    assert kinds[3:9] == [
        "StepStarted",
        "ModelCalled",
        "GuardrailTripped",
        "ModelCalled",
        "PlanProposed",
        "StepCompleted",
    ]
    trip = payloads(book, result.run_id, "GuardrailTripped")[0]
    assert (trip["guardrail"], trip["action"]) == ("strict_json", "retry")
    retry = models["planner"].requests[1].messages[-1].content
    assert "not valid JSON" in retry


def test_bad_plan_json_twice_ends_in_a_recorded_fallback(book: Ledger) -> None:
    """Two unparsable plans record retry then fallback trips and a polite fallback answer."""
    models = pipeline_script(plan=["not json", "[1, 2]"])
    result = run_agent(book, "pipeline", QUESTION, models=models)
    assert result.status == "fallback"
    assert "could not work out a plan" in result.answer
    trips = payloads(book, result.run_id, "GuardrailTripped")
    assert [(t["guardrail"], t["action"]) for t in trips] == [
        ("strict_json", "retry"),
        ("strict_json", "fallback"),
    ]
    assert "JSON list, not a JSON object" in trips[1]["message"]
    assert event_kinds(book, result.run_id)[-3:] == [
        "StepCompleted",
        "SynthesisProduced",
        "RunCompleted",
    ]
    assert book.events(result.run_id)[-1].payload["outcome"] == "fallback"


def test_a_failing_tool_lands_in_world_state_errors_keyed_by_step(book: Ledger) -> None:
    """A tool that fails records ok=false, an error keyed by step id, a failed step."""
    plan = {"steps": [{"goal": "find it", "tool": "geocode", "args": {"place": "Atlantis"}}]}
    models = pipeline_script(
        plan=plan, calls=[("geocode", {"place": "Atlantis"})], answer="I could not find Atlantis."
    )
    result = run_agent(book, "pipeline", "Where is Atlantis?", models=models)
    returned = payloads(book, result.run_id, "ToolReturned")[0]
    assert returned["ok"] is False
    assert returned["error"]["code"] == "not_found"
    assert result.world_state["errors"]["step-2"]["code"] == "not_found"
    completed = payloads(book, result.run_id, "StepCompleted")
    assert completed[1]["status"] == "failed"
    assert result.status == "answered"


def test_needs_clarification_short_circuits_to_a_question(book: Ledger) -> None:
    """A plan that needs clarification ends the run with ClarificationRequested."""
    models = pipeline_script(plan={"steps": [], "needs_clarification": "Which day do you mean?"})
    result = run_agent(book, "pipeline", "Is it good weather for a walk?", models=models)
    assert result.status == "clarification"
    assert result.answer == "Which day do you mean?"
    assert event_kinds(book, result.run_id)[-2:] == ["ClarificationRequested", "RunCompleted"]
    assert book.events(result.run_id)[-1].payload["outcome"] == "clarification"


def test_a_plan_longer_than_max_steps_is_truncated(book: Ledger) -> None:
    """max_steps trips with action truncate, and only that many steps execute."""
    config = AgentConfig(limits=GuardrailLimits(max_steps=1))
    models = pipeline_script(
        plan=PLAN, calls=[("weather", WEATHER_ARGS)], answer=f"Sunny [{WEATHER_ID}]."
    )
    result = run_agent(book, "pipeline", QUESTION, models=models, config=config)
    trips = payloads(book, result.run_id, "GuardrailTripped")
    assert [(t["guardrail"], t["action"], t["limit"], t["observed"]) for t in trips[:1]] == [
        ("max_steps", "truncate", 1, 2)
    ]
    assert len(payloads(book, result.run_id, "ToolCalled")) == 1


def test_an_unsupported_citation_is_reasked_once(book: Ledger) -> None:
    """An answer citing an id no tool returned trips evidence (reask); the rewrite is kept."""
    models = pipeline_script(
        plan=PLAN,
        calls=[("weather", WEATHER_ARGS), ("transit", ROUTE_ARGS)],
        answer=["Try [poi:made-up].", ANSWER],
    )
    result = run_agent(book, "pipeline", QUESTION, models=models)
    trips = payloads(book, result.run_id, "GuardrailTripped")
    assert [(t["guardrail"], t["action"], t["observed"]) for t in trips] == [
        ("evidence", "reask", ["poi:made-up"])
    ]
    assert result.answer == ANSWER
    correction = models["synthesizer"].requests[1].messages[-1].content
    assert "poi:made-up" in correction
    assert WEATHER_ID in correction


def test_a_citation_still_unsupported_after_reask_is_removed(book: Ledger) -> None:
    """A second unsupported answer trips evidence (remove) and the bad ids are stripped."""
    models = pipeline_script(
        plan=PLAN,
        calls=[("weather", WEATHER_ARGS), ("transit", ROUTE_ARGS)],
        answer=["Try [poi:made-up].", f"Sunny [{WEATHER_ID}] and [poi:still-fake]."],
    )
    result = run_agent(book, "pipeline", QUESTION, models=models)
    trips = payloads(book, result.run_id, "GuardrailTripped")
    assert [(t["guardrail"], t["action"]) for t in trips] == [
        ("evidence", "reask"),
        ("evidence", "remove"),
    ]
    assert result.answer == f"Sunny [{WEATHER_ID}] and."
    assert result.evidence_ids == (WEATHER_ID,)
    assert payloads(book, result.run_id, "SynthesisProduced")[0]["evidence_ids"] == [WEATHER_ID]


def test_extra_tool_calls_from_the_executor_are_ignored_and_recorded(book: Ledger) -> None:
    """An executor answering with two tool calls runs the first and trips one_tool_per_step."""
    both = tool_call("weather", WEATHER_ARGS).model_copy(
        update={
            "tool_calls": [
                *tool_call("weather", WEATHER_ARGS).tool_calls,
                *tool_call("transit", ROUTE_ARGS).tool_calls,
            ]
        }
    )
    plan = {"steps": [PLAN["steps"][0]]}  # type: ignore[index]
    models = pipeline_script(plan=plan, calls=[both], answer=f"Sunny [{WEATHER_ID}].")
    result = run_agent(book, "pipeline", QUESTION, models=models)
    trips = payloads(book, result.run_id, "GuardrailTripped")
    assert trips[0]["guardrail"] == "one_tool_per_step"
    assert trips[0]["observed"] == ["weather", "transit"]
    assert [p["tool"] for p in payloads(book, result.run_id, "ToolCalled")] == ["weather"]


def test_an_executor_that_calls_no_tool_records_an_error(book: Ledger) -> None:
    """A prose answer from the executor is an error in world state, not an exception."""
    plan = {"steps": [PLAN["steps"][0]]}  # type: ignore[index]
    models = pipeline_script(plan=plan, calls=["It is probably sunny."], answer="Unsure.")
    result = run_agent(book, "pipeline", QUESTION, models=models)
    assert result.world_state["errors"]["step-2"]["code"] == "no_tool_call"
    assert "ToolCalled" not in event_kinds(book, result.run_id)


def failing_model(name: str) -> ScriptedModel:
    """A model whose every call fails for good, as a vendor adapter reports it."""

    def fail(_: ModelRequest) -> ModelResponse:
        raise ModelCallError(
            provider="scripted",
            model=name,
            status_code=503,
            attempts=[],
            retryable=True,
            error_type="ServiceUnavailable",
            message="overloaded",
        )

    return ScriptedModel(fail, name=f"scripted:{name}")


def test_a_failed_model_call_is_recorded_with_its_error_then_falls_back(book: Ledger) -> None:
    """A ModelCallError becomes a ModelCalled with error and a recorded fallback answer."""
    models = {"default": failing_model("planner")}
    result = run_agent(book, "pipeline", QUESTION, models=models)
    call = payloads(book, result.run_id, "ModelCalled")[0]
    assert call["error"]["type"] == "ServiceUnavailable"
    assert call["finish_reason"] == "error"
    assert "response_ref" not in call
    assert result.status == "fallback"
    assert book.verify(result.run_id).ok


def test_a_script_that_runs_out_fails_the_run_loudly(book: Ledger) -> None:
    """ScriptExhaustedError records RunFailed and raises AgentRunError with the run id."""
    models = pipeline_script(plan=PLAN, calls=[("weather", WEATHER_ARGS)])
    with pytest.raises(AgentRunError) as caught:
        run_agent(book, "pipeline", QUESTION, models=models)
    run_id = caught.value.run_id
    kinds = event_kinds(book, run_id)
    assert kinds[-2:] == ["StepCompleted", "RunFailed"]
    failed = book.events(run_id)[-1].payload
    assert failed["error"]["type"] == "ScriptExhaustedError"
    assert book.run(run_id).status == "failed"
    assert book.verify(run_id).ok


def test_prompt_version_override_is_used_and_recorded(book: Ledger) -> None:
    """prompt_versions={'planner': 'v2'} sends the v2 text and records version v2."""
    models = happy_models()
    config = AgentConfig(prompt_versions={"planner": "v2"})
    result = run_agent(book, "pipeline", QUESTION, models=models, config=config)
    started = book.events(result.run_id)[0].payload
    assert started["config"]["prompts"]["planner"]["version"] == "v2"
    assert models["planner"].requests[0].messages[0].content.startswith("Plan tool steps")
    call = payloads(book, result.run_id, "ModelCalled")[0]
    assert call["prompt"]["version"] == "v2"


def test_the_planner_sees_the_tool_list_and_a_json_only_contract(book: Ledger) -> None:
    """The planner's system message lists the tools and asks for JSON only."""
    models = happy_models()
    run_agent(book, "pipeline", QUESTION, models=models)
    system = models["planner"].requests[0].messages[0].content
    assert "- weather(place, date): " in system
    assert "ONLY one minified JSON object" in system
    assert json_answer({"a": 1}) == '{"a":1}'
