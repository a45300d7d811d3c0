"""Guardrail limits and the pure checks that decide when one trips.

Owns ``GuardrailLimits`` (recorded whole in ``RunStarted.config.settings["limits"]``), the per-run
``GuardrailCounters`` and the check functions the run context calls before and after each model
and tool call. A check returns a ``Trip`` (what to record in a GuardrailTripped event) or
``None``. Every input of a check is recorded (tool specs, result envelopes, usage), so replay
trips exactly where the live run did. This module must not record events, call models or tools,
or read clocks: ``RunContext`` does the recording and acting.

The guardrails, by name as recorded::

    max_steps            an orchestration's loop or plan ran out of steps (truncate / stop)
    tool_call_cap        more tool calls than allowed; later calls are refused
    tool_fail_cap        this many failed tool calls stop all further tool use
    retrieve_cap         more calls of retrieval tools than allowed; later ones refused
    tool_latency_cap_ms  a call took longer than allowed; its result is discarded as a failure
    max_tool_risk        the tool's declared risk is above the limit; the call is refused
    token_budget         the run used its tokens; the run halts with a fallback answer
    strict_json          a model's JSON did not parse (retry once, then fallback)
    evidence             an answer cited ids no tool returned (re-ask once, then remove)
    repetition           the same retrieval was requested repeat_limit times (nudge)
    router_budget        the router planned more specialist steps than its budget (stop)
    one_tool_per_step    an executor / worker answered with several tool calls where one is
    one_tool_per_response  allowed; only the first runs (ignore_extra)
    terminal_intent      the coordinator took no terminal action; the fallback tool runs
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentledger.tools import RiskLevel, ToolResult, ToolSpec

__all__ = [
    "DEFAULT_RETRIEVAL_TOOLS",
    "GuardrailCounters",
    "GuardrailLimits",
    "Trip",
    "check_latency",
    "check_tokens",
    "check_tool_call",
    "check_tool_failures",
]

DEFAULT_RETRIEVAL_TOOLS = ("geocode", "weather", "transit", "find_pois")
"""Tools that look something up (as opposed to computing or writing); retrieve_cap counts them."""


class GuardrailLimits(BaseModel):
    """Every limit a run enforces; the defaults suit the built-in tools."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: int = Field(default=8, ge=1)
    tool_call_cap: int = Field(default=16, ge=0)
    tool_fail_cap: int = Field(default=3, ge=1)
    retrieve_cap: int = Field(default=12, ge=0)
    tool_latency_cap_ms: float = Field(default=5000.0, gt=0)
    max_tool_risk: Literal["low", "medium", "high"] = "medium"
    token_budget: int = Field(default=200_000, ge=1)
    repeat_limit: int = Field(default=3, ge=2)
    retrieval_tools: tuple[str, ...] = DEFAULT_RETRIEVAL_TOOLS


@dataclass(frozen=True)
class Trip:
    """A guardrail that tripped, as the GuardrailTripped event will record it."""

    guardrail: str
    action: str
    message: str
    limit: Any = None
    observed: Any = None


@dataclass
class GuardrailCounters:
    """What a run has used so far (one object per run; never shared)."""

    tool_calls: int = 0
    tool_failures: int = 0
    retrievals: int = 0
    tokens: int = 0
    tools_stopped_by: str | None = None


def check_tool_call(
    limits: GuardrailLimits, counters: GuardrailCounters, name: str, spec: ToolSpec | None
) -> Trip | None:
    """Decide whether a tool call may run, before it is recorded; a Trip means refuse it."""
    if counters.tools_stopped_by is not None:
        return Trip(
            counters.tools_stopped_by,
            "refuse",
            f"tool use was stopped by {counters.tools_stopped_by}; {name!r} was not called",
        )
    if counters.tool_calls >= limits.tool_call_cap:
        return Trip(
            "tool_call_cap",
            "refuse",
            f"the run already made {counters.tool_calls} tool calls; {name!r} was not called",
            limit=limits.tool_call_cap,
            observed=counters.tool_calls + 1,
        )
    if name in limits.retrieval_tools and counters.retrievals >= limits.retrieve_cap:
        return Trip(
            "retrieve_cap",
            "refuse",
            f"the run already made {counters.retrievals} retrievals; {name!r} was not called",
            limit=limits.retrieve_cap,
            observed=counters.retrievals + 1,
        )
    if spec is not None and spec.risk > RiskLevel(limits.max_tool_risk):
        return Trip(
            "max_tool_risk",
            "refuse",
            f"{name!r} is {spec.risk.value} risk, above the run's limit of {limits.max_tool_risk}",
            limit=limits.max_tool_risk,
            observed=spec.risk.value,
        )
    return None


def check_latency(limits: GuardrailLimits, name: str, result: ToolResult) -> Trip | None:
    """Decide, from the recorded envelope, whether a call overran the latency cap."""
    if result.latency_ms <= limits.tool_latency_cap_ms:
        return None
    return Trip(
        "tool_latency_cap_ms",
        "discard_result",
        f"{name!r} took {result.latency_ms:.1f} ms, over the cap of "
        f"{limits.tool_latency_cap_ms:g} ms; its result is treated as a failure",
        limit=limits.tool_latency_cap_ms,
        observed=result.latency_ms,
    )


def check_tool_failures(limits: GuardrailLimits, counters: GuardrailCounters) -> Trip | None:
    """After a failed call: trip when the failures reach the cap (tools stop for the run)."""
    if counters.tool_failures < limits.tool_fail_cap or counters.tools_stopped_by is not None:
        return None
    return Trip(
        "tool_fail_cap",
        "stop_tools",
        f"{counters.tool_failures} tool calls failed; no more tools are called in this run",
        limit=limits.tool_fail_cap,
        observed=counters.tool_failures,
    )


def check_tokens(limits: GuardrailLimits, counters: GuardrailCounters) -> Trip | None:
    """Before a model call: trip when the run has used its token budget (the run halts)."""
    if counters.tokens < limits.token_budget:
        return None
    return Trip(
        "token_budget",
        "halt",
        f"the run used {counters.tokens} tokens of its budget of {limits.token_budget}",
        limit=limits.token_budget,
        observed=counters.tokens,
    )
