"""``ScriptedClient``: an offline chat client to record and replay user code without a vendor.

Owns a fake client with the shape of OpenAI's chat completions (``client.chat.completions
.create(model=..., messages=[...], tools=..., stream=...)``, sync ``ScriptedClient`` and async
``AsyncScriptedClient``) that answers from a script, and its instrumentation (``scripted``, in
the ``agentledger.instrumentations`` entry-point group), so ``run.instrument(ScriptedClient(...))``
records each call as ModelCalled and replay answers from the record. It is also the reference
for what an instrumentation does with the `ModelCallPort`: offer the request to ``serve_call``
when the port is replaying (``None`` back means "call the model"), build the response from what
is served, pass a stream through chunk by chunk, and record the finished call. Must not touch
the network.

Script items: a ``str`` is a text answer; a mapping ``{"content": ..., "tool_calls": [{"name":
..., "arguments": {...}}]}`` an answer calling tools; an ``Exception`` is raised (a failed
call). ``answers`` may also be a function of the request's messages, so concurrent callers get
answers by what they asked rather than by arrival order.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentledger.agents.models import ScriptExhaustedError
from agentledger.ledger import CallRecord, ModelCallPort, ServedCall, as_recorded
from agentledger.ledger.events import ErrorInfo

__all__ = [
    "AsyncScriptedClient",
    "ScriptedCallError",
    "ScriptedClient",
    "ScriptedCompletion",
    "ScriptedInstrumentation",
    "scripted_instrumentation",
]

PROVIDER = "scripted"
ClientScript = Sequence[Any] | Callable[[list[dict[str, Any]]], Any]
Latency = float | Callable[[list[dict[str, Any]]], float]


class ScriptedCallError(Exception):
    """A scripted (or replayed) call that failed: ``type`` and ``message`` as recorded."""

    def __init__(self, type: str, message: str) -> None:  # noqa: A002 - the recorded field
        self.type = type
        self.message = message
        super().__init__(f"{type}: {message}")


class _View:
    """Attribute access over a JSON object (``completion.choices[0].message.content``)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return _view(self._data[name])
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


def _view(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _View(value)
    if isinstance(value, list):
        return [_view(v) for v in value]
    return value


class ScriptedCompletion(_View):
    """A chat completion (OpenAI's shape): ``choices[0].message``, ``usage``, ``model_dump()``."""

    def model_dump(self) -> dict[str, Any]:
        """The completion as JSON (what the ledger records)."""
        return copy.deepcopy(dict(self._data))

    @property
    def text(self) -> str:
        """The first choice's text ("" when it only calls tools)."""
        return str(self._data["choices"][0]["message"].get("content") or "")


def completion(model: str, messages: Sequence[Mapping[str, Any]], item: Any) -> dict[str, Any]:
    """The completion JSON a script item answers (deterministic usage from text lengths)."""
    content: str | None
    calls: list[dict[str, Any]] | None
    if isinstance(item, str):
        content, calls = item, None
    elif isinstance(item, Mapping):
        content = item.get("content")
        calls = [
            {
                "id": call.get("id", f"call_{index}"),
                "type": "function",
                "function": {"name": call["name"], "arguments": as_recorded(call["arguments"])},
            }
            for index, call in enumerate(item.get("tool_calls") or [], 1)
        ] or None
    else:
        msg = f"a script item is a str or a mapping, not {type(item).__name__}"
        raise TypeError(msg)
    asked = sum(len(str(m.get("content") or "")) for m in messages)
    said = len(content or "")
    return {
        "id": "scripted",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": calls},
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": asked // 4 + 1,
            "completion_tokens": said // 4 + 1,
            "total_tokens": asked // 4 + said // 4 + 2,
        },
    }


class _Script:
    def __init__(self, answers: ClientScript) -> None:
        self._answers = answers if callable(answers) else list(answers)
        self._used = 0
        self.requests: list[dict[str, Any]] = []

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        messages = request["messages"]
        if callable(self._answers):
            item = self._answers(messages)
        else:
            if self._used >= len(self._answers):
                raise ScriptExhaustedError(
                    name="ScriptedClient",
                    requests_seen=self._used + 1,
                    script_length=len(self._answers),
                )
            item = self._answers[self._used]
            self._used += 1
        if isinstance(item, BaseException):
            raise item
        return completion(request["model"], messages, item)


def _request(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Any, stream: bool, params: Any
) -> dict[str, Any]:
    return {
        "model": model,
        "messages": as_recorded(list(messages)),
        "tools": as_recorded(list(tools)) if tools else None,
        "stream": stream,
        "params": as_recorded(dict(params)),
    }


def _chunks(data: Mapping[str, Any], size: int) -> list[dict[str, Any]]:
    """A completion cut into stream chunks of ``size`` characters (the last carries the rest)."""
    choice = data["choices"][0]
    text = choice["message"].get("content") or ""
    pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    deltas: list[dict[str, Any]] = [
        {"index": 0, "delta": {"content": piece}, "finish_reason": None} for piece in pieces
    ]
    deltas[-1]["finish_reason"] = choice["finish_reason"]
    if choice["message"].get("tool_calls"):
        deltas[-1]["delta"]["tool_calls"] = choice["message"]["tool_calls"]
    return [{"choices": [delta]} for delta in deltas]


class _Completions:
    def __init__(self, owner: ScriptedClient) -> None:
        self._owner = owner

    def create(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Any = None,
        stream: bool = False,
        **params: Any,
    ) -> Any:
        owner = self._owner
        request = _request(model, messages, tools, stream, params)
        data = owner.script.answer(request)
        wait = owner.latency(request["messages"])
        if wait:
            time.sleep(wait)
        if stream:
            return iter([_View(c) for c in _chunks(data, owner.chunk_size)])
        return ScriptedCompletion(data)


class _AsyncCompletions:
    def __init__(self, owner: AsyncScriptedClient) -> None:
        self._owner = owner

    async def create(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Any = None,
        stream: bool = False,
        **params: Any,
    ) -> Any:
        owner = self._owner
        request = _request(model, messages, tools, stream, params)
        data = owner.script.answer(request)
        wait = owner.latency(request["messages"])
        if wait:
            await asyncio.sleep(wait)
        if stream:
            return _aiter([_View(c) for c in _chunks(data, owner.chunk_size)])
        return ScriptedCompletion(data)


async def _aiter(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


class _Chat:
    def __init__(self, completions: Any) -> None:
        self.completions = completions


class _Base:
    def __init__(self, answers: ClientScript, *, latency_s: Latency, chunk_size: int) -> None:
        self.script = _Script(answers)
        self.latency_s = latency_s
        self.chunk_size = chunk_size

    def latency(self, messages: list[dict[str, Any]]) -> float:
        """Seconds the call waits before answering."""
        return float(self.latency_s(messages) if callable(self.latency_s) else self.latency_s)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request the client answered (or failed), in order."""
        return self.script.requests


class ScriptedClient(_Base):
    """A sync chat client answering from a script.

    ``latency_s`` simulates the wait (seconds, or a function of the messages); ``requests``
    lists what it was asked. ``stream=True`` answers chunks of ``chunk_size`` characters
    (``chunk.choices[0].delta.content``).
    """

    def __init__(
        self, answers: ClientScript, *, latency_s: Latency = 0.0, chunk_size: int = 8
    ) -> None:
        super().__init__(answers, latency_s=latency_s, chunk_size=chunk_size)
        self.chat = _Chat(_Completions(self))


class AsyncScriptedClient(_Base):
    """`ScriptedClient` for async code: ``await client.chat.completions.create(...)``."""

    def __init__(
        self, answers: ClientScript, *, latency_s: Latency = 0.0, chunk_size: int = 8
    ) -> None:
        super().__init__(answers, latency_s=latency_s, chunk_size=chunk_size)
        self.chat = _Chat(_AsyncCompletions(self))


# The instrumentation ----------------------------------------------------------------------------


class _Call:
    """One instrumented call: the request as recorded, timings, and how it ends."""

    def __init__(self, request: dict[str, Any]) -> None:
        params = dict(request["params"])
        if request["stream"]:
            params["stream"] = True
        self.record = CallRecord(
            provider=PROVIDER,
            model=request["model"],
            messages=request["messages"],
            params=params,
            tools=request["tools"],
        )
        self.start = time.perf_counter()
        self.chunks: list[list[float]] = []

    def elapsed(self) -> float:
        return (time.perf_counter() - self.start) * 1000.0

    def finished(self, data: Mapping[str, Any], *, stream: bool) -> CallRecord:
        usage = data.get("usage") or {}
        return replace(
            self.record,
            response=dict(data),
            finish_reason=data["choices"][0].get("finish_reason"),
            usage={
                "input_tokens": int(usage.get("prompt_tokens", 0)),
                "output_tokens": int(usage.get("completion_tokens", 0)),
                "total_tokens": int(usage.get("total_tokens", 0)),
            },
            latency_ms=self.elapsed(),
            ttft_ms=self.chunks[0][0] if stream and self.chunks else None,
            chunks=self.chunks if stream else None,
        )

    def failed(self, error: BaseException) -> CallRecord:
        info = ErrorInfo(type=getattr(error, "type", type(error).__name__), message=str(error))
        if isinstance(error, ScriptedCallError):
            info = ErrorInfo(type=error.type, message=error.message)
        return replace(self.record, error=info, latency_ms=self.elapsed())

    def chunk(self, piece: Mapping[str, Any]) -> None:
        delta = piece["choices"][0]["delta"]
        self.chunks.append([round(self.elapsed(), 3), float(len(delta.get("content") or ""))])


def _served_error(served: ServedCall) -> ScriptedCallError:
    assert served.error is not None
    return ScriptedCallError(served.error.type, served.error.message)


def _as_recorded(port: ModelCallPort, data: Any) -> Any:
    """The answer as the run records it (redacted by a port that redacts; see `redacted`)."""
    redact = getattr(port, "redacted", None)
    return redact(data) if redact is not None else data


class _InstrumentedCompletions:
    def __init__(self, client: ScriptedClient, port: ModelCallPort) -> None:
        self._client = client
        self._port = port

    def create(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Any = None,
        stream: bool = False,
        **params: Any,
    ) -> Any:
        call = _Call(_request(model, messages, tools, stream, params))
        served = self._port.serve_call(call.record) if self._port.replaying else None
        if served is not None:
            if served.error is not None:
                self._port.record_call(call.failed(_served_error(served)))
                raise _served_error(served)
            assert served.response is not None
            data = served.response
        else:
            try:
                answer = self._client.chat.completions.create(
                    model=model, messages=messages, tools=tools, stream=stream, **params
                )
            except Exception as error:
                self._port.record_call(call.failed(error))
                raise
            if not stream:
                data = answer._data
                self._port.record_call(call.finished(data, stream=False))
                return ScriptedCompletion(_as_recorded(self._port, data))
            return self._relay(call, answer)
        if stream:
            replayed = iter([_View(c) for c in _chunks(data, self._client.chunk_size)])
            return self._relay(call, replayed, data)
        self._port.record_call(call.finished(data, stream=False))
        return ScriptedCompletion(data)

    def _relay(self, call: _Call, chunks: Iterator[Any], served: Any = None) -> Iterator[Any]:
        """Pass chunks through as they arrive; record the assembled answer at the end."""
        got: list[dict[str, Any]] = []
        for chunk in chunks:
            data = chunk._data
            call.chunk(data)
            got.append(data)
            yield chunk
        self._port.record_call(call.finished(served or _assembled(call, got), stream=True))


class _AsyncInstrumentedCompletions:
    def __init__(self, client: AsyncScriptedClient, port: ModelCallPort) -> None:
        self._client = client
        self._port = port

    async def create(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Any = None,
        stream: bool = False,
        **params: Any,
    ) -> Any:
        call = _Call(_request(model, messages, tools, stream, params))
        served = self._port.serve_call(call.record) if self._port.replaying else None
        if served is not None:
            if served.error is not None:
                await self._port.arecord_call(call.failed(_served_error(served)))
                raise _served_error(served)
            assert served.response is not None
            data = served.response
        else:
            try:
                answer = await self._client.chat.completions.create(
                    model=model, messages=messages, tools=tools, stream=stream, **params
                )
            except Exception as error:
                await self._port.arecord_call(call.failed(error))
                raise
            if not stream:
                data = answer._data
                await self._port.arecord_call(call.finished(data, stream=False))
                return ScriptedCompletion(_as_recorded(self._port, data))
            return self._relay(call, answer)
        if stream:
            replayed = _aiter([_View(c) for c in _chunks(data, self._client.chunk_size)])
            return self._relay(call, replayed, data)
        await self._port.arecord_call(call.finished(data, stream=False))
        return ScriptedCompletion(data)

    async def _relay(
        self, call: _Call, chunks: AsyncIterator[Any], served: Any = None
    ) -> AsyncIterator[Any]:
        got: list[dict[str, Any]] = []
        async for chunk in chunks:
            data = chunk._data
            call.chunk(data)
            got.append(data)
            yield chunk
        await self._port.arecord_call(call.finished(served or _assembled(call, got), stream=True))


def _assembled(call: _Call, chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The completion a stream's chunks add up to."""
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    last: dict[str, Any] = (
        chunks[-1]["choices"][0] if chunks else {"finish_reason": "stop", "delta": {}}
    )
    data = completion(call.record.model, call.record.messages, text)
    choice = data["choices"][0]
    choice["message"]["tool_calls"] = last["delta"].get("tool_calls")
    choice["finish_reason"] = last["finish_reason"]
    return data


class _InstrumentedClient:
    """What ``run.instrument(client)`` returns for a scripted client: the same interface."""

    agentledger_instrumented = True  # the ledger's INSTRUMENTED_MARK: not instrumented twice

    def __init__(self, client: ScriptedClient | AsyncScriptedClient, completions: Any) -> None:
        self._client = client
        self.chat = _Chat(completions)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request the underlying client answered (served calls never reach it)."""
        return self._client.requests


class ScriptedInstrumentation:
    """Instruments `ScriptedClient` and `AsyncScriptedClient` (entry point ``scripted``)."""

    name = "scripted"

    def handles(self, client: object) -> bool:
        """Whether ``client`` is a scripted client."""
        return isinstance(client, ScriptedClient | AsyncScriptedClient)

    def wrap(self, client: object, port: ModelCallPort) -> Any:
        """The client with its ``chat.completions.create`` recorded (or served) via ``port``."""
        if isinstance(client, AsyncScriptedClient):
            return _InstrumentedClient(client, _AsyncInstrumentedCompletions(client, port))
        assert isinstance(client, ScriptedClient)
        return _InstrumentedClient(client, _InstrumentedCompletions(client, port))


def scripted_instrumentation() -> ScriptedInstrumentation:
    """The entry point's factory (``agentledger.instrumentations``: ``scripted``)."""
    return ScriptedInstrumentation()
