"""Model and tool ports that answer from a recorded run.

Owns the answering side of replay: ``Record`` (a recorded run's model calls by role and tool
results by call, decoded once with their blobs), ``RecordedModel`` (strict: the role's recorded
answers in order, exactly as recorded, then a live model or a stop), ``CachedModel`` (rerun:
a request identical to a recorded one of that role is served from the record, marked, zero
tokens; any other request goes to the live model; a scripted live model's name is not part of
the request) and ``RecordedTools`` (a ``ToolRegistry`` whose calls are served from the record
in order per tool and arguments, then run live, an effectful tool only when effects are
allowed). Request identity is the ledger's
``request_fingerprint`` computed from the request itself. Must not record events.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentledger.agents.models import (
    Attempt,
    ChatModel,
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    Usage,
)
from agentledger.ledger import Ledger, RecordedEvent, blob_ref, canonical_json
from agentledger.ledger.events import request_fingerprint, upcast
from agentledger.replay.errors import EffectRefusedError, NoLiveModelError
from agentledger.tools import ToolErrorInfo, ToolRegistry, ToolResult

__all__ = [
    "CachedModel",
    "Record",
    "RecordedCall",
    "RecordedModel",
    "RecordedTools",
    "fingerprint_of",
]

SCRIPTED = "scripted"
"""The provider of scripted models (``ScriptedModel``, ``scripted:FILE``)."""


@dataclass(frozen=True)
class RecordedCall:
    """One recorded model call: where, what it asked (fingerprint), what it answered."""

    position: int
    role: str
    provider: str
    model: str
    fingerprint: str
    payload: dict[str, Any]
    response: dict[str, Any] | None


@dataclass(frozen=True)
class RecordedResult:
    """One recorded tool call and its result (``None`` when the run stopped in between)."""

    position: int
    tool: str
    arguments_key: bytes
    effectful: bool
    result: dict[str, Any] | None
    result_position: int | None


class Record:
    """A recorded run's model answers and tool results, decoded once."""

    def __init__(self, ledger: Ledger, run_id: str, events: Sequence[RecordedEvent]) -> None:
        self.run_id = run_id
        refs = [
            e.payload["response_ref"]
            for e in events
            if e.kind == "ModelCalled" and e.payload.get("response_ref")
        ]
        refs += [
            e.payload[k] for e in events for k in ("arguments_ref", "data_ref") if k in e.payload
        ]
        blobs = ledger.blobs(refs) if refs else {}
        self.calls: list[RecordedCall] = []
        self.results: list[RecordedResult] = []
        returned: dict[str, tuple[int, dict[str, Any]]] = {}
        for event in events:
            if event.kind == "ToolReturned":
                payload = upcast(event.kind, event.version, event.payload)
                if payload.get("data_ref"):
                    payload = {**payload, "data": blobs[payload["data_ref"]]}
                returned[payload["call_id"]] = (event.position, payload)
        for event in events:
            if event.kind == "ModelCalled":
                p = event.payload
                response = blobs[p["response_ref"]]["message"] if p.get("response_ref") else None
                self.calls.append(
                    RecordedCall(
                        event.position,
                        str(p.get("actor")),
                        p["provider"],
                        p["model"],
                        request_fingerprint(p),
                        p,
                        response,
                    )
                )
            elif event.kind == "ToolCalled":
                p = event.payload
                arguments = (
                    blobs[p["arguments_ref"]] if p.get("arguments_ref") else p.get("arguments")
                )
                done = returned.get(p["call_id"])
                self.results.append(
                    RecordedResult(
                        event.position,
                        p["tool"],
                        arguments_key(arguments),
                        bool(p.get("effectful", False)),
                        done[1] if done else None,
                        done[0] if done else None,
                    )
                )

    def calls_of(self, role: str, *, upto: int | None = None) -> list[RecordedCall]:
        """The role's recorded calls in order (only those recorded at or before ``upto``)."""
        return [c for c in self.calls if c.role == role and (upto is None or c.position <= upto)]


def arguments_key(arguments: object) -> bytes:
    """Canonical bytes of a tool call's arguments (identical arguments, identical key)."""
    try:
        return canonical_json(arguments)
    except (TypeError, ValueError):
        return repr(arguments).encode()


def fingerprint_of(request: ModelRequest, model: str) -> str:
    """The fingerprint the ledger would record for ``request`` (see ``request_fingerprint``)."""
    parent: str | None = None
    for message in request.messages:
        node = {"message": message.model_dump(mode="json"), "parent_ref": parent}
        parent = blob_ref(canonical_json(node))
    if parent is None:
        parent = blob_ref(canonical_json({"message": None, "parent_ref": None}))
    params: dict[str, Any] = {
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "top_p": request.top_p,
        "stop": request.stop,
    }
    tools_ref = blob_ref(canonical_json(list(request.tools))) if request.tools else None
    return request_fingerprint(
        {
            "model": request.model or model,
            "params": {k: v for k, v in params.items() if v is not None},
            "messages_ref": parent,
            "tools_ref": tools_ref,
        }
    )


def recorded_response(call: RecordedCall, *, served_from: str | None = None) -> ModelResponse:
    """The recorded answer of ``call``; raises the recorded failure when the call failed.

    With ``served_from`` the answer is a rerun's cache hit: no attempts, no tokens, no cost.
    """
    p = call.payload
    if call.response is None:
        error = p.get("error") or {}
        raise RecordedCallError(call, str(error.get("type", "")), str(error.get("message", "")))
    usage = p.get("usage", {})
    if served_from is not None:
        return ModelResponse(
            message=Message.model_validate(call.response),
            finish_reason=p.get("finish_reason") or "stop",
            model=call.model,
            provider=call.provider,
            cost_usd=0.0 if p.get("cost_usd") is not None else None,
            served_from=served_from,
        )
    return ModelResponse(
        message=Message.model_validate(call.response),
        finish_reason=p.get("finish_reason") or "stop",
        usage=Usage(
            input_tokens=usage.get("input_tokens", 0),
            output_tokens=usage.get("output_tokens", 0),
            total=usage.get("total_tokens", 0),
        ),
        model=call.model,
        provider=call.provider,
        cost_usd=p.get("cost_usd"),
        latency_ms=float(p.get("latency_ms", 0.0)),
        attempts=[_attempt(a) for a in p.get("attempts", [])],
        served_from=p.get("served_from"),
    )


def _attempt(recorded: Mapping[str, Any]) -> Attempt:
    return Attempt.model_validate({"latency_ms": 0.0, **recorded})


class RecordedCallError(ModelCallError):
    """A recorded model failure, raised again with the recorded type and message."""

    def __init__(self, call: RecordedCall, error_type: str, message: str) -> None:
        super().__init__(
            provider=call.provider,
            model=call.model,
            status_code=None,
            attempts=[_attempt(a) for a in call.payload.get("attempts", [])],
            retryable=False,
            error_type=error_type or None,
        )
        self._message = message

    def __str__(self) -> str:
        return self._message


class RecordedModel:
    """A role's model answering its recorded calls in order, as recorded.

    Past the record (``upto`` marks its end for a fork), the ``live`` model answers; with no
    live model ``on_exhausted`` decides (replay reports a divergence there).
    """

    def __init__(
        self,
        record: Record,
        role: str,
        provider: str,
        model: str,
        *,
        live: ChatModel | None = None,
        upto: int | None = None,
        on_exhausted: Callable[[str, ModelRequest], ModelResponse] | None = None,
    ) -> None:
        self._calls = deque(record.calls_of(role, upto=upto))
        self._role = role
        self._provider = provider
        self._model = model
        self._live = live
        self._on_exhausted = on_exhausted
        self.live_calls = 0

    @property
    def name(self) -> str:
        """The recorded ``provider:model``."""
        return f"{self._provider}:{self._model}"

    @property
    def provider(self) -> str:
        """The recorded provider."""
        return self._provider

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The next recorded answer; past the record, the live model's."""
        if self._calls:
            return recorded_response(self._calls.popleft())
        if self._live is not None:
            self.live_calls += 1
            return self._live.complete(request)
        if self._on_exhausted is not None:
            return self._on_exhausted(self._role, request)
        raise NoLiveModelError(self._role, self.name)


class CachedModel:
    """A rerun's model: identical requests are served from the record, others go live.

    A request is what the model is asked: model, parameters, messages and tools. A real
    model's name is part of it (another model may answer differently); a scripted model is no
    model but a stand-in for one, so with a scripted live model (``scripted:FILE``) a request
    matches a recorded one of the role whatever either model is called.
    """

    def __init__(
        self,
        record: Record,
        role: str,
        provider: str,
        model: str,
        *,
        live: ChatModel | None,
    ) -> None:
        self._stand_in = live is not None and live.provider == SCRIPTED
        self._by_request: dict[str, deque[RecordedCall]] = defaultdict(deque)
        for call in record.calls_of(role):
            key = call.fingerprint
            if self._stand_in:
                key = request_fingerprint({**call.payload, "model": ""})
            self._by_request[key].append(call)
        self._record = record
        self._role = role
        self._provider = live.provider if live is not None else provider
        self._name = live.name if live is not None else f"{provider}:{model}"
        self._model = model
        self._live = live
        self.served = 0
        self.live_calls = 0

    @property
    def name(self) -> str:
        """The live model's name (the recorded one when there is no live model)."""
        return self._name

    @property
    def provider(self) -> str:
        """The live model's provider."""
        return self._provider

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The recorded answer to an identical request, else the live model's answer."""
        if self._stand_in:  # a script answers whatever it is asked: its file name is no model
            key = fingerprint_of(request.model_copy(update={"model": ""}), "")
        else:
            key = fingerprint_of(request, self._model)
        hits = self._by_request.get(key)
        if hits:
            call = hits.popleft()
            self.served += 1
            return recorded_response(call, served_from=f"{self._record.run_id}@{call.position}")
        if self._live is None:
            raise NoLiveModelError(self._role, f"{self._provider}:{self._model}")
        self.live_calls += 1
        return self._live.complete(request)


class RecordedTools(ToolRegistry):
    """The run's tools, with calls served from the record.

    A call whose tool and arguments match the next unserved recorded call of that tool gets the
    recorded result (``mark`` also marks it served-from-record with zero latency, for reruns).
    Any other call runs the real tool, except an effectful one when ``allow_effects`` is off:
    that raises ``EffectRefusedError`` and the run stops there.
    """

    def __init__(
        self,
        live: ToolRegistry,
        record: Record,
        *,
        allow_effects: bool,
        mark: bool,
        upto: int | None = None,
        strict_order: bool = True,
    ) -> None:
        super().__init__(live)
        self._record_id = record.run_id
        self._queues: dict[str, deque[RecordedResult]] = defaultdict(deque)
        for item in record.results:
            if item.result_position is not None and (upto is None or item.result_position <= upto):
                self._queues[item.tool].append(item)
        self._unanswered = {
            (r.tool, r.arguments_key) for r in record.results if r.result_position is None
        }
        self._allow_effects = allow_effects
        self._mark = mark
        self._strict_order = strict_order
        self.served = 0
        self.live_calls = 0

    def call(self, name: str, arguments: object) -> ToolResult:
        """The recorded result when there is one; else the real tool (effects permitting)."""
        found = self._take(name, arguments_key(arguments))
        if found is not None:
            self.served += 1
            return self._result(found)
        spec = self.get(name).spec if name in self else None
        if spec is not None and spec.effectful and not self._allow_effects:
            key = (name, arguments_key(arguments))
            why = (
                "it was called before the run stopped and may have run"
                if key in self._unanswered
                else "the record holds no identical call"
            )
            raise EffectRefusedError(name, arguments, why)
        self.live_calls += 1
        return super().call(name, arguments)

    def _take(self, name: str, key: bytes) -> RecordedResult | None:
        queue = self._queues.get(name)
        if not queue:
            return None
        if self._strict_order:
            return queue.popleft() if queue[0].arguments_key == key else None
        for index, item in enumerate(queue):
            if item.arguments_key == key:
                del queue[index]
                return item
        return None

    def _result(self, item: RecordedResult) -> ToolResult:
        assert item.result is not None
        p = item.result
        error = p.get("error")
        served_from = (
            f"{self._record_id}@{item.result_position}" if self._mark else p.get("served_from")
        )
        return ToolResult(
            ok=bool(p["ok"]),
            type=str(p["type"]),
            data=p.get("data") if p["ok"] else None,
            error=ToolErrorInfo.model_validate(error) if error else None,
            latency_ms=0.0 if self._mark else float(p.get("latency_ms", 0.0)),
            served_from=served_from,
        )
