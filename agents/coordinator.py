"""The DELEGATE / DONE coordinator, every decision recorded.

Owns the planner loop over a catalog of worker agents: the coordinator answers strict JSON
``{"Action": "DELEGATE|DONE", "Agent", "Task", "Summary"}``; a DELEGATE goes verbatim to the
named worker (a model role ``worker:<name>`` offered only its own tools, which must answer with
exactly ONE tool call); the tool's envelope is fed back to the coordinator and logged in the
world state's action log (``actions``, keyed by action id). A repetition guard trips after
``repeat_limit`` identical retrievals (GuardrailTripped ``repetition`` + a nudge message). When
the run took no terminal action (schedule / send / create / update), the orchestrator records a
``terminal_intent`` trip and calls the fallback tool itself, auto-filling subject and body from
the request. Must hold no domain logic beyond that fallback, and records only through the
``RunContext``.

Events of a two-round run::

    PolicyDecided, DeltaApplied(query)
    StepStarted(coordinate) ModelCalled(coordinator) StepCompleted
    StepStarted(delegate) ModelCalled(worker:utility) ToolCalled ToolReturned DeltaApplied
        StepCompleted
    StepStarted(coordinate) ModelCalled(coordinator) StepCompleted          (DONE)
    [StepStarted(fallback_action) GuardrailTripped(terminal_intent) ToolCalled ToolReturned
        DeltaApplied StepCompleted]
    SynthesisProduced RunCompleted(answered)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from agentledger.agents._asking import ask_json
from agentledger.agents._context import RunContext
from agentledger.agents._results import compact, fallback_outcome, result_patch
from agentledger.agents._types import AgentInput, Outcome, ToolCall
from agentledger.agents.errors import RunHalted
from agentledger.agents.evidence import answer_with_evidence
from agentledger.agents.models import Message
from agentledger.agents.prompts import describe_tools, render

__all__ = ["Coordinator", "CoordinatorConfig", "Decision", "WorkerSpec"]


def _upper(value: object) -> object:
    return value.strip().upper() if isinstance(value, str) else value


class Decision(BaseModel):
    """The coordinator's JSON contract (field names as the seed spells them)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    action: Annotated[Literal["DELEGATE", "DONE"], BeforeValidator(_upper)] = Field(alias="Action")
    agent: str = Field(default="", alias="Agent")
    task: str = Field(default="", alias="Task")
    summary: str = Field(default="", alias="Summary")


class WorkerSpec(BaseModel):
    """A worker agent: its name, what it can do (for the catalog) and its tools."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    description: str
    tools: tuple[str, ...]


DEFAULT_WORKERS = (
    WorkerSpec(
        name="utility",
        description="looks things up: places, weather, routes, points of interest, arithmetic",
        tools=("geocode", "weather", "transit", "find_pois", "calculator"),
    ),
    WorkerSpec(
        name="office",
        description="acts: creates reminders, adds notes, sends messages",
        tools=("create_reminder", "add_note", "send_message"),
    ),
)


class CoordinatorConfig(BaseModel):
    """Options of the coordinator: the worker catalog and the fallback policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workers: tuple[WorkerSpec, ...] = DEFAULT_WORKERS
    terminal_tools: tuple[str, ...] = ("create_reminder", "add_note", "send_message")
    fallback_tool: str = "add_note"
    fallback_recipient: str = "me"


class Coordinator:
    """A coordinator that delegates to workers until DONE, then answers with its summary."""

    name: ClassVar[str] = "coordinator"

    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self.config = config or CoordinatorConfig()
        self._workers = {worker.name: worker for worker in self.config.workers}

    def roles(self) -> tuple[str, ...]:
        """The coordinator and one role per worker (``worker:<name>``)."""
        return ("coordinator", *(f"worker:{name}" for name in self._workers))

    def prompt_names(self) -> Mapping[str, str]:
        """The coordinator's prompt; every worker shares the worker template."""
        return {
            role: "coordinator.coordinator" if role == "coordinator" else "coordinator.worker"
            for role in self.roles()
        }

    def run(self, ctx: RunContext, run_input: AgentInput) -> Outcome:
        """Delegate until DONE (or max_steps), ensure a terminal action, answer."""
        question = run_input.question
        ctx.delta({"query": {"raw": question}}, source="input")
        catalog = "\n".join(f"- {w.name}: {w.description}" for w in self.config.workers)
        system = render(ctx.prompt("coordinator"), catalog=catalog)
        convo = [Message.system(system), Message.user(question)]
        retrievals: dict[str, int] = {}
        done: str | None = None
        for _ in range(ctx.limits.max_steps):
            with ctx.step("coordinate") as step:
                got = ask_json(ctx, "coordinator", convo, Decision, step_id=step.id)
                if got is None:
                    step.fail("no_decision", "the coordinator gave no usable decision")
                else:
                    step.output = got.value.model_dump(mode="json", by_alias=True)
            if got is None:
                break
            convo.append(Message.assistant(got.text))
            if got.value.action == "DONE":
                done = got.value.summary
                break
            convo.append(Message.user(self._delegate(ctx, got.value, question, retrievals)))
            if ctx.tools_stopped:
                break
        else:
            ctx.trip(
                "max_steps",
                action="stop",
                message=f"the coordinator did not finish within {ctx.limits.max_steps} rounds",
                limit=ctx.limits.max_steps,
                observed=ctx.limits.max_steps,
            )
        self._ensure_terminal_action(ctx, question)
        if not done:
            return fallback_outcome(ctx, "the coordinator did not reach DONE")
        return self._answer(ctx, convo, done)

    def fallback(self, ctx: RunContext, halt: RunHalted) -> Outcome:
        """The answer after a halt: what the world state holds so far."""
        return fallback_outcome(ctx, f"stopped by {halt.guardrail}", "stopped")

    def _delegate(
        self, ctx: RunContext, decision: Decision, question: str, retrievals: dict[str, int]
    ) -> str:
        action_id = ctx.new_id("action")
        worker = self._workers.get(decision.agent)
        with ctx.step("delegate", {"agent": decision.agent, "task": decision.task}) as step:
            log: dict[str, Any] = {"agent": decision.agent, "task": decision.task, "ok": False}
            if worker is None:
                known = ", ".join(self._workers)
                message = f"there is no worker called {decision.agent!r}; workers: {known}"
                self._log(
                    ctx, action_id, log, {"errors": {action_id: {"message": message}}}, step.id
                )
                step.fail("unknown_worker", message)
                return f"Delegation failed: {message}."
            role = f"worker:{worker.name}"
            tools = ctx.tool_schemas(worker.tools)
            system = render(ctx.prompt(role), worker=worker.name, tools=describe_tools(tools))
            messages = [Message.system(system), Message.user(decision.task)]
            response = ctx.call_model(
                role, ctx.request(role, messages, tools=tools), step_id=step.id
            )
            calls = response.message.tool_calls if response is not None else []
            if response is None or not calls:
                said = response.message.content[:300] if response is not None else "model error"
                message = f"the {worker.name} worker called no tool ({said})"
                self._log(
                    ctx, action_id, log, {"errors": {action_id: {"message": message}}}, step.id
                )
                step.fail("no_tool_call", message)
                return f"Delegation failed: {message}."
            if len(calls) > 1:
                ctx.trip(
                    "one_tool_per_response",
                    action="ignore_extra",
                    message=f"the {worker.name} worker called {len(calls)} tools; the first runs",
                    limit=1,
                    observed=[call.name for call in calls],
                    step_id=step.id,
                )
            call = calls[0]
            if call.name not in worker.tools:
                message = f"the {worker.name} worker has no tool {call.name!r}"
                self._log(
                    ctx, action_id, log, {"errors": {action_id: {"message": message}}}, step.id
                )
                step.fail("tool_not_offered", message)
                return f"Delegation failed: {message}."
            arguments: object = call.arguments if call.arguments_ok else call.arguments_raw
            if call.name == self.config.fallback_tool and isinstance(arguments, dict):
                arguments = self._autofill(ctx, arguments, question)
            made = ctx.invoke_tool(call.name, arguments, step_id=step.id, caused_by=ctx.position)
            log |= {"tool": call.name, "args": arguments, "ok": made.result.ok}
            self._log(
                ctx, action_id, log, result_patch(action_id, call.name, arguments, made), step.id
            )
            if made.result.error is not None:
                step.fail(made.result.error.code, made.result.error.message)
            nudge = self._repetition(ctx, call.name, arguments, retrievals, step.id)
        return f"Result from {worker.name}: {_envelope(made)}{nudge}"

    def _repetition(
        self,
        ctx: RunContext,
        tool: str,
        arguments: object,
        retrievals: dict[str, int],
        step_id: str,
    ) -> str:
        if tool not in ctx.limits.retrieval_tools:
            return ""
        key = json.dumps([tool, arguments], sort_keys=True)
        retrievals[key] = retrievals.get(key, 0) + 1
        if retrievals[key] < ctx.limits.repeat_limit:
            return ""
        ctx.trip(
            "repetition",
            action="nudge",
            message=f"{tool} was requested {retrievals[key]} times with the same arguments",
            limit=ctx.limits.repeat_limit,
            observed=retrievals[key],
            step_id=step_id,
        )
        return (
            f"\nYou have requested this same {tool} lookup {retrievals[key]} times. Use the "
            "result you already have: delegate a different task or answer DONE."
        )

    def _ensure_terminal_action(self, ctx: RunContext, question: str) -> None:
        actions = ctx.world.get("actions") or {}
        terminal = set(self.config.terminal_tools)
        if ctx.tools_stopped or any(
            a.get("ok") and a.get("tool") in terminal for a in actions.values()
        ):
            return
        tool = self.config.fallback_tool
        action_id = ctx.new_id("action")
        with ctx.step("fallback_action", {"tool": tool}) as step:
            ctx.trip(
                "terminal_intent",
                action="fallback_action",
                message=f"no schedule, send, create or update action was taken; calling {tool} "
                "so the request is kept",
                step_id=step.id,
            )
            arguments = self._autofill(ctx, {}, question)
            made = ctx.invoke_tool(tool, arguments, step_id=step.id, caused_by=ctx.position)
            log: dict[str, Any] = {
                "agent": "orchestrator",
                "task": "fallback",
                "tool": tool,
                "args": arguments,
            }
            log["ok"] = made.result.ok
            self._log(ctx, action_id, log, result_patch(action_id, tool, arguments, made), step.id)
            if made.result.error is not None:
                step.fail(made.result.error.code, made.result.error.message)

    def _autofill(
        self, ctx: RunContext, arguments: dict[str, Any], question: str
    ) -> dict[str, Any]:
        """Fill the fallback tool's empty text/body/subject/to from the request (seed 11.6)."""
        spec = ctx.tool_spec(self.config.fallback_tool)
        props = spec.parameters.get("properties", {}) if spec is not None else {}
        filled = dict(arguments)
        subject = " ".join(question.split()[:7])[:60]
        defaults = {
            "text": question,
            "body": question,
            "subject": subject,
            "to": self.config.fallback_recipient,
        }
        for key, value in defaults.items():
            if isinstance(props, dict) and key in props and not filled.get(key):
                filled[key] = value
        return filled

    def _log(
        self,
        ctx: RunContext,
        action_id: str,
        log: dict[str, Any],
        patch: dict[str, Any],
        step_id: str,
    ) -> None:
        ctx.delta({"actions": {action_id: log}, **patch}, step_id=step_id, caused_by=ctx.position)

    def _answer(self, ctx: RunContext, convo: list[Message], summary: str) -> Outcome:
        position = ctx.position

        def reask(correction: str) -> str | None:
            nonlocal position
            messages = [*convo, Message.user(correction)]
            got = ask_json(ctx, "coordinator", messages, Decision, step_id=None)
            if got is None or got.value.action != "DONE":
                return None
            position = got.position
            return got.value.summary

        answer, cited = answer_with_evidence(ctx, summary, reask, step_id=None)
        return Outcome("answered", answer, cited, caused_by=position)


def _envelope(made: ToolCall) -> str:
    result = made.result
    shown: dict[str, Any] = {"ok": result.ok, "type": result.type, "data": compact(result.data)}
    if result.error is not None:
        shown["error"] = result.error.model_dump(mode="json")
    return json.dumps(shown, ensure_ascii=False, sort_keys=True)
