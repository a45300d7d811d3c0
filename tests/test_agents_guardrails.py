"""Every guardrail trips where it should, and each trip is a recorded GuardrailTripped event."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentledger.agents import (
    AgentConfig,
    GuardrailLimits,
    ModelCallInfo,
    RunHooks,
    ToolCallInfo,
    run_agent,
)
from agentledger.agents.testing import (
    event_kinds,
    memory_ledger,
    pipeline_script,
    reasoning_script,
)
from agentledger.ledger import Ledger
from agentledger.tools import BUILTIN_TOOLS, ToolRegistry, tool

PLAN = {"plan": ["TOOL", "ANSWER"]}
DONE = {"tool": "", "args": {}}


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def trips(ledger: Ledger, run_id: str) -> list[tuple[str, str]]:
    """(guardrail, action) of every GuardrailTripped in a run."""
    return [
        (e.payload["guardrail"], e.payload["action"])
        for e in ledger.events(run_id)
        if e.kind == "GuardrailTripped"
    ]


def trip_payload(ledger: Ledger, run_id: str, guardrail: str) -> dict[str, Any]:
    """The first GuardrailTripped payload of ``guardrail``."""
    return next(
        e.payload
        for e in ledger.events(run_id)
        if e.kind == "GuardrailTripped" and e.payload["guardrail"] == guardrail
    )


def limits(**values: Any) -> AgentConfig:
    """A config with these guardrail limits."""
    return AgentConfig(limits=GuardrailLimits(**values))


@tool(result_type="lookup")
def slow_lookup(key: str) -> dict[str, str]:
    """Look a key up slowly (a stand-in for a slow remote service).

    Args:
        key: What to look up.
    """
    time.sleep(0.05)
    return {"key": key, "evidence_id": f"slow:{key}"}


@tool(result_type="lookup")
def broken_lookup(key: str) -> dict[str, str]:
    """Look a key up, but always fail with an exception.

    Args:
        key: What to look up.
    """
    msg = f"the index for {key!r} is corrupt"
    raise ValueError(msg)


def registry() -> ToolRegistry:
    """The built-in tools plus a slow and a broken one."""
    return ToolRegistry([*BUILTIN_TOOLS, slow_lookup, broken_lookup])


def test_a_tool_exception_is_a_failed_result_not_a_crash(book: Ledger) -> None:
    """A tool raising ValueError records ToolReturned(ok=false, code=ValueError)."""
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "broken_lookup", "args": {"key": "a"}}, DONE],
        repairs=[DONE],
        answer="The index is broken.",
    )
    result = run_agent(book, "reasoning", "Look up a", models=models, tools=registry())
    returned = next(e.payload for e in book.events(result.run_id) if e.kind == "ToolReturned")
    assert returned["ok"] is False
    assert returned["error"] == {"code": "ValueError", "message": "the index for 'a' is corrupt"}
    assert result.world_state["errors"]["step-3"]["code"] == "ValueError"
    assert result.status == "answered"


def test_a_tool_above_the_risk_limit_is_refused_before_it_is_called(book: Ledger) -> None:
    """send_message (high risk) under max_tool_risk=medium trips and records no ToolCalled."""
    args = {"to": "sam", "subject": "hi", "body": "hello"}
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "send_message", "args": args}, DONE],
        repairs=[DONE],
        answer="I was not allowed to send it.",
    )
    result = run_agent(book, "reasoning", "Tell Sam hello", models=models)
    assert ("max_tool_risk", "refuse") in trips(book, result.run_id)
    assert "ToolCalled" not in event_kinds(book, result.run_id)
    payload = trip_payload(book, result.run_id, "max_tool_risk")
    assert (payload["limit"], payload["observed"]) == ("medium", "high")
    assert result.world_state["errors"]["step-3"]["code"] == "refused:max_tool_risk"


def test_a_raised_risk_limit_lets_the_tool_run(book: Ledger) -> None:
    """With max_tool_risk=high the same call runs and is recorded as effectful."""
    args = {"to": "sam", "subject": "hi", "body": "hello"}
    models = reasoning_script(
        plan=PLAN, choices=[{"tool": "send_message", "args": args}, DONE], answer="Sent."
    )
    config = limits(max_tool_risk="high")
    result = run_agent(book, "reasoning", "Tell Sam hello", models=models, config=config)
    called = next(e.payload for e in book.events(result.run_id) if e.kind == "ToolCalled")
    assert (called["risk"], called["effectful"]) == ("high", True)


def test_a_slow_tool_over_the_latency_cap_is_discarded_as_a_failure(book: Ledger) -> None:
    """A 50 ms tool under a 5 ms cap records its result, then trips and counts as failed."""
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "slow_lookup", "args": {"key": "k"}}, DONE],
        repairs=[DONE],
        answer="Too slow.",
    )
    config = limits(tool_latency_cap_ms=5.0)
    result = run_agent(
        book, "reasoning", "Look up k", models=models, tools=registry(), config=config
    )
    kinds = event_kinds(book, result.run_id)
    at = kinds.index("ToolReturned")
    assert kinds[at + 1] == "GuardrailTripped"
    payload = trip_payload(book, result.run_id, "tool_latency_cap_ms")
    assert payload["action"] == "discard_result"
    assert payload["limit"] == 5.0
    assert payload["observed"] >= 50.0
    assert result.world_state["errors"]["step-3"]["code"] == "latency_cap"
    assert "slow:k" not in result.world_state.get("evidence", {}).get("tool-1", [])


def test_tool_fail_cap_stops_all_tool_use(book: Ledger) -> None:
    """Two failures under tool_fail_cap=2 trip stop_tools and the loop goes to the answer."""
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "geocode", "args": {"place": "Atlantis"}}],
        repairs=[{"tool": "geocode", "args": {"place": "Lemuria"}}],
        answer="Neither place exists here.",
    )
    config = limits(tool_fail_cap=2)
    result = run_agent(book, "reasoning", "Find Atlantis", models=models, config=config)
    assert trips(book, result.run_id) == [("tool_fail_cap", "stop_tools")]
    assert [e.payload["ok"] for e in book.events(result.run_id) if e.kind == "ToolReturned"] == [
        False,
        False,
    ]
    assert result.status == "answered"


def test_tool_call_cap_refuses_the_call_after_the_cap(book: Ledger) -> None:
    """With tool_call_cap=1 the second call is refused and tool use stops."""
    models = reasoning_script(
        plan=PLAN,
        choices=[
            {"tool": "calculator", "args": {"expression": "1+1"}},
            {"tool": "calculator", "args": {"expression": "2+2"}},
        ],
        answer="2, and I may not compute more.",
    )
    result = run_agent(
        book, "reasoning", "1+1 and 2+2?", models=models, config=limits(tool_call_cap=1)
    )
    assert trips(book, result.run_id) == [("tool_call_cap", "refuse")]
    assert event_kinds(book, result.run_id).count("ToolCalled") == 1
    payload = trip_payload(book, result.run_id, "tool_call_cap")
    assert (payload["limit"], payload["observed"]) == (1, 2)


def test_retrieve_cap_refuses_retrievals_but_not_other_tools(book: Ledger) -> None:
    """With retrieve_cap=1 a second geocode is refused while the calculator still runs."""
    models = reasoning_script(
        plan=PLAN,
        choices=[
            {"tool": "geocode", "args": {"place": "Old Town"}},
            {"tool": "geocode", "args": {"place": "Harbour Front"}},
            {"tool": "calculator", "args": {"expression": "3*3"}},
            DONE,
        ],
        repairs=[DONE],
        answer="Old Town is known [place:old-town]; 3*3 = 9.",
    )
    config = limits(retrieve_cap=1)
    result = run_agent(book, "reasoning", "Where and what?", models=models, config=config)
    assert trips(book, result.run_id) == [("retrieve_cap", "refuse")]
    called = [e.payload["tool"] for e in book.events(result.run_id) if e.kind == "ToolCalled"]
    assert called == ["geocode", "calculator"]


def test_max_steps_stops_a_loop_that_never_finishes(book: Ledger) -> None:
    """REASON choosing tools forever is stopped by max_steps, then the run answers."""
    choice = {"tool": "calculator", "args": {"expression": "1+1"}}
    models = reasoning_script(plan=PLAN, choices=[choice, choice, choice], answer="2.")
    result = run_agent(book, "reasoning", "1+1?", models=models, config=limits(max_steps=3))
    assert trips(book, result.run_id) == [("max_steps", "stop")]
    assert event_kinds(book, result.run_id).count("ToolCalled") == 3
    assert result.status == "answered"


def test_an_exhausted_token_budget_halts_the_run_gracefully(book: Ledger) -> None:
    """Past the token budget, the next model call trips token_budget; the run answers anyway.

    The answer is built from what the world state holds, with outcome 'stopped'.
    """
    plan = {"steps": [{"goal": "w", "tool": "weather", "args": {"place": "Old Town"}}]}
    models = pipeline_script(plan=plan)
    result = run_agent(book, "pipeline", "Weather?", models=models, config=limits(token_budget=50))
    assert trips(book, result.run_id) == [("token_budget", "halt")]
    assert event_kinds(book, result.run_id)[-6:] == [
        "StepCompleted",
        "StepStarted",
        "GuardrailTripped",
        "StepCompleted",
        "SynthesisProduced",
        "RunCompleted",
    ]
    halted = [e.payload for e in book.events(result.run_id) if e.kind == "StepCompleted"][-1]
    assert halted == {
        "status": "skipped",
        "output": {"halted_by": "token_budget"},
        "step_id": "step-2",
    }
    assert result.status == "stopped"
    assert "stopped by token_budget" in result.answer
    assert book.events(result.run_id)[-1].payload["outcome"] == "stopped"
    assert len(models["executor"].requests) == 0


def test_hooks_observe_model_calls_tool_calls_and_the_finish(book: Ledger) -> None:
    """RunHooks see each recorded model call and tool call, then the result."""
    seen: list[str] = []

    def on_model(info: ModelCallInfo) -> None:
        seen.append(f"model:{info.role}@{info.position}")

    def on_tool(info: ToolCallInfo) -> None:
        seen.append(f"tool:{info.name}:{info.result.ok}")

    hooks = RunHooks(
        on_model_call=on_model,
        on_tool_call=on_tool,
        on_finish=lambda result: seen.append(f"finish:{result.status}"),
    )
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "calculator", "args": {"expression": "6*7"}}, DONE],
        answer="42",
    )
    run_agent(book, "reasoning", "6*7?", models=models, hooks=hooks)
    assert seen == [
        "model:reasoner@5",
        "model:reasoner@9",
        "tool:calculator:True",
        "model:reasoner@17",
        "model:synthesizer@20",
        "finish:answered",
    ]


def test_usage_totals_sum_every_model_call(book: Ledger) -> None:
    """AgentResult.usage sums tokens across calls and counts model and tool calls."""
    models = reasoning_script(
        plan=PLAN,
        choices=[{"tool": "calculator", "args": {"expression": "6*7"}}, DONE],
        answer="42",
    )
    result = run_agent(book, "reasoning", "6*7?", models=models)
    recorded = [e.payload["usage"] for e in book.events(result.run_id) if e.kind == "ModelCalled"]
    assert result.usage.total_tokens == sum(u["total_tokens"] for u in recorded)
    assert (result.usage.model_calls, result.usage.tool_calls) == (4, 1)
    assert result.usage.cost_usd == 0.0
    assert set(result.usage.by_role) == {"reasoner", "synthesizer"}
