"""An OpenAI Agents SDK tracing processor that records each trace as a ledger run.

``LedgerTracingProcessor(ledger)`` is an ``agents.tracing.TracingProcessor``: register it
(``set_trace_processors([processor])`` or ``add_trace_processor(processor)``) and every trace the
SDK starts becomes a ledger run (agent ``openai-agents``, tag ``openai-agents``, run id
`trace_run_id` of the trace id, input the trace's workflow name, group id and metadata),
recorded with catalogue events through the public `RunRecorder` as its spans end:

- an agent span is a step named ``agent <name>``: StepStarted when it starts, StepCompleted
  (its tools, handoffs and output type as ``output``; ``failed`` with the span's error) when it
  ends; a guardrail span is a step ``guardrail <name>`` whose StepCompleted says whether it
  tripped, after a GuardrailTripped when it did; a custom span is a step named after it;
- a generation span (Chat Completions) or response span (Responses API) is a ModelCalled
  through `RunRecorder.model_call`: the request messages, the answer, the model, its settings
  (``params``), usage and latency; the agent's instructions are also its ``prompt`` (named after
  the agent), so a diff names a changed instruction;
- a function span is a ToolCalled and its ToolReturned (arguments, result or error, latency);
- a handoff span is a PlanProposed ``{"handoff": {"from": ..., "to": ...}}``;
- the trace's end is RunCompleted, or RunFailed with the first error an agent, turn or task
  span ended with (where the SDK puts the error that ends a run, such as a tripped guardrail's).

Events name the step of the innermost agent, guardrail or custom span around them. Each run is
recorded under the processor's redaction policy (by default secrets only: API keys, tokens,
``authorization`` headers; pass ``redaction=`` for a stricter one): its recorder redacts every
value taken from the SDK before it is stored and records each redaction as a PolicyDecided fact.
Callbacks may come from several threads and tasks, and several traces may be open at once: each
trace has its own recorder, which is thread-safe. Must not send anything anywhere but the ledger.

Needs the optional extra: ``pip install 'agentledger[openai-agents]'``; without it, importing
this module raises `ImportError` whose message is `INSTALL_HINT`. The SDK's package is named
``agents``; this module imports it from the installed distribution (`load_agents_sdk`), so a
folder named ``agents`` on ``sys.path`` does not shadow it here.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic_core import to_jsonable_python

from agentledger.agents.integrations._agents_sdk import INSTALL_HINT, load_agents_sdk
from agentledger.ledger import Ledger, RunRecorder
from agentledger.ledger.events import (
    ErrorInfo,
    PromptRef,
    StepCompleted,
    StepStarted,
    ToolErrorInfo,
    Usage,
)
from agentledger.ledger.redaction import RedactionPolicy

load_agents_sdk()

from agents.tracing import (  # noqa: E402 - only once the SDK is found past a shadowing folder
    AgentSpanData,
    CustomSpanData,
    FunctionSpanData,
    GenerationSpanData,
    GuardrailSpanData,
    HandoffSpanData,
    ResponseSpanData,
    Span,
    SpanError,
    TaskSpanData,
    Trace,
    TracingProcessor,
    TurnSpanData,
)

__all__ = [
    "AGENT",
    "INSTALL_HINT",
    "SECRETS_ONLY",
    "TAG",
    "LedgerTracingProcessor",
    "trace_run_id",
]

AGENT = "openai-agents"
"""The agent name of every trace's run."""
TAG = "openai-agents"
"""The tag every trace's run carries (``agentledger runs --tag openai-agents``)."""
PROVIDER = "openai"
SECRETS_ONLY = RedactionPolicy(
    actions={"email": "keep", "phone": "keep", "card": "keep", "iban": "keep"}
)
"""The default redaction: API keys, tokens and secrets go; personal data is kept as sent."""
_TRACES = uuid.UUID("0b7f4a3e-5d2c-5e8f-9a61-6f70656e6169")
_SPAN_ERROR = "AgentsSpanError"
_UNENDED = "SpanNotEnded"


def trace_run_id(trace_id: str) -> str:
    """The run id of an Agents SDK trace's run (UUID 5 of the trace id)."""
    return str(uuid.uuid5(_TRACES, trace_id))


@dataclass
class _Trace:
    """What the processor keeps of one open trace."""

    run: RunRecorder
    step_of: dict[str, str | None] = field(default_factory=dict)
    """Span id -> the step its events belong to (its own, or its nearest recorded ancestor's)."""
    agent_of: dict[str, str | None] = field(default_factory=dict)
    """Span id -> the name of the innermost agent span around it."""
    open_steps: dict[str, str] = field(default_factory=dict)
    """Span id -> step id of the steps started and not yet completed, in start order."""
    error: ErrorInfo | None = None


class LedgerTracingProcessor(TracingProcessor):
    """Records each Agents SDK trace as a ledger run (see the module docstring).

    ``redaction`` is the runs' policy, applied to every value taken from the SDK (None stores
    them as sent);
    ``tags`` are added to each run's tags.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        redaction: RedactionPolicy | None = SECRETS_ONLY,
        tags: Sequence[str] = (),
    ) -> None:
        self._ledger = ledger
        self._policy = redaction
        self._tags = [TAG, *(tag for tag in tags if tag != TAG)]
        self._lock = threading.Lock()
        self._traces: dict[str, _Trace] = {}
        self._run_ids: list[str] = []

    @property
    def run_ids(self) -> list[str]:
        """The run ids of the traces recorded so far, in the order they started."""
        with self._lock:
            return list(self._run_ids)

    # Traces ----------------------------------------------------------------------------------

    def on_trace_start(self, trace: Trace) -> None:
        """Start the trace's run."""
        exported = trace.export() or {}
        started = {
            "workflow": trace.name,
            "group_id": exported.get("group_id"),
            "metadata": exported.get("metadata"),
        }
        run = self._ledger.record_run(
            AGENT,
            input=self._clean({k: v for k, v in started.items() if v is not None}),
            tags=self._tags,
            run_id=trace_run_id(trace.trace_id),
            redaction=self._policy,  # the recorder redacts every value and records the facts
        )
        with self._lock:
            self._traces[trace.trace_id] = _Trace(run)
            self._run_ids.append(run.run_id)

    def on_trace_end(self, trace: Trace) -> None:
        """Close the steps still open, then complete the run (or fail it, see the module doc)."""
        with self._lock:
            state = self._traces.pop(trace.trace_id, None)
        if state is None:
            return
        for step_id in reversed(list(state.open_steps.values())):
            error = ErrorInfo(type=_UNENDED, message="the trace ended before this span did")
            state.run.record(StepCompleted(step_id=step_id, status="failed", error=error))
        if state.error is None:
            state.run.complete()
        else:
            state.run.fail(state.error)

    # Spans -----------------------------------------------------------------------------------

    def on_span_start(self, span: Span[Any]) -> None:
        """Start a step for an agent, guardrail or custom span; note where the others belong."""
        with self._lock:
            state = self._traces.get(span.trace_id)
            if state is None:
                return
            parent = span.parent_id
            parent_step = state.step_of.get(parent) if parent else None
            agent = state.agent_of.get(parent) if parent else None
            step = _step(span)
            if isinstance(span.span_data, AgentSpanData):
                agent = span.span_data.name
            state.agent_of[span.span_id] = agent
            state.step_of[span.span_id] = span.span_id if step else parent_step
            if step:
                state.open_steps[span.span_id] = span.span_id
        if step:
            name, args = step
            state.run.record(
                StepStarted(
                    step_id=span.span_id,
                    name=name,
                    args=self._clean(args),
                    parent_step_id=parent_step,
                )
            )

    def on_span_end(self, span: Span[Any]) -> None:
        """Record what the span did (see the module docstring)."""
        with self._lock:
            state = self._traces.get(span.trace_id)
            if state is None:
                return
            step_id = state.step_of.get(span.span_id)
            agent = state.agent_of.get(span.span_id)
            own_step = state.open_steps.pop(span.span_id, None)
        data = span.span_data
        error = _error(span.error)
        if error is not None and isinstance(data, AgentSpanData | TaskSpanData | TurnSpanData):
            with self._lock:  # the run's failure: the SDK puts it on the agent, turn or task span
                state.error = state.error or error
        if own_step is not None:
            self._end_step(state, span, own_step, error)
        elif isinstance(data, GenerationSpanData):
            self._generation(state.run, span, data, step_id=step_id, agent=agent, error=error)
        elif isinstance(data, ResponseSpanData):
            self._response(state.run, span, data, step_id=step_id, agent=agent, error=error)
        elif isinstance(data, FunctionSpanData):
            self._function(state.run, span, data, step_id)
        elif isinstance(data, HandoffSpanData):
            handoff = {"from": data.from_agent, "to": data.to_agent}
            state.run.plan(self._clean({"handoff": handoff}), step_id=step_id)

    def shutdown(self) -> None:
        """Nothing to release: every event is committed when its span ends."""

    def force_flush(self) -> None:
        """Nothing to flush: every event is committed when its span ends."""

    # Recording -------------------------------------------------------------------------------

    def _end_step(
        self, state: _Trace, span: Span[Any], step_id: str, error: ErrorInfo | None
    ) -> None:
        data = span.span_data
        output: Any = None
        if isinstance(data, AgentSpanData):
            output = {
                "tools": data.tools,
                "handoffs": data.handoffs,
                "output_type": data.output_type,
            }
        elif isinstance(data, GuardrailSpanData):
            output = {"triggered": data.triggered}
            if data.triggered:
                state.run.guardrail(
                    data.name,
                    action="tripwire",
                    message=f"guardrail {data.name} tripped",
                    step_id=step_id,
                )
        state.run.record(
            StepCompleted(
                step_id=step_id,
                status="ok" if error is None else "failed",
                output=self._clean(output),
                error=error,
            )
        )

    def _generation(
        self,
        run: RunRecorder,
        span: Span[Any],
        data: GenerationSpanData,
        *,
        step_id: str | None,
        agent: str | None,
        error: ErrorInfo | None,
    ) -> None:
        messages = self._clean(list(data.input or []))
        outputs = self._clean(list(data.output or []))
        system = next(
            (
                m.get("content")
                for m in messages
                if isinstance(m, dict) and m.get("role") == "system"
            ),
            None,
        )
        run.model_call(
            provider=PROVIDER,
            model=data.model or "unknown",
            messages=messages,
            response=_answer(outputs),
            params=self._clean(dict(data.model_config or {})),
            usage=_usage(data.usage),
            latency_ms=_latency(span),
            error=error,
            prompt=_prompt(run, agent, system),
            step_id=step_id,
        )

    def _response(
        self,
        run: RunRecorder,
        span: Span[Any],
        data: ResponseSpanData,
        *,
        step_id: str | None,
        agent: str | None,
        error: ErrorInfo | None,
    ) -> None:
        given = data.input
        items = [{"role": "user", "content": given}] if isinstance(given, str) else given or []
        messages = self._clean(list(items))
        response = data.response
        answer = self._clean(response.model_dump(mode="json")) if response is not None else {}
        instructions = answer.get("instructions")
        usage = data.usage or answer.get("usage")
        params = {
            k: answer[k]
            for k in ("temperature", "top_p", "max_output_tokens", "tool_choice", "truncation")
            if answer.get(k) is not None
        }
        run.model_call(
            provider=PROVIDER,
            model=str(answer.get("model") or "unknown"),
            messages=messages,
            response=_answer(answer.get("output") or []) if response is not None else None,
            params=params,
            usage=_usage(usage if isinstance(usage, Mapping) else None),
            latency_ms=_latency(span),
            error=error,
            prompt=_prompt(run, agent, instructions),
            step_id=step_id,
        )

    def _function(
        self, run: RunRecorder, span: Span[Any], data: FunctionSpanData, step_id: str | None
    ) -> None:
        arguments: Any = data.input
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = data.input
        failure = None
        if span.error is not None:
            failure = ToolErrorInfo(code="tool_error", message=_error_text(span.error))
        run.tool(
            data.name,
            self._clean(arguments),
            result=self._clean(data.output),
            error=failure,
            latency_ms=_latency(span),
            step_id=step_id,
        )

    def _clean(self, value: Any) -> Any:
        """``value`` as JSON (what JSON cannot hold as its text); the run's recorder redacts it."""
        return to_jsonable_python(value, fallback=str)


def _step(span: Span[Any]) -> tuple[str, dict[str, Any]] | None:
    """The name and args of the step a span records, or None for a span that is no step."""
    data = span.span_data
    if isinstance(data, AgentSpanData):
        return f"agent {data.name}", {"agent": data.name}
    if isinstance(data, GuardrailSpanData):
        return f"guardrail {data.name}", {"guardrail": data.name}
    if isinstance(data, CustomSpanData):
        return data.name, {"data": data.data}
    return None


def _answer(outputs: Any) -> dict[str, Any] | None:
    """The recorded answer: the single message of a generation, or the list of its items."""
    if isinstance(outputs, list) and len(outputs) == 1 and isinstance(outputs[0], dict):
        return outputs[0]
    if not outputs:
        return None
    return {"role": "assistant", "output": outputs}


def _prompt(run: RunRecorder, agent: str | None, text: Any) -> PromptRef | None:
    if not isinstance(text, str) or not text:
        return None
    return run.prompt(agent or "instructions", "1", text)


def _usage(usage: Mapping[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    counts = {
        key: int(usage[key])
        for key in ("input_tokens", "output_tokens", "total_tokens")
        if isinstance(usage.get(key), int)
    }
    return Usage(**counts)


def _latency(span: Span[Any]) -> float:
    start, end = span.started_at, span.ended_at
    if not start or not end:
        return 0.0
    elapsed = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    return max(elapsed.total_seconds() * 1000.0, 0.0)


def _error(error: SpanError | None) -> ErrorInfo | None:
    return None if error is None else ErrorInfo(type=_SPAN_ERROR, message=_error_text(error))


def _error_text(error: SpanError) -> str:
    message = str(error.get("message") or "error")
    data = error.get("data")
    if data:
        message += " " + json.dumps(to_jsonable_python(data, fallback=str), sort_keys=True)
    return message
