"""The router: policy gate, a budgeted router plan, grounded chat.

Owns the flow after the policy gate (which the runner applies to every agent): the router model
answers a strict JSON ``{"router_plan": [{"agent", "args"}], "needs_clarification",
"risk_tags"}``; each planned specialist runs in order as one tool (retriever -> ``find_pois``,
geo -> ``geocode``, weather -> ``weather``, routing -> ``transit``, configurable), its result
merged into the world state; the router's ``budget`` caps how many specialists run: when the
plan asks for more, GuardrailTripped (``router_budget``, action ``stop``) is recorded and the
run stops gracefully, answering from what it gathered. The chat agent writes the Markdown reply
citing only evidence ids tools returned (the evidence discipline). ``needs_clarification``
short-circuits to ClarificationRequested. Must not record except through the ``RunContext``
and must not run a specialist the plan did not name.

Events::

    PolicyDecided, DeltaApplied(query)
    StepStarted(route) ModelCalled(router) PlanProposed StepCompleted
    per specialist: StepStarted(agent:<name>) ToolCalled ToolReturned DeltaApplied StepCompleted
    [GuardrailTripped(router_budget)]
    StepStarted(chat) ModelCalled(chat) [GuardrailTripped(evidence) ModelCalled(chat)]
        StepCompleted
    SynthesisProduced RunCompleted(answered)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agentledger.agents._asking import ask_answer, ask_json
from agentledger.agents._config import StreamOption
from agentledger.agents._context import RunContext
from agentledger.agents._results import fallback_outcome, result_patch
from agentledger.agents._types import AgentInput, Outcome
from agentledger.agents.errors import RunHalted
from agentledger.agents.models import Message
from agentledger.agents.prompts import render

__all__ = ["Router", "RouterConfig", "RouterPlan", "RouterStep"]

NO_PLAN = "I'm sorry: I could not route this request. Please rephrase it."
DEFAULT_SPECIALISTS: Mapping[str, str] = MappingProxyType(
    {"retriever": "find_pois", "geo": "geocode", "weather": "weather", "routing": "transit"}
)


class RouterStep(BaseModel):
    """One specialist the router plans to run, with its arguments."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    agent: str
    args: dict[str, JsonValue] = Field(default_factory=dict)


class RouterPlan(BaseModel):
    """The router's JSON contract."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    router_plan: list[RouterStep] = Field(default_factory=list)
    needs_clarification: str | None = None
    risk_tags: list[str] = Field(default_factory=list)


class RouterConfig(StreamOption):
    """Options of the router: specialist -> tool, and how many specialists may run.

    ``stream`` streams the chat agent's calls (the reply).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    specialists: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_SPECIALISTS))
    budget: int = Field(default=4, ge=1)


class Router:
    """Router -> specialists (within budget) -> chat."""

    name: ClassVar[str] = "router"

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.config = config or RouterConfig()

    def roles(self) -> tuple[str, ...]:
        """The router and the chat agent."""
        return ("router", "chat")

    def prompt_names(self) -> Mapping[str, str]:
        """Each role's library prompt."""
        return {role: f"router.{role}" for role in self.roles()}

    def run(self, ctx: RunContext, run_input: AgentInput) -> Outcome:
        """Route, run the planned specialists within budget, chat."""
        question = run_input.question
        ctx.delta({"query": {"raw": question}}, source="input")
        with ctx.step("route") as step:
            system = render(ctx.prompt("router"), catalog=self._catalog(ctx))
            messages = [Message.system(system), Message.user(question)]
            got = ask_json(ctx, "router", messages, RouterPlan, step_id=step.id)
            if got is None:
                step.fail("no_plan", "the router gave no usable plan")
            else:
                recorded = got.value.model_dump(mode="json", exclude_none=True)
                ctx.plan(recorded, step_id=step.id, caused_by=got.position)
        if got is None:
            return Outcome("fallback", NO_PLAN)
        plan = got.value
        if plan.needs_clarification:
            return Outcome("clarification", plan.needs_clarification, caused_by=ctx.position)
        steps = [s for s in plan.router_plan if s.agent != "chat"]
        for index, planned in enumerate(steps):
            if index >= self.config.budget:
                ctx.trip(
                    "router_budget",
                    action="stop",
                    message=f"the router planned {len(steps)} specialist steps; its budget is "
                    f"{self.config.budget}, so the rest do not run",
                    limit=self.config.budget,
                    observed=len(steps),
                )
                break
            if ctx.tools_stopped:
                break
            self._specialist(ctx, planned)
        return self._chat(ctx, question)

    def fallback(self, ctx: RunContext, halt: RunHalted) -> Outcome:
        """The answer after a halt: what the world state holds so far."""
        return fallback_outcome(ctx, f"stopped by {halt.guardrail}", "stopped")

    def _catalog(self, ctx: RunContext) -> str:
        lines = []
        for agent, tool in sorted(self.config.specialists.items()):
            spec = ctx.tool_spec(tool)
            about = spec.description if spec is not None else f"runs {tool}"
            props = spec.parameters.get("properties", {}) if spec is not None else {}
            args = ", ".join(props) if isinstance(props, dict) else ""
            lines.append(f"- {agent} (args: {args}): {about}")
        lines.append("- chat: writes the reply from the results (always runs last)")
        return "\n".join(lines)

    def _specialist(self, ctx: RunContext, planned: RouterStep) -> None:
        tool = self.config.specialists.get(planned.agent)
        with ctx.step(f"agent:{planned.agent}", {"args": planned.args}) as step:
            if tool is None:
                message = f"there is no specialist called {planned.agent!r}"
                error = {"agent": planned.agent, "code": "unknown_specialist", "message": message}
                ctx.delta({"errors": {step.id: error}}, step_id=step.id)
                step.fail("unknown_specialist", message)
                return
            made = ctx.invoke_tool(tool, planned.args, step_id=step.id, caused_by=ctx.position)
            patch = result_patch(step.id, tool, planned.args, made)
            ctx.delta(patch, step_id=step.id, source=made.call_id, caused_by=ctx.position)
            if made.result.error is not None:
                step.fail(made.result.error.code, made.result.error.message)

    def _chat(self, ctx: RunContext, question: str) -> Outcome:
        with ctx.step("chat") as step:
            world: dict[str, Any] = ctx.world
            brief = {
                "question": question,
                "results": world.get("results", {}),
                "errors": world.get("errors", {}),
                "evidence_ids": list(ctx.evidence),
            }
            messages = [
                Message.system(ctx.prompt("chat")),
                Message.user(json.dumps(brief, ensure_ascii=False, sort_keys=True)),
            ]
            got = ask_answer(ctx, "chat", messages, step_id=step.id, stream=self.config.stream)
            if got is None:
                step.fail("model_error", "the chat call failed")
        if got is None:
            return fallback_outcome(ctx, "the reply could not be written")
        answer, cited, position = got
        return Outcome("answered", answer, cited, step_id=step.id, caused_by=position)
