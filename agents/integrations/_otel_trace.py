"""A recorded run as OpenTelemetry spans, following the GenAI semantic conventions.

A run becomes one trace: a root ``invoke_agent`` span for the run, an INTERNAL span per step
(nested by ``parent_step_id``; a sub-agent's step inside the tool call of its parent step that
was running then), a CLIENT ``chat`` span per model call and an INTERNAL ``execute_tool`` span
per tool call, each under its step. Other events (policy decisions, plans, world-state deltas,
guardrails, clarifications, the synthesis, annotations) are span events of the span they
happened in. Timings come from the record: a step runs from its StepStarted to its
StepCompleted, a tool call from its ToolCalled to its ToolReturned and a model call up to its
ModelCalled, with the events placed by timestamps and latencies (see `_timeline`); every span is
then clamped into its parent, so children always nest. Ids are derived, so exporting a run twice
sends the same trace: the trace id is the run's id (a UUID) and a span's id is the first 8
bytes of SHA-256 of ``"<run id>/<position>"`` of the event that opened it. Every span and span
event carries ``agentledger.position`` and ``agentledger.event_hash`` (spans also
``agentledger.run_id``), so a trace leads back to the ledger. Message contents, tool arguments
and results, plans, patches and the answer are exported only with ``include_content`` (off by
default, as the conventions advise).

Needs the optional extra (``pip install 'agentledger[otel]'``); reads the ledger, never writes.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from uuid import UUID

from agentledger.ledger import Ledger, RecordedEvent, parse_timestamp

INSTALL_HINT = "OpenTelemetry export needs the otel extra: pip install 'agentledger[otel]'"

try:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError as missing:  # pragma: no cover - exercised by hiding the packages
    raise ImportError(INSTALL_HINT, name=missing.name) from missing

__all__ = [
    "INSTALL_HINT",
    "default_resource",
    "run_spans",
    "span_id",
    "trace_id",
    "trace_request",
]

SCOPE = "agentledger"


# Ids -------------------------------------------------------------------------------------------


def trace_id(run_id: str) -> int:
    """The trace id of a run: its UUID's 128 bits (the run id without dashes, in hex)."""
    return UUID(run_id).int


def span_id(run_id: str, position: int) -> int:
    """The span id of the span opened by the event at `position`: SHA-256 derived, nonzero."""
    digest = hashlib.sha256(f"{UUID(run_id)}/{position}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


# Building spans --------------------------------------------------------------------------------


@dataclass
class _Span:
    """A span being planned from a run's events (turned into a `ReadableSpan` at the end)."""

    position: int
    name: str
    kind: SpanKind
    parent: _Span | None
    start: int
    end: int | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    links: list[Link] = field(default_factory=list)


@dataclass
class _Planner:
    """Walks a run's events once, opening and closing the spans they describe."""

    ledger: Ledger
    run_id: str
    include_content: bool
    spans: list[_Span] = field(default_factory=list)
    steps: dict[str, _Span] = field(default_factory=dict)
    tools: dict[str, _Span] = field(default_factory=dict)
    running: list[_Span] = field(default_factory=list)
    tool_calls: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    at: dict[int, int] = field(default_factory=dict)
    began: dict[int, int] = field(default_factory=dict)
    root: _Span | None = None
    last: int = 0

    def open(self, record: RecordedEvent, name: str, kind: SpanKind, parent: _Span | None) -> _Span:
        span = _Span(record.position, name, kind, parent, self.at[record.position])
        span.attributes.update(self.link(record))
        self.spans.append(span)
        return span

    def link(self, record: RecordedEvent) -> dict[str, Any]:
        return {
            "agentledger.run_id": self.run_id,
            "agentledger.position": record.position,
            "agentledger.event_hash": record.hash,
            "agentledger.event_kind": record.kind,
        }

    def under(self, step_id: Any) -> _Span:
        """The span an event of `step_id` belongs to: its step's, else the run's."""
        assert self.root is not None
        return self.steps.get(step_id, self.root) if isinstance(step_id, str) else self.root

    def add(self, record: RecordedEvent, payload: dict[str, Any]) -> None:
        kind = record.kind
        if kind == "RunStarted":
            self.run_started(record, payload)
            return
        if self.root is None:  # a run always starts with RunStarted; be lenient anyway
            return
        if kind != "RunAnnotated":
            self.last = max(self.last, self.at[record.position])
        handler = _HANDLERS.get(kind, _Planner.span_event)
        handler(self, record, payload)

    # The run -----------------------------------------------------------------------------------

    def run_started(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        agent = str(p.get("agent", "agent"))
        root = self.open(record, f"invoke_agent {agent}", SpanKind.INTERNAL, None)
        root.attributes.update(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "gen_ai.conversation.id": self.run_id,
            }
        )
        if p.get("tags"):
            root.attributes["agentledger.tags"] = [str(t) for t in p["tags"]]
        models = p.get("config", {}).get("models", {})
        if isinstance(models, dict) and len(models) == 1:
            only = next(iter(models.values()))
            root.attributes["gen_ai.request.model"] = str(only.get("model", ""))
            root.attributes["gen_ai.provider.name"] = str(only.get("provider", ""))
        parent = p.get("parent_run_id")
        if isinstance(parent, str):
            root.attributes["agentledger.parent_run_id"] = parent
            if p.get("relation"):
                root.attributes["agentledger.relation"] = str(p["relation"])
            if p.get("parent_position") is not None:
                root.attributes["agentledger.parent_position"] = int(p["parent_position"])
            try:
                context = _context(parent, 1)
            except ValueError:
                context = None
            if context is not None:
                root.links.append(Link(context, {"agentledger.relation": str(p.get("relation"))}))
        if self.include_content:
            value = p.get("input")
            if value is None and p.get("input_ref"):
                value = self.ledger.blob(p["input_ref"])
            if value is not None:
                root.attributes["gen_ai.input.messages"] = _json(
                    [{"role": "user", "parts": [_text_part(value)]}]
                )
        self.root = root
        self.last = root.start

    def run_completed(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        assert self.root is not None
        self.root.end = self.at[record.position]
        self.root.attributes["agentledger.status"] = "completed"
        self.root.attributes["agentledger.outcome"] = str(p.get("outcome", ""))
        self.root.attributes["agentledger.head_hash"] = record.hash

    def run_failed(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        assert self.root is not None
        self.root.end = self.at[record.position]
        error = p.get("error") or {}
        self.root.attributes["agentledger.status"] = "failed"
        self.root.attributes["agentledger.head_hash"] = record.hash
        self.root.attributes["error.type"] = str(error.get("type", "RunFailed"))
        self.root.error = str(error.get("message", ""))

    # Steps ---------------------------------------------------------------------------------

    def step_started(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        parent = self.under(p.get("parent_step_id"))
        if p.get("parent_step_id"):  # a sub-agent's step runs inside its caller's tool call
            calling = [tool for tool in self.running if tool.parent is parent]
            parent = calling[-1] if calling else parent
        span = self.open(record, f"step {p.get('name', '')}".rstrip(), SpanKind.INTERNAL, parent)
        span.attributes["agentledger.step_id"] = str(p["step_id"])
        span.attributes["agentledger.step.name"] = str(p.get("name", ""))
        if p.get("actor"):
            span.attributes["agentledger.actor"] = str(p["actor"])
        if self.include_content and p.get("args") is not None:
            span.attributes["agentledger.step.args"] = _json(p["args"])
        self.steps[str(p["step_id"])] = span

    def step_completed(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        span = self.steps.get(str(p.get("step_id")))
        if span is None:
            self.span_event(record, p)
            return
        span.end = self.at[record.position]
        status = str(p.get("status", "ok"))
        span.attributes["agentledger.step.status"] = status
        span.attributes["agentledger.end_position"] = record.position
        span.attributes["agentledger.end_event_hash"] = record.hash
        if status == "failed":
            error = p.get("error") or {}
            span.attributes["error.type"] = str(error.get("type", "StepFailed"))
            span.error = str(error.get("message", "the step failed"))
        if self.include_content and p.get("output") is not None:
            span.attributes["agentledger.step.output"] = _json(p["output"])

    # Model calls -----------------------------------------------------------------------------

    def model_called(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        model = str(p.get("model", ""))
        span = self.open(
            record, f"chat {model}".rstrip(), SpanKind.CLIENT, self.under(p.get("step_id"))
        )
        span.start = self.began.get(record.position, span.start)
        span.end = self.at[record.position]
        usage = p.get("usage") or {}
        attrs = span.attributes
        attrs.update(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": str(p.get("provider", "")),
                "gen_ai.request.model": model,
                "gen_ai.response.model": model,
                "gen_ai.usage.input_tokens": int(usage.get("input_tokens", 0)),
                "gen_ai.usage.output_tokens": int(usage.get("output_tokens", 0)),
                "agentledger.call_id": str(p.get("call_id", "")),
                "agentledger.latency_ms": float(p.get("latency_ms", 0.0)),
            }
        )
        if p.get("finish_reason"):
            attrs["gen_ai.response.finish_reasons"] = [str(p["finish_reason"])]
        attrs.update(_request_params(p.get("params") or {}))
        attrs.update(_call_details(p))
        error = p.get("error")
        if error:
            attrs["error.type"] = str(error.get("type", "ModelCallError"))
            span.error = str(error.get("message", ""))
        response = self.response(p)
        if response is not None:
            calls = response.get("tool_calls") or []
            self.tool_calls[record.position] = [c for c in calls if isinstance(c, dict)]
        if self.include_content:
            attrs.update(self.call_content(p, response))

    def call_content(self, p: Mapping[str, Any], response: dict[str, Any] | None) -> dict[str, Any]:
        """A model call's messages, response and tool definitions, as the conventions name them."""
        found = {
            "gen_ai.input.messages": _json(
                [_message(m) for m in self.ledger.conversation(p["messages_ref"])]
            )
        }
        if response is not None:
            out = _message(response)
            if p.get("finish_reason"):
                out["finish_reason"] = str(p["finish_reason"])
            found["gen_ai.output.messages"] = _json([out])
        if p.get("tools_ref"):
            found["gen_ai.tool.definitions"] = _json(self.ledger.blob(p["tools_ref"]))
        return found

    def response(self, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        ref = payload.get("response_ref")
        if not ref:
            return None
        node = self.ledger.blob(ref)
        message = node.get("message", node) if isinstance(node, dict) else None
        return message if isinstance(message, dict) else None

    # Tool calls ------------------------------------------------------------------------------

    def tool_called(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        tool = str(p.get("tool", ""))
        span = self.open(
            record, f"execute_tool {tool}".rstrip(), SpanKind.INTERNAL, self.under(p.get("step_id"))
        )
        own_id = str(p.get("call_id", ""))
        attrs = span.attributes
        attrs.update(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": self.model_call_id(p) or own_id,
                "agentledger.tool_call_id": own_id,
                "agentledger.tool.version": str(p.get("tool_version", "1")),
                "agentledger.tool.risk": str(p.get("risk", "low")),
                "agentledger.tool.effectful": bool(p.get("effectful", False)),
            }
        )
        if p.get("step_id"):
            attrs["agentledger.step_id"] = str(p["step_id"])
        if self.include_content:
            arguments = p.get("arguments")
            if arguments is None and p.get("arguments_ref"):
                arguments = self.ledger.blob(p["arguments_ref"])
            attrs["gen_ai.tool.call.arguments"] = _json(arguments)
        self.tools[own_id] = span
        self.running.append(span)

    def model_call_id(self, payload: Mapping[str, Any]) -> str | None:
        """The id the model gave this tool call, when the call that caused it asked for it."""
        cause = payload.get("caused_by")
        requested = self.tool_calls.get(cause) if isinstance(cause, int) else None
        if not requested:
            return None
        name = payload.get("tool")
        arguments = payload.get("arguments")
        for exact in (True, False):
            for i, call in enumerate(requested):
                if _call_name(call) != name:
                    continue
                if exact and _call_arguments(call) != arguments:
                    continue
                requested.pop(i)
                found = call.get("id")
                return str(found) if found else None
        return None

    def tool_returned(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        span = self.tools.get(str(p.get("call_id")))
        if span is None:
            self.span_event(record, p)
            return
        if span in self.running:
            self.running.remove(span)
        span.end = self.at[record.position]
        attrs = span.attributes
        attrs["agentledger.end_position"] = record.position
        attrs["agentledger.end_event_hash"] = record.hash
        attrs["agentledger.tool.result_type"] = str(p.get("type", ""))
        attrs["agentledger.latency_ms"] = float(p.get("latency_ms") or 0.0)
        if p.get("served_from"):
            attrs["agentledger.served_from"] = str(p["served_from"])
        if not p.get("ok", True):
            error = p.get("error") or {}
            attrs["error.type"] = str(error.get("code", "tool_error"))
            span.error = str(error.get("message", ""))
        if self.include_content:
            data = p.get("data")
            if data is None and p.get("data_ref"):
                data = self.ledger.blob(p["data_ref"])
            result = {"ok": bool(p.get("ok", True)), "data": data}
            if p.get("error"):
                result["error"] = p["error"]
            attrs["gen_ai.tool.call.result"] = _json(result)

    # Everything else: span events ------------------------------------------------------------

    def span_event(self, record: RecordedEvent, p: dict[str, Any]) -> None:
        attrs = self.link(record)
        del attrs["agentledger.run_id"]
        del attrs["agentledger.event_kind"]
        for key in ("actor", "step_id", "caused_by", "decision", "guardrail", "action", "source"):
            value = p.get(key)
            if value is not None:
                attrs[f"agentledger.{key}"] = value if isinstance(value, int) else str(value)
        for key in ("reasons", "risk_tags", "evidence_ids", "labels"):
            if p.get(key):
                attrs[f"agentledger.{key}"] = [str(v) for v in p[key]]
        if record.kind == "GuardrailTripped":
            attrs["agentledger.message"] = str(p.get("message", ""))
            for key in ("limit", "observed"):
                if p.get(key) is not None:
                    attrs[f"agentledger.{key}"] = _json(p[key])
        if record.kind == "RunAnnotated":
            attrs["agentledger.author"] = str(p.get("author", ""))
            attrs["agentledger.annotated_at"] = record.timestamp
            if p.get("about_position") is not None:
                attrs["agentledger.about_position"] = int(p["about_position"])
        if self.include_content:
            attrs.update(self.event_content(record, p))
        span = self.under(p.get("step_id"))
        span.events.append((record.kind, self.at[record.position], attrs))

    def event_content(self, record: RecordedEvent, p: dict[str, Any]) -> dict[str, Any]:
        kind = record.kind
        if kind == "PlanProposed":
            return {"agentledger.plan": _json(p.get("plan"))}
        if kind == "DeltaApplied":
            return {"agentledger.patch": _json(p.get("patch"))}
        if kind == "ClarificationRequested":
            return {"agentledger.question": str(p.get("question", ""))}
        if kind == "RunAnnotated":
            found = {"agentledger.note": str(p.get("note", ""))}
            if p.get("reason"):
                found["agentledger.reason"] = str(p["reason"])
            return found
        if kind == "SynthesisProduced":
            answer = p.get("answer")
            if answer is None and p.get("answer_ref"):
                answer = self.ledger.blob(p["answer_ref"])
            if answer is not None and self.root is not None:
                self.root.attributes["gen_ai.output.messages"] = _json(
                    [{"role": "assistant", "parts": [_text_part(answer)]}]
                )
            return {"agentledger.answer": answer if isinstance(answer, str) else _json(answer)}
        return {}

    # Finishing -------------------------------------------------------------------------------

    def finish(self) -> list[_Span]:
        """Close what never closed and clamp every span into its parent (parents come first)."""
        for span in self.spans:
            if span.parent is None:
                span.end = max(span.end if span.end is not None else self.last, span.start)
                continue
            parent_start, parent_end = span.parent.start, span.parent.end
            assert parent_end is not None
            if span.end is None:
                span.end = parent_end
                span.attributes["agentledger.unfinished"] = True
            span.start = min(max(span.start, parent_start), parent_end)
            span.end = min(max(span.end, span.start), parent_end)
        for span in self.spans:
            assert span.end is not None
            start, end = span.start, span.end
            span.events = [(n, min(max(t, start), end), a) for n, t, a in span.events]
        return self.spans


_HANDLERS: dict[str, Callable[[_Planner, RecordedEvent, dict[str, Any]], None]] = {
    "RunCompleted": _Planner.run_completed,
    "RunFailed": _Planner.run_failed,
    "StepStarted": _Planner.step_started,
    "StepCompleted": _Planner.step_completed,
    "ModelCalled": _Planner.model_called,
    "ToolCalled": _Planner.tool_called,
    "ToolReturned": _Planner.tool_returned,
}


def run_spans(
    ledger: Ledger,
    run_id: str,
    *,
    include_content: bool = False,
    resource: Resource | None = None,
) -> list[ReadableSpan]:
    """A run's trace as OpenTelemetry SDK spans, root first (see the module's docstring)."""
    records = ledger.events(run_id)
    # The current schema with every default filled in (older versions upcast on the way).
    payloads = [record.event.model_dump(mode="json") for record in records]
    at, began = _timeline(records, payloads)
    planner = _Planner(ledger, run_id, include_content, at=at, began=began)
    for record, payload in zip(records, payloads, strict=True):
        planner.add(record, payload)
    resource = resource if resource is not None else default_resource()
    scope = InstrumentationScope(SCOPE, _version())
    out = []
    for span in planner.finish():
        context = _context(run_id, span.position)
        parent = _context(run_id, span.parent.position) if span.parent is not None else None
        status = (
            Status(StatusCode.ERROR, span.error or None) if span.error is not None else Status()
        )
        out.append(
            ReadableSpan(
                name=span.name,
                context=context,
                parent=parent,
                resource=resource,
                attributes=span.attributes,
                events=[Event(name, attrs, timestamp) for name, timestamp, attrs in span.events],
                links=span.links,
                kind=span.kind,
                status=status,
                start_time=span.start,
                end_time=span.end,
                instrumentation_scope=scope,
            )
        )
    return out


def _timeline(
    records: Sequence[RecordedEvent], payloads: Sequence[Mapping[str, Any]]
) -> tuple[dict[int, int], dict[int, int]]:
    """When each event happened, in nanoseconds, and when each model call began.

    A recorder commits a step's events together, stamping them all at the commit, so inside a
    step the timestamps tell only when the step ended; the recorded latencies tell how long each
    model and tool call took. Walking back from the end, an event happened at its timestamp or
    just before the next thing began, whichever is earlier: a model call ends then and began its
    latency before; a tool call began its latency before it returned (or at ToolCalled, if
    earlier); nothing goes before RunStarted. So calls lie end to end, in order, inside their
    steps. Annotations, added later, keep their own times.
    """
    at: dict[int, int] = {}
    began: dict[int, int] = {}
    if not records:
        return at, began
    floor = _nanos(records[0].timestamp)
    cursor: int | None = None
    tool_ends: dict[str, tuple[int, int]] = {}
    for record, p in zip(reversed(records), reversed(payloads), strict=True):
        stamped = _nanos(record.timestamp)
        if record.kind == "RunAnnotated":
            at[record.position] = stamped
            continue
        moment = max(stamped if cursor is None else min(stamped, cursor), floor)
        if record.kind == "ModelCalled":
            began[record.position] = max(moment - _ms(p.get("latency_ms")), floor)
            cursor = began[record.position]
        elif record.kind == "ToolReturned":
            tool_ends[str(p.get("call_id"))] = (moment, _ms(p.get("latency_ms")))
            cursor = moment
        elif record.kind == "ToolCalled":
            end, latency = tool_ends.pop(str(p.get("call_id")), (moment, 0))
            moment = max(min(moment, end - latency), floor)
            cursor = moment
        else:
            cursor = moment
        at[record.position] = moment
    return at, began


def default_resource() -> Resource:
    """The resource spans are sent under: ``service.name`` agentledger (or $OTEL_SERVICE_NAME).

    Built directly rather than by `Resource.create`, whose detectors add a random instance id:
    a re-export must send the same bytes.
    """
    return Resource(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or "agentledger",
            "service.version": _version(),
            "telemetry.sdk.language": "python",
            "telemetry.sdk.name": "opentelemetry",
        }
    )


def trace_request(
    ledger: Ledger, run_ids: Iterable[str], *, include_content: bool = False
) -> ExportTraceServiceRequest:
    """The OTLP ``ExportTraceServiceRequest`` holding the traces of `run_ids`."""
    spans: list[ReadableSpan] = []
    for run_id in run_ids:
        spans.extend(run_spans(ledger, run_id, include_content=include_content))
    request: ExportTraceServiceRequest = encode_spans(spans)
    return request


# Helpers ---------------------------------------------------------------------------------------


def _nanos(timestamp: str) -> int:
    """A ledger timestamp (RFC 3339 UTC, microseconds) as nanoseconds since the epoch."""
    moment = parse_timestamp(timestamp)
    seconds = calendar.timegm(moment.utctimetuple())
    return seconds * 1_000_000_000 + moment.microsecond * 1000


def _ms(value: Any) -> int:
    """Milliseconds (a recorded latency) as whole nanoseconds; anything unusable is 0."""
    try:
        nanos = round(float(value) * 1_000_000)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(nanos, 0)


def _context(run_id: str, position: int) -> SpanContext:
    return SpanContext(
        trace_id=trace_id(run_id),
        span_id=span_id(run_id, position),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _text_part(value: Any) -> dict[str, Any]:
    return {"type": "text", "content": value if isinstance(value, str) else _json(value)}


_REQUEST_PARAMS = {
    "temperature": ("gen_ai.request.temperature", float),
    "max_tokens": ("gen_ai.request.max_tokens", int),
    "top_p": ("gen_ai.request.top_p", float),
    "top_k": ("gen_ai.request.top_k", float),
    "seed": ("gen_ai.request.seed", int),
    "frequency_penalty": ("gen_ai.request.frequency_penalty", float),
    "presence_penalty": ("gen_ai.request.presence_penalty", float),
}


def _request_params(params: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, (name, kind) in _REQUEST_PARAMS.items():
        value = params.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            found[name] = kind(value)
    stop = params.get("stop")
    if isinstance(stop, list) and stop:
        found["gen_ai.request.stop_sequences"] = [str(s) for s in stop]
    return found


def _call_details(p: Mapping[str, Any]) -> dict[str, Any]:
    """A model call's ledger-side details: actor, step, prompt version, cost, streaming, retries."""
    attrs: dict[str, Any] = {}
    for key in ("actor", "step_id", "served_from"):
        if p.get(key):
            attrs[f"agentledger.{key}"] = str(p[key])
    prompt = p.get("prompt")
    if isinstance(prompt, dict):
        for key in ("name", "version", "hash"):
            attrs[f"agentledger.prompt.{key}"] = str(prompt.get(key, ""))
    for key in ("cost_usd", "ttft_ms"):
        if p.get(key) is not None:
            attrs[f"agentledger.{key}"] = float(p[key])
    if p.get("chunk_count") is not None:
        attrs["agentledger.chunk_count"] = int(p["chunk_count"])
    if len(p.get("attempts") or []) > 1:
        attrs["agentledger.attempts"] = len(p["attempts"])
    return attrs


def _call_name(call: Mapping[str, Any]) -> Any:
    function = call.get("function")
    return call.get("name") or (function.get("name") if isinstance(function, dict) else None)


def _call_arguments(call: Mapping[str, Any]) -> Any:
    if "arguments" in call:
        return call["arguments"]
    function = call.get("function")
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _message(message: Any) -> dict[str, Any]:
    """A recorded chat message in the conventions' form: a role and typed parts."""
    if not isinstance(message, dict):
        return {"role": "user", "parts": [_text_part(message)]}
    role = str(message.get("role") or "user")
    content = message.get("content")
    parts: list[dict[str, Any]] = []
    if role == "tool":
        response = content
        if isinstance(content, str):
            try:
                response = json.loads(content)
            except ValueError:
                response = content
        parts.append(
            {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": response}
        )
    else:
        parts.extend(_content_parts(content))
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": _call_name(call),
                    "arguments": _call_arguments(call),
                }
            )
    out: dict[str, Any] = {"role": role, "parts": parts}
    if message.get("name") and role != "tool":
        out["name"] = str(message["name"])
    return out


def _content_parts(content: Any) -> list[dict[str, Any]]:
    """A message's content as text parts: a string, or a list of (text) content blocks."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, list):
        return [
            {"type": "text", "content": item.get("text", item.get("content"))}
            if isinstance(item, dict) and item.get("type") == "text"
            else _text_part(item)
            for item in content
        ]
    return [_text_part(content)]


def _version() -> str:
    try:
        return version("agentledger")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"
