"""The REASON / THINK / TOOL loop, every node recorded.

Owns the control flow: REASON makes a plan (``{"plan": [...]}``, or ``needs_clarification``),
then picks one tool at a time (``{"tool", "args"}``; an empty tool means "ready to answer");
TOOL runs it through the run context (so the guardrails ``tool_call_cap``, ``retrieve_cap``,
``tool_fail_cap``, ``tool_latency_cap_ms`` and ``max_tool_risk`` apply); after a failure THINK
proposes a repaired request (``{"tool", "args"}``), which the next iteration runs instead of
asking REASON. ``max_steps`` bounds the iterations. The answer is written from the world state
under the evidence discipline. Must not record except through the ``RunContext`` or loop
past ``max_steps``.

Events of a run with one failure and its repair::

    PolicyDecided, DeltaApplied(query)
    StepStarted(reason:plan) ModelCalled(reasoner) PlanProposed StepCompleted
    StepStarted(reason:select) ModelCalled(reasoner) StepCompleted
    StepStarted(tool) ToolCalled ToolReturned(ok=false) DeltaApplied StepCompleted(failed)
    StepStarted(think) ModelCalled(thinker) StepCompleted
    StepStarted(tool) ToolCalled ToolReturned DeltaApplied StepCompleted
    StepStarted(reason:select) ModelCalled(reasoner) StepCompleted        ({"tool": ""})
    StepStarted(answer) ModelCalled(synthesizer) StepCompleted
    SynthesisProduced RunCompleted(answered)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agentledger.agents._asking import JsonAnswer, ask_answer, ask_json
from agentledger.agents._config import StreamOption
from agentledger.agents._context import RunContext
from agentledger.agents._results import compact, fallback_outcome, result_patch
from agentledger.agents._types import AgentInput, Outcome, ToolCall
from agentledger.agents.errors import RunHalted
from agentledger.agents.models import Message
from agentledger.agents.prompts import describe_tools, render

__all__ = ["Reasoning", "ReasoningConfig", "ReasoningPlan", "ToolChoice"]

NO_PLAN = "I'm sorry: I could not work out how to approach this request. Please rephrase it."
NEXT_TOOL = (
    'Choose the next tool as {"tool":"<name>","args":{...}}, or reply {"tool":"","args":{}} '
    "when the results so far answer the question."
)


class ReasoningPlan(BaseModel):
    """REASON's plan contract."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    plan: list[str] = Field(default_factory=list)
    needs_clarification: str | None = None


class ToolChoice(BaseModel):
    """REASON's tool selection and THINK's repair contract (an empty tool means none)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    tool: str = ""
    args: dict[str, JsonValue] = Field(default_factory=dict)


class ReasoningConfig(StreamOption):
    """Options of the reasoning agent: which tools REASON may choose (None: all).

    ``stream`` streams the synthesizer's calls (the answer).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tools: tuple[str, ...] | None = None


class Reasoning:
    """REASON -> TOOL (-> THINK -> TOOL) ... -> answer, within the run's guardrails."""

    name: ClassVar[str] = "reasoning"

    def __init__(self, config: ReasoningConfig | None = None) -> None:
        self.config = config or ReasoningConfig()

    def roles(self) -> tuple[str, ...]:
        """REASON, THINK and the answer's writer."""
        return ("reasoner", "thinker", "synthesizer")

    def prompt_names(self) -> Mapping[str, str]:
        """Each role's library prompt."""
        return {role: f"reasoning.{role}" for role in self.roles()}

    def run(self, ctx: RunContext, run_input: AgentInput) -> Outcome:
        """Plan, then loop over tool choices and repairs, then answer."""
        question = run_input.question
        ctx.delta({"query": {"raw": question}}, source="input")
        tools = ctx.tool_schemas(self.config.tools)
        system = render(ctx.prompt("reasoner"), tools=describe_tools(tools))
        convo = [Message.system(system), Message.user(f"Question: {question}\nMake a plan.")]
        got = self._plan(ctx, convo)
        if got is None:
            return Outcome("fallback", NO_PLAN)
        if got.value.needs_clarification:
            return Outcome("clarification", got.value.needs_clarification, caused_by=ctx.position)
        convo.append(Message.assistant(got.text))
        pending: ToolChoice | None = None
        for _ in range(ctx.limits.max_steps):
            if ctx.tools_stopped:
                break
            if pending is None:
                choice = self._select(ctx, convo)
                if choice is None:
                    return fallback_outcome(ctx, "REASON gave no usable tool choice")
                if not choice.tool:
                    break
            else:
                choice, pending = pending, None
            made = self._tool(ctx, choice)
            envelope = {"ok": made.result.ok, "data": compact(made.result.data)}
            if made.result.error is not None:
                envelope["error"] = made.result.error.model_dump(mode="json")
            convo.append(
                Message.user(f"Result of {choice.tool}: {json.dumps(envelope, sort_keys=True)}")
            )
            if not made.result.ok and not ctx.tools_stopped:
                pending = self._think(ctx, question, choice, made)
        else:
            ctx.trip(
                "max_steps",
                action="stop",
                message=f"the loop ran {ctx.limits.max_steps} steps without REASON finishing",
                limit=ctx.limits.max_steps,
                observed=ctx.limits.max_steps,
            )
        return self._answer(ctx, question)

    def fallback(self, ctx: RunContext, halt: RunHalted) -> Outcome:
        """The answer after a halt: what the world state holds so far."""
        return fallback_outcome(ctx, f"stopped by {halt.guardrail}", "stopped")

    def _plan(self, ctx: RunContext, convo: list[Message]) -> JsonAnswer[ReasoningPlan] | None:
        with ctx.step("reason:plan") as step:
            got = ask_json(ctx, "reasoner", convo, ReasoningPlan, step_id=step.id)
            if got is None:
                step.fail("no_plan", "REASON gave no usable plan")
            else:
                recorded = got.value.model_dump(mode="json", exclude_none=True)
                ctx.plan(recorded, step_id=step.id, caused_by=got.position)
            return got

    def _select(self, ctx: RunContext, convo: list[Message]) -> ToolChoice | None:
        with ctx.step("reason:select") as step:
            convo.append(Message.user(NEXT_TOOL))
            got = ask_json(ctx, "reasoner", convo, ToolChoice, step_id=step.id)
            if got is None:
                step.fail("no_choice", "REASON gave no usable tool choice")
                return None
            convo.append(Message.assistant(got.text))
            step.output = got.value.model_dump(mode="json")
            return got.value

    def _tool(self, ctx: RunContext, choice: ToolChoice) -> ToolCall:
        with ctx.step("tool", {"tool": choice.tool, "args": choice.args}) as step:
            made = ctx.invoke_tool(
                choice.tool, choice.args, step_id=step.id, caused_by=ctx.position
            )
            patch = result_patch(step.id, choice.tool, choice.args, made)
            ctx.delta(patch, step_id=step.id, source=made.call_id, caused_by=ctx.position)
            if made.result.error is not None:
                step.fail(made.result.error.code, made.result.error.message)
            return made

    def _think(
        self, ctx: RunContext, question: str, choice: ToolChoice, made: ToolCall
    ) -> ToolChoice | None:
        with ctx.step("think", {"failed_tool": choice.tool}) as step:
            tools = ctx.tool_schemas(self.config.tools)
            system = render(ctx.prompt("thinker"), tools=describe_tools(tools))
            error = made.result.error.model_dump(mode="json") if made.result.error else None
            failure = {
                "question": question,
                "tool": choice.tool,
                "args": choice.args,
                "error": error,
            }
            messages = [
                Message.system(system),
                Message.user(json.dumps(failure, ensure_ascii=False, sort_keys=True)),
            ]
            got = ask_json(ctx, "thinker", messages, ToolChoice, step_id=step.id)
            if got is None:
                step.fail("no_repair", "THINK gave no usable repair")
                return None
            step.output = got.value.model_dump(mode="json")
            return got.value if got.value.tool else None

    def _answer(self, ctx: RunContext, question: str) -> Outcome:
        with ctx.step("answer") as step:
            world: dict[str, Any] = ctx.world
            brief = {
                "question": question,
                "results": world.get("results", {}),
                "errors": world.get("errors", {}),
                "snippets": list((world.get("snippets") or {}).values()),
                "evidence_ids": list(ctx.evidence),
            }
            messages = [
                Message.system(ctx.prompt("synthesizer")),
                Message.user(json.dumps(brief, ensure_ascii=False, sort_keys=True)),
            ]
            got = ask_answer(
                ctx, "synthesizer", messages, step_id=step.id, stream=self.config.stream
            )
            if got is None:
                step.fail("model_error", "the answer call failed")
        if got is None:
            return fallback_outcome(ctx, "the answer could not be written")
        answer, cited, position = got
        return Outcome("answered", answer, cited, step_id=step.id, caused_by=position)
