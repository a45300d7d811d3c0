"""The Kura/Vaya pipeline: Planner -> Executor -> Synthesizer over a world-state blackboard.

Owns the planner -> executor -> synthesizer control flow. The planner answers a strict JSON plan
``{"steps": [{"goal", "tool", "args", "forEach"}], "needs_clarification"}``; the executor gets
one step at a time with every tool offered and must answer with exactly one tool call, whose
envelope a deterministic wrapper turns into ``{"deltaState", "snippet"}`` (``_results``); each
delta is merged into the world state (DeltaApplied) and failures land in ``world_state.errors``
keyed by step id; the synthesizer writes the answer from the world state and snippets, citing
evidence ids, under the evidence discipline. Records only through the ``RunContext``; must not
format the final answer itself except in the recorded fallbacks.

Events of a normal run::

    PolicyDecided, DeltaApplied(query)
    StepStarted(plan) ModelCalled(planner) PlanProposed StepCompleted
    per plan step: StepStarted(execute) ModelCalled(executor) ToolCalled ToolReturned
                   DeltaApplied StepCompleted
    StepStarted(synthesize) ModelCalled(synthesizer) StepCompleted
    SynthesisProduced RunCompleted(answered)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agentledger.agents._asking import ask_answer, ask_json
from agentledger.agents._config import StreamOption
from agentledger.agents._context import RunContext
from agentledger.agents._results import fallback_outcome, result_patch
from agentledger.agents._types import AgentInput, Outcome
from agentledger.agents.errors import RunHalted
from agentledger.agents.models import Message
from agentledger.agents.prompts import describe_tools, render

__all__ = ["Pipeline", "PipelineConfig", "Plan", "PlanStep"]

NO_PLAN = "I'm sorry: I could not work out a plan for this request. Please try rephrasing it."


class ForEach(BaseModel):
    """Repeat a step once per value of one argument."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    arg: str
    values: list[JsonValue] = Field(min_length=1)


class PlanStep(BaseModel):
    """One step of the planner's plan."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    goal: str = ""
    tool: str | None = None
    args: dict[str, JsonValue] = Field(default_factory=dict)
    for_each: ForEach | None = Field(default=None, alias="forEach")


class Plan(BaseModel):
    """The planner's JSON contract."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    steps: list[PlanStep] = Field(default_factory=list)
    needs_clarification: str | None = None


class PipelineConfig(StreamOption):
    """Options of the pipeline: which tools the planner and executor see (None: all).

    ``stream`` streams the synthesizer's calls (the answer).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tools: tuple[str, ...] | None = None


@dataclass(frozen=True)
class _Work:
    """One execution of a plan step (a ``forEach`` step becomes several)."""

    index: int
    goal: str
    tool: str | None
    args: dict[str, Any]


class Pipeline:
    """Planner -> Executor -> Synthesizer, every step recorded."""

    name: ClassVar[str] = "pipeline"

    def __init__(self, config: PipelineConfig | None = None) -> None:
        self.config = config or PipelineConfig()

    def roles(self) -> tuple[str, ...]:
        """The planner, executor and synthesizer roles."""
        return ("planner", "executor", "synthesizer")

    def prompt_names(self) -> Mapping[str, str]:
        """Each role's library prompt."""
        return {role: f"pipeline.{role}" for role in self.roles()}

    def run(self, ctx: RunContext, run_input: AgentInput) -> Outcome:
        """Plan, execute each step, synthesize."""
        question = run_input.question
        ctx.delta({"query": {"raw": question}}, source="input")
        tools = ctx.tool_schemas(self.config.tools)
        with ctx.step("plan") as step:
            system = render(ctx.prompt("planner"), tools=describe_tools(tools))
            ask = json.dumps(
                {"question": question, "world_state": ctx.world}, ensure_ascii=False, sort_keys=True
            )
            got = ask_json(
                ctx, "planner", [Message.system(system), Message.user(ask)], Plan, step_id=step.id
            )
            if got is None:
                step.fail("no_plan", "the planner gave no usable plan")
            else:
                recorded = got.value.model_dump(mode="json", by_alias=True, exclude_none=True)
                ctx.plan(recorded, step_id=step.id, caused_by=got.position)
        if got is None:
            return Outcome("fallback", NO_PLAN)
        plan = got.value
        if plan.needs_clarification:
            return Outcome("clarification", plan.needs_clarification, caused_by=ctx.position)
        work = _expand(plan.steps)
        if len(work) > ctx.limits.max_steps:
            ctx.trip(
                "max_steps",
                action="truncate",
                message=f"the plan has {len(work)} steps; only the first "
                f"{ctx.limits.max_steps} run",
                limit=ctx.limits.max_steps,
                observed=len(work),
            )
            work = work[: ctx.limits.max_steps]
        for item in work:
            if ctx.tools_stopped:
                break
            self._execute(ctx, item, tools)
        return self._synthesize(ctx, question)

    def fallback(self, ctx: RunContext, halt: RunHalted) -> Outcome:
        """The answer after a halt: what the world state holds so far."""
        return fallback_outcome(ctx, f"stopped by {halt.guardrail}", "stopped")

    def _execute(self, ctx: RunContext, item: _Work, tools: list[dict[str, Any]]) -> None:
        args = {"goal": item.goal, "tool": item.tool, "args": item.args, "plan_index": item.index}
        with ctx.step("execute", args) as step:
            task = {"step": args, "world_state": ctx.world}
            messages = [
                Message.system(ctx.prompt("executor")),
                Message.user(json.dumps(task, ensure_ascii=False, sort_keys=True)),
            ]
            response = ctx.call_model(
                "executor", ctx.request("executor", messages, tools=tools), step_id=step.id
            )
            if response is None or not response.message.tool_calls:
                code = "model_error" if response is None else "no_tool_call"
                said = "" if response is None else response.message.content[:300]
                message = f"the executor did not call a tool. {said}".strip()
                ctx.delta(
                    {"errors": {step.id: {"tool": item.tool, "code": code, "message": message}}},
                    step_id=step.id,
                    caused_by=ctx.position,
                )
                step.fail(code, message)
                return
            calls = response.message.tool_calls
            if len(calls) > 1:
                ctx.trip(
                    "one_tool_per_step",
                    action="ignore_extra",
                    message=f"the executor called {len(calls)} tools; only the first runs",
                    limit=1,
                    observed=[call.name for call in calls],
                    step_id=step.id,
                )
            call = calls[0]
            arguments: object = call.arguments if call.arguments_ok else call.arguments_raw
            made = ctx.invoke_tool(call.name, arguments, step_id=step.id, caused_by=ctx.position)
            patch = result_patch(step.id, call.name, arguments, made)
            ctx.delta(patch, step_id=step.id, source=made.call_id, caused_by=ctx.position)
            step.output = {"snippet": patch["snippets"][step.id]}
            if not made.result.ok and made.result.error is not None:
                step.fail(made.result.error.code, made.result.error.message)

    def _synthesize(self, ctx: RunContext, question: str) -> Outcome:
        with ctx.step("synthesize") as step:
            world = ctx.world
            snippets = list((world.pop("snippets", None) or {}).values())
            brief = {
                "question": question,
                "world_state": world,
                "snippets": snippets,
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
                step.fail("model_error", "the synthesizer call failed")
        if got is None:
            return fallback_outcome(ctx, "the answer could not be written")
        answer, cited, position = got
        return Outcome("answered", answer, cited, step_id=step.id, caused_by=position)


def _expand(steps: list[PlanStep]) -> list[_Work]:
    work: list[_Work] = []
    for index, step in enumerate(steps):
        if step.for_each is None:
            work.append(_Work(index, step.goal, step.tool, dict(step.args)))
            continue
        for value in step.for_each.values:
            args = {**step.args, step.for_each.arg: value}
            work.append(_Work(index, step.goal, step.tool, args))
    return work
