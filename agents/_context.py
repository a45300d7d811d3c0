"""``RunContext``: the one door through which everything non-deterministic enters a run.

Owns the ports of a live run (models by role, the tool registry, the recorder, a seeded random
source) and the recording of what comes through them: ``call_model`` records ModelCalled
(messages as plain dicts, response, usage, cost, latency, attempts, error; for a streamed call,
the time to first token and chunk timings, each chunk passed to the ``on_chunk`` hook as it
arrives), ``call_tool`` checks the guardrails, then records ToolCalled, calls the registry and
records ToolReturned (and any trip), ``delta`` records DeltaApplied and keeps the world state
with ``apply_patch``. Ids are run-local counters from the recorder; nothing here reads a clock
for the record (latency and stream timings come from the model and tool envelopes, which replay
serves from the record). Replay builds a RunContext whose models and tools answer from a
recorded run and compares what it records.

Orchestrations record ONLY through this object and must never touch the Ledger. This is the
only module of the agents layer allowed to import ``random``.
"""

from __future__ import annotations

import random  # noqa: TID251 - the run's random port: seeded from, and recorded in, the config
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Literal

from agentledger.agents._config import AgentConfig
from agentledger.agents._types import (
    AgentInput,
    AgentToolHandler,
    ChunkInfo,
    ModelCallInfo,
    Outcome,
    RolePrompt,
    RunHooks,
    StepHandle,
    ToolCall,
    ToolCallInfo,
    UsageTotals,
    model_id,
)
from agentledger.agents.errors import MissingModelError, RunHalted
from agentledger.agents.evidence import evidence_in
from agentledger.agents.guardrails import (
    GuardrailCounters,
    GuardrailLimits,
    Trip,
    check_latency,
    check_tokens,
    check_tool_call,
    check_tool_failures,
)
from agentledger.agents.models import (
    ChatModel,
    ChunkHandler,
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    StreamChunk,
    stream_completion,
)
from agentledger.agents.policy import PolicyDecision, PolicyGate
from agentledger.ledger import RunRecorder, as_recorded
from agentledger.ledger.events import (
    Attempt,
    ClarificationRequested,
    ErrorInfo,
    PromptRef,
    Redaction,
    StepCompleted,
    StepStarted,
)
from agentledger.ledger.events import ToolErrorInfo as LedgerToolError
from agentledger.projections import apply_patch, json_copy
from agentledger.tools import ToolErrorInfo, ToolRegistry, ToolResult, ToolSpec

__all__ = ["RunContext"]


class RunContext:
    """The ports and recording API of one live (or replayed) run."""

    def __init__(
        self,
        *,
        models: Mapping[str, ChatModel],
        tools: ToolRegistry,
        recorder: RunRecorder,
        config: AgentConfig,
        prompts: Mapping[str, RolePrompt],
        run_input: AgentInput,
        agent: str,
        hooks: RunHooks | None = None,
    ) -> None:
        self.models: Mapping[str, ChatModel] = dict(models)
        self.tools = tools
        self.recorder = recorder
        self.config = config
        self.run_input = run_input
        self.agent = agent
        self.hooks = hooks or RunHooks()
        self.random = random.Random(config.seed)  # noqa: S311 - reproducible, not for secrets
        self.policy = PolicyGate(config.policy)
        self.counters = GuardrailCounters()
        self.usage = UsageTotals()
        self._world: dict[str, Any] = {}
        self._evidence: dict[str, None] = {}
        self._agent_tools: dict[str, tuple[ToolSpec, AgentToolHandler]] = {}
        self._prompts = dict(prompts)
        self._dumps: dict[int, tuple[Message, Mapping[str, Any]]] = {}
        self._last_sent: tuple[list[Message], list[Mapping[str, Any]]] = ([], [])
        self._prompt_refs = {
            role: recorder.prompt(p.name, p.version, p.text) for role, p in self._prompts.items()
        }

    # State -----------------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.recorder.run_id

    @property
    def limits(self) -> GuardrailLimits:
        """The run's guardrail limits."""
        return self.config.limits

    @property
    def position(self) -> int:
        """The position of the last event recorded (use it as ``caused_by`` of what follows)."""
        return self.recorder.position

    @property
    def world(self) -> dict[str, Any]:
        """A copy of the world state: the fold of every delta recorded so far."""
        copied: dict[str, Any] = json_copy(self._world)  # type: ignore[assignment]
        return copied

    @property
    def evidence(self) -> tuple[str, ...]:
        """Every evidence id tools returned in this run, in first-seen order."""
        return tuple(self._evidence)

    @property
    def tools_stopped(self) -> bool:
        """Whether a guardrail stopped all further tool use."""
        return self.counters.tools_stopped_by is not None

    def new_id(self, prefix: str) -> str:
        """A run-local id (``action-2``); replay reproduces it."""
        return self.recorder.new_id(prefix)

    def prompt(self, role: str) -> str:
        """The prompt text (template) of ``role``."""
        return self._prompts[role].text

    def prompt_ref(self, role: str) -> PromptRef | None:
        """The recorded reference of ``role``'s prompt."""
        return self._prompt_refs.get(role)

    def model(self, role: str) -> ChatModel:
        """The model that plays ``role``."""
        try:
            return self.models[role]
        except KeyError:
            raise MissingModelError(self.agent, role, self.models) from None

    # Models ----------------------------------------------------------------------------------

    def request(
        self,
        role: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[dict[str, Any]] = (),
        stream: bool = False,
    ) -> ModelRequest:
        """A request for ``role``'s model with the run's sampling parameters.

        ``stream`` asks for the answer to be streamed (see ``call_model``); it is not part of
        what the ledger records as the request.
        """
        return ModelRequest(
            model=model_id(self.model(role)),
            messages=list(messages),
            tools=list(tools),
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            stream=stream,
        )

    def call_model(
        self,
        role: str,
        request: ModelRequest,
        *,
        step_id: str | None = None,
        prompt: PromptRef | None = None,
        caused_by: int | None = None,
    ) -> ModelResponse | None:
        """Call ``role``'s model and record ModelCalled; ``None`` when the call failed for good.

        ``prompt`` overrides the recorded prompt reference (default: the role's prompt).

        A request with ``stream`` set is streamed (``stream_completion``): each chunk goes to the
        ``on_chunk`` hook as it arrives, and ModelCalled records the model's time to first token
        and chunk timings besides the assembled answer. A model that cannot stream (a replay's
        recorded model) hands its whole answer over as one chunk and records no timings, which
        replay does not compare.

        The token budget is checked first: when it is used up, GuardrailTripped is recorded and
        ``RunHalted`` raised (the runner records the fallback answer). A ``ModelCallError`` is
        recorded as a ModelCalled with ``error`` and returned as ``None``: a failure path, not
        an exception.
        """
        trip = check_tokens(self.limits, self.counters)
        if trip is not None:
            position = self._record_trip(trip, step_id)
            raise RunHalted(trip.guardrail, trip.message, position=position)
        model = self.model(role)
        response: ModelResponse | None = None
        failure: ModelCallError | None = None
        try:
            if request.stream:
                response = stream_completion(model, request, self._chunk_handler(role))
            else:
                response = model.complete(request)
        except ModelCallError as error:
            failure = error
        attempts = (
            response.attempts if response is not None else (failure.attempts if failure else [])
        )
        usage = response.usage if response is not None else None
        record = self.recorder.model_call(
            provider=model.provider,
            model=request.model or model_id(model),
            messages=self._dumped_all(request.messages),
            response=response.message.model_dump(mode="json") if response is not None else None,
            params=_params(request),
            tools=request.tools or None,
            usage={
                "input_tokens": usage.input_tokens if usage else 0,
                "output_tokens": usage.output_tokens if usage else 0,
                "total_tokens": usage.total if usage else 0,
            },
            cost_usd=response.cost_usd if response is not None else None,
            latency_ms=response.latency_ms if response is not None else _latency(attempts),
            attempts=[Attempt(**a.model_dump()) for a in attempts],
            error=_model_error(failure) if failure is not None else None,
            finish_reason=response.finish_reason if response is not None else "error",
            prompt=prompt if prompt is not None else self.prompt_ref(role),
            step_id=step_id,
            actor=role,
            caused_by=caused_by,
            served_from=response.served_from if response is not None else None,
            ttft_ms=response.ttft_ms if response is not None else None,
            chunks=response.chunks if response is not None else None,
        )
        if response is not None and record.response is not None:
            message = response.message.model_dump(mode="json")
            if record.response != message:  # redacted: go on with what the run recorded
                recorded = type(response.message).model_validate(record.response)
                response = response.model_copy(update={"message": recorded})
        if response is not None and response.message.tool_calls:
            response = _as_recorded_response(response)
        self.counters.tokens += usage.total if usage else 0
        self.usage.add_model_call(role, response)
        if self.hooks.on_model_call is not None:
            said = str(failure) if failure is not None else None
            self.hooks.on_model_call(ModelCallInfo(role, request, response, said, record.position))
        return response

    def _dumped_all(self, messages: list[Message]) -> list[Mapping[str, Any]]:
        """The request's messages as JSON; a history that grew only dumps what is new.

        The usual request re-sends the previous one's messages first: comparing that prefix is
        one C-level pass over identical objects, and only the messages after it are dumped.
        """
        sent, dumps = self._last_sent
        if len(sent) <= len(messages) and messages[: len(sent)] == sent:
            out = dumps + [self._dumped(m) for m in messages[len(sent) :]]
        else:
            out = [self._dumped(m) for m in messages]
        self._last_sent = (list(messages), out)
        return list(out)

    def _dumped(self, message: Message) -> Mapping[str, Any]:
        """``message`` as read-only JSON, dumped once per message object (messages are immutable).

        A conversation re-sends its whole history with every call; dumping each message once
        keeps a long run's recording linear rather than quadratic in its length, and handing the
        recorder a read-only view lets it compare the history it stored by identity.
        """
        found = self._dumps.get(id(message))
        if found is not None and found[0] is message:
            return found[1]
        dumped = MappingProxyType(message.model_dump(mode="json"))
        self._dumps[id(message)] = (message, dumped)
        return dumped

    # Tools -----------------------------------------------------------------------------------

    def register_agent_tool(self, spec: ToolSpec, handler: AgentToolHandler) -> None:
        """Expose an agent as a tool of this run (the inner agent records through this ctx)."""
        self._agent_tools[spec.name] = (spec, handler)

    def tool_spec(self, name: str) -> ToolSpec | None:
        """The spec of a registered tool or agent tool, or ``None`` when there is none."""
        if name in self._agent_tools:
            return self._agent_tools[name][0]
        return self.tools.get(name).spec if name in self.tools else None

    def tool_schemas(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Neutral schemas to offer a model: the named tools, or every tool and agent tool."""
        wanted = list(names) if names is not None else [*self.tools.names(), *self._agent_tools]
        specs = [self.tool_spec(name) for name in wanted]
        return [spec.neutral_schema() for spec in specs if spec is not None]

    def call_tool(
        self,
        name: str,
        arguments: object,
        *,
        step_id: str | None = None,
        caused_by: int | None = None,
    ) -> ToolResult:
        """Call a tool through the guardrails and record it; never raises for tool failures."""
        return self.invoke_tool(name, arguments, step_id=step_id, caused_by=caused_by).result

    def invoke_tool(
        self,
        name: str,
        arguments: object,
        *,
        step_id: str | None = None,
        caused_by: int | None = None,
    ) -> ToolCall:
        """Like ``call_tool``, also returning the call id, position and evidence added.

        Order: guardrails (stopped tools, call cap, retrieve cap, risk) - a trip records
        GuardrailTripped and refuses the call without calling it; then ToolCalled, the call,
        ToolReturned; then the latency cap (a trip discards the result as a failure) and the
        failure cap (a trip stops all further tool use).
        """
        spec = self.tool_spec(name)
        trip = check_tool_call(self.limits, self.counters, name, spec)
        if trip is not None:
            if trip.guardrail == "tool_call_cap":
                self.counters.tools_stopped_by = trip.guardrail
            position = self._record_trip(trip, step_id)
            refused = _failed(spec, name, f"refused:{trip.guardrail}", trip.message)
            self._tool_hook(name, arguments, refused, None, position)
            return ToolCall(None, None, refused, ())
        self.counters.tool_calls += 1
        self.usage.tool_calls += 1
        if name in self.limits.retrieval_tools:
            self.counters.retrievals += 1
        call_id, position = self.recorder.tool_call(
            name,
            arguments,
            tool_version=spec.version if spec is not None else "unknown",
            risk=spec.risk.value if spec is not None else "low",
            effectful=spec.effectful if spec is not None else False,
            step_id=step_id,
            caused_by=caused_by,
        )
        agent_tool = self._agent_tools.get(name)
        try:
            result = (
                agent_tool[1](arguments, step_id, position)
                if agent_tool is not None
                else self.tools.call(name, arguments)
            )
        except RunHalted as halt:  # an agent tool's inner run hit a halting guardrail
            self.recorder.tool_result(
                call_id,
                ok=False,
                type=spec.result_type if spec is not None else name,
                error=LedgerToolError(code="halted", message=halt.message),
                caused_by=position,
            )
            raise
        self.recorder.tool_result(
            call_id,
            ok=result.ok,
            type=result.type,
            data=result.data,
            error=LedgerToolError(**result.error.model_dump()) if result.error else None,
            latency_ms=result.latency_ms,
            caused_by=position,
            served_from=result.served_from,
        )
        if result.ok and result.data is not None:  # what a replay, served from the record, sees
            data = self.recorder.redacted(as_recorded(result.data))
            result = result.model_copy(update={"data": data})
        late = check_latency(self.limits, name, result) if agent_tool is None else None
        if late is not None:
            self._record_trip(late, step_id)
            result = _failed(spec, name, "latency_cap", late.message)
        added: list[str] = []
        if result.ok:
            for item in evidence_in(result.data):
                if item not in self._evidence:
                    self._evidence[item] = None
                added.append(item)
        else:
            self.counters.tool_failures += 1
            stop = check_tool_failures(self.limits, self.counters)
            if stop is not None:
                self.counters.tools_stopped_by = stop.guardrail
                self._record_trip(stop, step_id)
        self._tool_hook(name, arguments, result, call_id, position)
        return ToolCall(call_id, position, result, tuple(added))

    # Recording -------------------------------------------------------------------------------

    @contextmanager
    def step(
        self, name: str, args: Any = None, *, parent_step_id: str | None = None
    ) -> Iterator[StepHandle]:
        """Record a step: StepStarted, the block's events, StepCompleted (one transaction).

        A guardrail halt inside the step records it as ``skipped``; any other exception as
        ``failed`` (type and message) before it propagates.
        """
        handle = StepHandle(self.recorder.new_id("step"))
        with self.recorder.batch():
            self.recorder.record(
                StepStarted(step_id=handle.id, name=name, args=args, parent_step_id=parent_step_id)
            )
            try:
                yield handle
            except RunHalted as halt:
                self.recorder.record(
                    StepCompleted(
                        step_id=handle.id, status="skipped", output={"halted_by": halt.guardrail}
                    )
                )
                raise
            except BaseException as error:
                info = ErrorInfo(type=type(error).__name__, message=str(error))
                self.recorder.record(StepCompleted(step_id=handle.id, status="failed", error=info))
                raise
            status: Literal["ok", "failed"] = "failed" if handle.status == "failed" else "ok"
            self.recorder.record(
                StepCompleted(
                    step_id=handle.id, status=status, output=handle.output, error=handle.error
                )
            )

    def delta(
        self,
        patch: Mapping[str, Any],
        *,
        step_id: str | None = None,
        source: str | None = None,
        caused_by: int | None = None,
    ) -> int:
        """Record a JSON Merge Patch and apply it to the world state."""
        position = self.recorder.delta(patch, step_id=step_id, source=source, caused_by=caused_by)
        merged = apply_patch(self._world, dict(patch))
        self._world = merged if isinstance(merged, dict) else {}
        return position

    def plan(self, plan: Any, *, step_id: str | None = None, caused_by: int | None = None) -> int:
        """Record a proposed plan."""
        return self.recorder.plan(plan, step_id=step_id, caused_by=caused_by)

    def trip(
        self,
        guardrail: str,
        *,
        action: str,
        message: str,
        limit: Any = None,
        observed: Any = None,
        step_id: str | None = None,
    ) -> int:
        """Record a GuardrailTripped decided by an orchestration (max_steps, evidence...)."""
        return self._record_trip(Trip(guardrail, action, message, limit, observed), step_id)

    def record_policy(self, decision: PolicyDecision) -> int:
        """Record the policy gate's decision."""
        return self.recorder.policy(
            decision.decision,
            reasons=list(decision.reasons),
            redactions=[Redaction(kind=k, count=n) for k, n in decision.redactions],
            risk_tags=list(decision.risk_tags),
            actor="policy",
        )

    def conclude(self, outcome: Outcome) -> None:
        """Record the outcome (answer or clarification) and close the run as completed."""
        if outcome.status == "clarification":
            self.recorder.record(
                ClarificationRequested(
                    question=outcome.answer, step_id=outcome.step_id, caused_by=outcome.caused_by
                )
            )
        else:
            self.recorder.answer(
                outcome.answer,
                evidence_ids=outcome.evidence_ids,
                step_id=outcome.step_id,
                caused_by=outcome.caused_by,
            )
        self.recorder.complete(outcome.status)

    # Internals -------------------------------------------------------------------------------

    def _chunk_handler(self, role: str) -> ChunkHandler | None:
        hook = self.hooks.on_chunk
        if hook is None:
            return None

        def handle(chunk: StreamChunk) -> None:
            hook(ChunkInfo(role, chunk))

        return handle

    def _record_trip(self, trip: Trip, step_id: str | None) -> int:
        return self.recorder.guardrail(
            trip.guardrail,
            action=trip.action,
            message=trip.message,
            limit=trip.limit,
            observed=trip.observed,
            step_id=step_id,
            actor="guardrails",
        )

    def _tool_hook(
        self, name: str, arguments: object, result: ToolResult, call_id: str | None, position: int
    ) -> None:
        if self.hooks.on_tool_call is not None:
            self.hooks.on_tool_call(ToolCallInfo(name, arguments, result, call_id, position))


def _params(request: ModelRequest) -> dict[str, Any]:
    params: dict[str, Any] = {
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "top_p": request.top_p,
        "stop": request.stop,
    }
    return {key: value for key, value in params.items() if value is not None}


def _as_recorded_response(response: ModelResponse) -> ModelResponse:
    """The response with its tool-call arguments as a replay (served from the record) sees them."""
    calls = [
        call.model_copy(update={"arguments": as_recorded(call.arguments)})
        for call in response.message.tool_calls
    ]
    message = response.message.model_copy(update={"tool_calls": calls})
    return response.model_copy(update={"message": message})


def _latency(attempts: Sequence[Any]) -> float:
    return float(sum(a.latency_ms + a.backoff_s * 1000.0 for a in attempts))


def _model_error(error: ModelCallError) -> ErrorInfo:
    return ErrorInfo(type=error.error_type or type(error).__name__, message=str(error))


def _failed(spec: ToolSpec | None, name: str, code: str, message: str) -> ToolResult:
    return ToolResult(
        ok=False,
        type=spec.result_type if spec is not None else name,
        error=ToolErrorInfo(code=code, message=message),
        latency_ms=0.0,
    )
