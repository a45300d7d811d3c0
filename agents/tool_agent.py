"""The provider-agnostic tool-calling agent, with agent-as-tool.

Owns the native tool-calling loop: each turn is one model call offered the tools; every tool
call the model makes runs through the run context and its result goes back as a ``tool``
message; the loop ends when the model answers without tool calls, or trips ``max_steps`` after
``max_iterations`` turns. Usage and cost are summed by the run context; event hooks
(``RunHooks``) observe model calls, tool calls and the finish. With ``stream`` on, every model
call (the agent's turns, its re-ask and its sub-agents' turns) is streamed: chunks reach the
``on_chunk`` hook as they arrive and ModelCalled records their timings; the ``agent`` role's
last turn is the answer.

Agent-as-tool: each configured sub-agent is offered as a tool ``ask_<name>(task)``. Its calls
are recorded INLINE in the same run, not as a child run: ToolCalled(ask_<name>), then the inner
agent's own steps (``parent_step_id`` = the outer turn, model calls with actor
``agent:<name>``), then ToolReturned with its answer. One run keeps one hash chain and replays
as one unit (the inner calls are inputs of this run); a child run would make a parent's replay
depend on another run's record and leave half-written children when the parent fails. Forking
(an independent copy of the conversation as a new linked run) is ``fork_agent`` in ``_fork``:
a fork starts with ``AgentInput.history``. Must not record except through the
``RunContext``, nor open runs (forks are the runner's job).

Events of a run with one tool call::

    PolicyDecided
    StepStarted(agent:turn) ModelCalled(agent) ToolCalled ToolReturned DeltaApplied StepCompleted
    StepStarted(agent:turn) ModelCalled(agent) StepCompleted
    SynthesisProduced RunCompleted(answered)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentledger.agents._config import StreamOption
from agentledger.agents._context import RunContext
from agentledger.agents._results import compact, fallback_outcome, result_patch
from agentledger.agents._types import AgentInput, Outcome
from agentledger.agents.errors import RunHalted
from agentledger.agents.evidence import answer_with_evidence
from agentledger.agents.models import Message
from agentledger.agents.prompts import render
from agentledger.tools import RiskLevel, ToolErrorInfo, ToolResult, ToolSpec

__all__ = ["SubAgentSpec", "ToolAgent", "ToolAgentConfig"]


class SubAgentSpec(BaseModel):
    """An agent another agent can call as the tool ``ask_<name>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    description: str
    instructions: str = ""
    tools: tuple[str, ...] = ()


class ToolAgentConfig(StreamOption):
    """Options of the tool agent: its tools (None: all), sub-agents and iteration limit.

    ``stream`` streams every model call of the run.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tools: tuple[str, ...] | None = None
    sub_agents: tuple[SubAgentSpec, ...] = ()
    max_iterations: int | None = Field(default=None, ge=1)


@dataclass(frozen=True)
class _Turns:
    """How a tool-calling loop ended: the final text (None if it did not), where, and why."""

    text: str | None
    position: int
    reason: str
    convo: list[Message]


class ToolAgent:
    """A tool-calling agent whose sub-agents are tools, every call recorded."""

    name: ClassVar[str] = "tools"

    def __init__(self, config: ToolAgentConfig | None = None) -> None:
        self.config = config or ToolAgentConfig()

    def roles(self) -> tuple[str, ...]:
        """The agent, and ``agent:<name>`` per sub-agent."""
        return ("agent", *(f"agent:{sub.name}" for sub in self.config.sub_agents))

    def prompt_names(self) -> Mapping[str, str]:
        """The agent's prompt; sub-agents share the sub-agent template."""
        return {
            role: "tools.agent" if role == "agent" else "tools.subagent" for role in self.roles()
        }

    def run(self, ctx: RunContext, run_input: AgentInput) -> Outcome:
        """Loop model turns and tool calls until the model answers."""
        for sub in self.config.sub_agents:
            ctx.register_agent_tool(_sub_agent_spec(sub), partial(self._run_sub_agent, ctx, sub))
        offered = (
            [*self.config.tools, *(f"ask_{sub.name}" for sub in self.config.sub_agents)]
            if self.config.tools is not None
            else None
        )
        tools = ctx.tool_schemas(offered)
        history = [Message.model_validate(m) for m in run_input.history]
        if not history or history[0].role != "system":
            history.insert(0, Message.system(ctx.prompt("agent")))
        messages = [*history, Message.user(run_input.question)]
        turns = self._loop(ctx, "agent", messages, tools, parent_step_id=None)
        if turns.text is None:
            return fallback_outcome(ctx, turns.reason)
        first = turns.text
        position = turns.position

        def reask(correction: str) -> str | None:
            nonlocal position
            convo = [*turns.convo, Message.user(correction)]
            response = ctx.call_model(
                "agent",
                ctx.request("agent", convo, stream=self.config.stream),
                caused_by=ctx.position,
            )
            if response is None:
                return None
            position = ctx.position
            return response.message.content

        answer, cited = answer_with_evidence(ctx, first, reask, step_id=None)
        return Outcome("answered", answer, cited, caused_by=position)

    def fallback(self, ctx: RunContext, halt: RunHalted) -> Outcome:
        """The answer after a halt: what the world state holds so far."""
        return fallback_outcome(ctx, f"stopped by {halt.guardrail}", "stopped")

    def _loop(
        self,
        ctx: RunContext,
        role: str,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        *,
        parent_step_id: str | None,
    ) -> _Turns:
        convo = list(messages)
        limit = self.config.max_iterations or ctx.limits.max_steps
        for iteration in range(1, limit + 1):
            with ctx.step(
                f"{role}:turn", {"iteration": iteration}, parent_step_id=parent_step_id
            ) as step:
                request = ctx.request(role, convo, tools=tools, stream=self.config.stream)
                response = ctx.call_model(role, request, step_id=step.id)
                if response is None:
                    step.fail("model_error", f"the {role} model call failed")
                    return _Turns(None, ctx.position, f"the {role} model call failed", convo)
                position = ctx.position
                message = response.message
                convo.append(message)
                if not message.tool_calls:
                    return _Turns(message.content, position, "answered", convo)
                for call in message.tool_calls:
                    arguments: object = call.arguments if call.arguments_ok else call.arguments_raw
                    made = ctx.invoke_tool(
                        call.name, arguments, step_id=step.id, caused_by=position
                    )
                    key = made.call_id or f"{step.id}:{call.id}"
                    patch = result_patch(key, call.name, arguments, made)
                    ctx.delta(patch, step_id=step.id, source=made.call_id, caused_by=ctx.position)
                    shown: dict[str, Any] = {
                        "ok": made.result.ok,
                        "data": compact(made.result.data),
                    }
                    if made.result.error is not None:
                        shown["error"] = made.result.error.model_dump(mode="json")
                    content = json.dumps(shown, ensure_ascii=False, sort_keys=True)
                    convo.append(Message.tool(call.id, content, name=call.name))
        ctx.trip(
            "max_steps",
            action="stop",
            message=f"{role} made tool calls for {limit} turns without answering",
            limit=limit,
            observed=limit,
        )
        return _Turns(None, ctx.position, f"{role} reached its iteration limit", convo)

    def _run_sub_agent(
        self, ctx: RunContext, sub: SubAgentSpec, arguments: object, step_id: str | None, _: int
    ) -> ToolResult:
        task = arguments.get("task") if isinstance(arguments, dict) else None
        if not isinstance(task, str) or not task.strip():
            return _agent_failure("invalid_arguments", f"ask_{sub.name} needs a non-empty 'task'")
        role = f"agent:{sub.name}"
        system = render(ctx.prompt(role), name=sub.name, instructions=sub.instructions)
        tools = ctx.tool_schemas(sub.tools)
        messages = [Message.system(system), Message.user(task)]
        turns = self._loop(ctx, role, messages, tools, parent_step_id=step_id)
        if turns.text is None:
            return _agent_failure("agent_failed", turns.reason)
        return ToolResult(
            ok=True,
            type="agent_answer",
            data={"agent": sub.name, "answer": turns.text},
            latency_ms=0.0,
        )


def _sub_agent_spec(sub: SubAgentSpec) -> ToolSpec:
    return ToolSpec(
        name=f"ask_{sub.name}",
        description=f"Ask the {sub.name} agent: {sub.description}",
        version="agent-1",
        risk=RiskLevel.LOW,
        effectful=False,
        timeout_s=600.0,
        result_type="agent_answer",
        parameters={
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What the agent should do."}},
            "required": ["task"],
            "additionalProperties": False,
        },
    )


def _agent_failure(code: str, message: str) -> ToolResult:
    return ToolResult(
        ok=False,
        type="agent_answer",
        error=ToolErrorInfo(code=code, message=message),
        latency_ms=0.0,
    )
