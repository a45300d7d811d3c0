"""The small value types every orchestration and the runner share.

Owns ``AgentInput`` (what RunStarted.input holds), ``Outcome`` (how an orchestration ends),
``UsageTotals`` and ``AgentResult`` (what ``run_agent`` returns), ``RunHooks`` (observer
callbacks, the Tantra event hooks, and the chunks of streamed model calls as they arrive) and the
``Orchestration`` protocol. Must not record events or
call models: these are plain data and interfaces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agentledger.agents.models import ChatModel, ModelRequest, ModelResponse, StreamChunk
from agentledger.ledger.events import ErrorInfo
from agentledger.tools import ToolResult

if TYPE_CHECKING:
    from agentledger.agents._context import RunContext
    from agentledger.agents.errors import RunHalted

__all__ = [
    "AgentInput",
    "AgentResult",
    "AgentToolHandler",
    "ChunkInfo",
    "ModelCallInfo",
    "Orchestration",
    "Outcome",
    "RolePrompt",
    "RunHooks",
    "Status",
    "StepHandle",
    "ToolCall",
    "ToolCallInfo",
    "UsageTotals",
    "model_id",
]

Status = Literal["answered", "clarification", "blocked", "stopped", "fallback"]
"""How a completed run ended (RunCompleted.outcome): an answer, a question back to the user, a
policy refusal, a guardrail halt with a fallback answer, or a recorded graceful fallback."""


class AgentInput(BaseModel):
    """A run's input as RunStarted records it.

    ``question`` is the redacted question; ``history`` is, for a fork, the conversation it
    continues (messages as plain dicts).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    question: str
    history: list[dict[str, JsonValue]] = Field(default_factory=list)

    def recorded(self) -> dict[str, Any]:
        """The JSON RunStarted.input holds (``history`` only when there is one)."""
        return self.model_dump(mode="json", exclude_defaults=True)


@dataclass(frozen=True)
class Outcome:
    """How an orchestration ended.

    The runner records it: SynthesisProduced (or ClarificationRequested), then RunCompleted
    with ``status`` as its outcome.
    """

    status: Status
    answer: str
    evidence_ids: tuple[str, ...] = ()
    step_id: str | None = None
    caused_by: int | None = None


@dataclass
class UsageTotals:
    """Tokens, cost and call counts of one run, summed over every model and tool call."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    model_calls: int = 0
    tool_calls: int = 0
    by_role: dict[str, int] = field(default_factory=dict)

    def add_model_call(self, role: str, response: ModelResponse | None) -> None:
        """Count one model call (a failed call counts, with no tokens)."""
        self.model_calls += 1
        if response is None:
            return
        usage = response.usage
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.total_tokens += usage.total
        self.by_role[role] = self.by_role.get(role, 0) + usage.total
        if response.cost_usd is None:
            self.cost_known = False
        else:
            self.cost_usd += response.cost_usd


@dataclass(frozen=True)
class AgentResult:
    """What a run produced: its id, answer, status, world state, cited evidence and usage."""

    run_id: str
    agent: str
    answer: str
    status: Status
    world_state: dict[str, Any]
    evidence_ids: tuple[str, ...]
    usage: UsageTotals


@dataclass(frozen=True)
class ModelCallInfo:
    """What the ``on_model_call`` hook sees after a model call was recorded."""

    role: str
    request: ModelRequest
    response: ModelResponse | None
    error: str | None
    position: int


@dataclass(frozen=True)
class ChunkInfo:
    """What the ``on_chunk`` hook sees: one chunk of a streamed model call, as it arrives.

    It comes before the call is recorded (the call's ``on_model_call`` follows its last chunk).
    """

    role: str
    chunk: StreamChunk


@dataclass(frozen=True)
class ToolCallInfo:
    """What the ``on_tool_call`` hook sees after a tool call was recorded."""

    name: str
    arguments: object
    result: ToolResult
    call_id: str | None
    position: int


@dataclass(frozen=True)
class RunHooks:
    """Observer callbacks: Tantra's event hooks on model call, tool call and finish.

    They see what was recorded and must not change the run: its events never depend on them.
    ``on_chunk`` sees each chunk of a streamed model call as it arrives (a call streams when its
    request says so; replay hands a recorded answer over as one chunk).
    """

    on_model_call: Callable[[ModelCallInfo], None] | None = None
    on_chunk: Callable[[ChunkInfo], None] | None = None
    on_tool_call: Callable[[ToolCallInfo], None] | None = None
    on_finish: Callable[[AgentResult], None] | None = None


AgentToolHandler = Callable[[object, str | None, int], ToolResult]
"""Runs an agent exposed as a tool: (arguments, step id, position of its ToolCalled) -> result."""


@dataclass(frozen=True)
class RolePrompt:
    """The prompt a role uses: library name, version and exact (template) text."""

    name: str
    version: str
    text: str


@dataclass
class StepHandle:
    """A step in progress; set ``status``/``output``/``error`` before the block ends."""

    id: str
    status: str = "ok"
    output: Any = None
    error: ErrorInfo | None = None

    def fail(self, code: str, message: str) -> None:
        """Mark the step failed (recorded in its StepCompleted) without raising."""
        self.status = "failed"
        self.error = ErrorInfo(type=code, message=message)


@dataclass(frozen=True)
class ToolCall:
    """A tool call as recorded, with the envelope the orchestration should act on.

    ``call_id`` and ``position`` (of ToolCalled) are None when a guardrail refused the call
    before it was made; ``evidence`` holds the ids the result added.
    """

    call_id: str | None
    position: int | None
    result: ToolResult
    evidence: tuple[str, ...]


def model_id(model: ChatModel) -> str:
    """The model id a `provider:model` name refers to (the name itself otherwise)."""
    prefix = f"{model.provider}:"
    return model.name[len(prefix) :] if model.name.startswith(prefix) else model.name


class Orchestration(Protocol):
    """An agent's control flow.

    It records only through the ``RunContext`` it is given, and its events are a deterministic
    function of (input, config, model answers, tool results). Replay serves model answers, tool
    results and settings from the ledger, where JSON objects come back with their keys sorted:
    so an orchestration must never let the order of a mapping's keys change what it records
    (render JSON with ``sort_keys=True``, iterate settings mappings sorted).
    """

    @property
    def name(self) -> str:
        """The registry name (``pipeline``, ``reasoning``...)."""
        ...

    def roles(self) -> tuple[str, ...]:
        """Every model role this orchestration calls."""
        ...

    def prompt_names(self) -> Mapping[str, str]:
        """Role -> the library prompt that role's system message is made from."""
        ...

    def run(self, ctx: RunContext, run_input: AgentInput) -> Outcome:
        """Run to an outcome, recording every step through ``ctx``."""
        ...

    def fallback(self, ctx: RunContext, halt: RunHalted) -> Outcome:
        """The graceful answer after a guardrail halted the run (no model calls)."""
        ...
