"""The Anthropic SDK instrumentation: `run.instrument(anthropic.Anthropic(...))` records calls.

Provides, through the ``agentledger.instrumentations`` entry point ``anthropic``, the
`Instrumentation` for `anthropic.Anthropic` and `anthropic.AsyncAnthropic`. The wrapped client
keeps the client's interface: everything passes through to it except ``messages.create``
(``stream=True`` included) and ``messages.stream`` (the SDK's own `MessageStreamManager`, whose
`MessageStream` - ``text_stream``, ``get_final_message()``... - reads its events through the
recorder), each recorded as one ModelCalled per call (see
`agentledger.agents.models._instrument_calls`; ``messages.stream`` records ``stream: true``
among the params, as the request it sends), the same two of ``beta.messages`` (recorded with
``beta: true`` among the params: the request goes to the beta API), and
``with_options``/``copy``, which return an instrumented copy recording into the same run.
``with_raw_response``, ``with_streaming_response``, ``messages.parse`` and
``beta.messages.parse``/``tool_runner``/``thread`` would call the model unrecorded, so they
raise `UnrecordedCallError`. Other resources (``models``, ``messages.batches``,
``messages.count_tokens``, the rest of ``beta``...) pass through unrecorded.

In replay no network call is made: a recorded answer comes back as a real `Message` (a
`BetaMessage` for ``beta.messages``), a stream as real raw stream events (``message_start``,
each content block's start, its text, JSON or thinking deltas cut to the recorded chunk sizes,
its stop, ``message_delta``, ``message_stop``; their ``BetaRaw...`` classes for beta), and
``messages.stream`` as the SDK's real `MessageStream` (`BetaMessageStream`) over them. A
recorded error is raised again as the SDK class of that name: an `APIStatusError` subclass with
a synthetic ``httpx2`` response of the recorded status (default: the class's own status), body
``None``; `APITimeoutError` and `APIConnectionError` on a synthetic request; anything else as
`APIError`.

Must not record anything but through the port, and never an API key or auth token.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from time import perf_counter
from types import TracebackType
from typing import Any, ClassVar

import anthropic  # noqa: TID251 (this module is the Anthropic SDK's instrumentation)
import httpx2
from anthropic.lib.streaming import (  # noqa: TID251 (the SDK's stream helpers, replayed)
    AsyncMessageStream,
    BetaAsyncMessageStream,
    BetaMessageStream,
    MessageStream,
)

from agentledger.agents.models._instrument_calls import (
    CANCELLED,
    AsyncRecordedStream,
    CallSite,
    RecordedStream,
)
from agentledger.agents.models._instrument_support import (
    InstrumentedClient,
    Passthrough,
    Scrubber,
    distribute,
)
from agentledger.agents.models.errors import UnrecordedCallError
from agentledger.ledger import ModelCallPort
from agentledger.ledger.events import ErrorInfo

__all__ = ["AnthropicInstrumentation", "InstrumentedAnthropic", "instrumentation"]

PROVIDER = "anthropic"
_RAW = "call the method itself: its return value is recorded"
_PARSE = "use messages.create or messages.stream: they are recorded"
_RUNNERS = (
    "it calls the model through the SDK's own client, unrecorded: call "
    "beta.messages.create (or stream) in a loop of your own; each call is recorded"
)
_types = anthropic.types
_beta = anthropic.types.beta
_EVENTS: dict[str, type[Any]] = {
    "message_start": _types.RawMessageStartEvent,
    "content_block_start": _types.RawContentBlockStartEvent,
    "content_block_delta": _types.RawContentBlockDeltaEvent,
    "content_block_stop": _types.RawContentBlockStopEvent,
    "message_delta": _types.RawMessageDeltaEvent,
    "message_stop": _types.RawMessageStopEvent,
}
_BETA_EVENTS: dict[str, type[Any]] = {
    "message_start": _beta.BetaRawMessageStartEvent,
    "content_block_start": _beta.BetaRawContentBlockStartEvent,
    "content_block_delta": _beta.BetaRawContentBlockDeltaEvent,
    "content_block_stop": _beta.BetaRawContentBlockStopEvent,
    "message_delta": _beta.BetaRawMessageDeltaEvent,
    "message_stop": _beta.BetaRawMessageStopEvent,
}
_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
BETA_PARAM = "beta"
"""The param a ``beta.messages`` call records (``true``): its request goes to the beta API."""


class AnthropicInstrumentation:
    """Wraps `anthropic.Anthropic` and `anthropic.AsyncAnthropic` for `RunRecorder.instrument`."""

    name = PROVIDER

    def handles(self, client: object) -> bool:
        """Whether ``client`` is an Anthropic SDK client, sync or async."""
        return isinstance(client, anthropic.Anthropic | anthropic.AsyncAnthropic)

    def wrap(self, client: object, port: ModelCallPort) -> InstrumentedAnthropic:
        """``client`` with its messages recorded through ``port``."""
        assert isinstance(client, anthropic.Anthropic | anthropic.AsyncAnthropic)
        return InstrumentedAnthropic(client, port)


def instrumentation() -> AnthropicInstrumentation:
    """The entry point's factory (group ``agentledger.instrumentations``)."""
    return AnthropicInstrumentation()


class InstrumentedAnthropic(InstrumentedClient):
    """An Anthropic client whose messages are recorded (see the module docstring)."""

    refused: ClassVar[Mapping[str, str]] = {
        "with_raw_response": _RAW,
        "with_streaming_response": _RAW,
    }

    def __init__(
        self, client: anthropic.Anthropic | anthropic.AsyncAnthropic, port: ModelCallPort
    ) -> None:
        super().__init__(client, port)
        secrets = [getattr(client, name, None) for name in ("api_key", "auth_token")]
        scrub = Scrubber(secrets)
        url = f"{str(client.base_url).rstrip('/')}/v1/messages"
        self._site = CallSite(_AnthropicVendor(beta=False), port, scrub, url)
        self._beta_site = CallSite(
            _AnthropicVendor(beta=True), port, scrub, f"{url}?beta=true", implied={BETA_PARAM: True}
        )

    @cached_property
    def messages(self) -> _Messages | _AsyncMessages:
        """``client.messages``, ``create`` and ``stream`` recorded."""
        messages = self._wrapped.messages
        if isinstance(messages, anthropic.resources.messages.AsyncMessages):
            return _AsyncMessages(messages, self._site)
        return _Messages(messages, self._site)

    @cached_property
    def beta(self) -> _Beta:
        """``client.beta``: its ``messages`` recorded as ``client.messages`` are."""
        return _Beta(self._wrapped.beta, self._beta_site)


class _Beta(Passthrough):
    refused: ClassVar[Mapping[str, str]] = {
        "with_raw_response": _RAW,
        "with_streaming_response": _RAW,
    }

    def __init__(self, beta: Any, site: CallSite) -> None:
        super().__init__(beta)
        self._site = site

    @cached_property
    def messages(self) -> _Messages | _AsyncMessages:
        """``client.beta.messages``: ``create`` and ``stream`` recorded, as `BetaMessage`s."""
        messages = self._wrapped.messages
        if isinstance(messages, anthropic.resources.beta.AsyncMessages):
            return _AsyncBetaMessages(messages, self._site)
        return _BetaMessages(messages, self._site)


_MESSAGES_REFUSED = {"with_raw_response": _RAW, "with_streaming_response": _RAW, "parse": _PARSE}
_BETA_MESSAGES_REFUSED = {**_MESSAGES_REFUSED, "tool_runner": _RUNNERS, "thread": _RUNNERS}


class _Messages(Passthrough):
    refused: ClassVar[Mapping[str, str]] = _MESSAGES_REFUSED
    stream_type: ClassVar[type[Any]] = MessageStream
    """The SDK's `MessageStream` class ``stream`` hands out (in replay too)."""

    def __init__(self, messages: Any, site: CallSite) -> None:
        super().__init__(messages)
        self._site = site

    def create(self, **kwargs: Any) -> Any:
        """``messages.create(...)``, recorded (served from the record in replay)."""
        return self._site.call(self._wrapped.create, kwargs)

    def stream(self, **kwargs: Any) -> _StreamManager:
        """``messages.stream(...)``: the SDK's stream helper, its events recorded."""
        return _StreamManager(self._wrapped, self._site, kwargs, self.stream_type)


class _BetaMessages(_Messages):
    refused: ClassVar[Mapping[str, str]] = _BETA_MESSAGES_REFUSED
    stream_type: ClassVar[type[Any]] = BetaMessageStream


class _AsyncMessages(Passthrough):
    refused: ClassVar[Mapping[str, str]] = _MESSAGES_REFUSED
    stream_type: ClassVar[type[Any]] = AsyncMessageStream
    """The SDK's `AsyncMessageStream` class ``stream`` hands out (in replay too)."""

    def __init__(self, messages: Any, site: CallSite) -> None:
        super().__init__(messages)
        self._site = site

    async def create(self, **kwargs: Any) -> Any:
        """``await messages.create(...)``, recorded (served from the record in replay)."""
        return await self._site.acall(self._wrapped.create, kwargs)

    def stream(self, **kwargs: Any) -> _AsyncStreamManager:
        """``messages.stream(...)`` for ``async with``: the SDK's helper, its events recorded."""
        return _AsyncStreamManager(self._wrapped, self._site, kwargs, self.stream_type)


class _AsyncBetaMessages(_AsyncMessages):
    refused: ClassVar[Mapping[str, str]] = _BETA_MESSAGES_REFUSED
    stream_type: ClassVar[type[Any]] = BetaAsyncMessageStream


def _raw_stream(stream: object) -> Any:
    """The SDK stream a `MessageStream` reads its events from."""
    if not hasattr(stream, "_raw_stream"):
        raise UnrecordedCallError(
            client=type(stream).__qualname__,
            attribute="messages.stream",
            instead="this SDK version's MessageStream has no raw stream to record: use "
            "messages.create(stream=True)",
        )
    return stream._raw_stream


class _StreamManager:
    """``with client.messages.stream(...) as stream``: the SDK's manager, recorded.

    Live, the SDK's real `MessageStreamManager` sends the request and its `MessageStream` reads
    the events through a `RecordedStream`; in replay a real `MessageStream` reads the recorded
    events. Leaving the block closes the stream, which records the call.
    """

    def __init__(
        self, messages: Any, site: CallSite, kwargs: Mapping[str, Any], stream_type: type[Any]
    ) -> None:
        self._messages = messages
        self._site = site
        self._kwargs = kwargs
        self._stream_type = stream_type
        self._manager: Any = None
        self._stream: MessageStream[Any] | None = None

    def __enter__(self) -> MessageStream[Any]:
        site = self._site
        sent, request = site.request(self._kwargs, stream=True)
        started = perf_counter()
        served = site.port.serve_call(request) if site.port.replaying else None
        if served is not None:  # None: live (a rerun's port serves None for a changed request)
            if served.response is None:
                error = site.served_exception(served)
                site.port.record_call(site.served(request, served, started, stream=True))
                raise error
            raw: Any = RecordedStream(None, site, request, started, served=served)
            self._stream = self._stream_type(
                raw, output_format=sent.get("output_format", anthropic.omit)
            )
            return self._stream
        manager = self._messages.stream(**sent)
        try:
            stream: MessageStream[Any] = manager.__enter__()
        except site.vendor.errors as error:
            site.port.record_call(site.failed(request, error, started))
            raise
        recorded: Any = RecordedStream(_raw_stream(stream), site, request, started)
        stream._raw_stream = recorded
        self._manager, self._stream = manager, stream
        return stream

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._manager is not None:
            self._manager.__exit__(exc_type, exc, tb)
        elif self._stream is not None:
            self._stream.close()


class _AsyncStreamManager:
    """``async with client.messages.stream(...) as stream``: as `_StreamManager`, async."""

    def __init__(
        self, messages: Any, site: CallSite, kwargs: Mapping[str, Any], stream_type: type[Any]
    ) -> None:
        self._messages = messages
        self._site = site
        self._kwargs = kwargs
        self._stream_type = stream_type
        self._manager: Any = None
        self._stream: AsyncMessageStream[Any] | None = None

    async def __aenter__(self) -> AsyncMessageStream[Any]:
        site = self._site
        sent, request = site.request(self._kwargs, stream=True)
        started = perf_counter()
        served = site.port.serve_call(request) if site.port.replaying else None
        if served is not None:  # None: live (a rerun's port serves None for a changed request)
            if served.response is None:
                if served.error is not None and served.error.type == CANCELLED:
                    await site.served_cancellation(request, served, started, stream=True)
                error = site.served_exception(served)
                await site.port.arecord_call(site.served(request, served, started, stream=True))
                raise error
            raw: Any = AsyncRecordedStream(None, site, request, started, served=served)
            self._stream = self._stream_type(
                raw, output_format=sent.get("output_format", anthropic.omit)
            )
            return self._stream
        manager = self._messages.stream(**sent)
        try:
            stream: AsyncMessageStream[Any] = await manager.__aenter__()
        except site.vendor.errors as error:
            await site.port.arecord_call(site.failed(request, error, started))
            raise
        except asyncio.CancelledError:  # given up on before it answered: the model was asked
            await site.port.arecord_call(site.cancelled(request, started))
            raise
        recorded: Any = AsyncRecordedStream(_raw_stream(stream), site, request, started)
        stream._raw_stream = recorded
        self._manager, self._stream = manager, stream
        return stream

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._manager is not None:
            await self._manager.__aexit__(exc_type, exc, tb)
        elif self._stream is not None:
            await self._stream.close()


class _AnthropicVendor:
    """How `CallSite` handles Anthropic: its errors, its stream events, its objects."""

    provider = PROVIDER
    errors: tuple[type[Exception], ...] = (anthropic.APIError,)

    def __init__(self, *, beta: bool) -> None:
        self._message: type[Any] = _beta.BetaMessage if beta else _types.Message
        self._events = _BETA_EVENTS if beta else _EVENTS

    def omitted(self, value: object) -> bool:
        return isinstance(value, anthropic.Omit | anthropic.NotGiven)

    def outcome(self, response: Mapping[str, Any]) -> tuple[dict[str, int], str | None]:
        usage = response.get("usage") or {}
        read = usage.get("cache_read_input_tokens") or 0
        written = usage.get("cache_creation_input_tokens") or 0
        prompt = (usage.get("input_tokens") or 0) + read + written
        output = usage.get("output_tokens") or 0
        return {
            "input_tokens": prompt,
            "output_tokens": output,
            "total_tokens": prompt + output,
        }, response.get("stop_reason")

    def status(self, error: BaseException) -> int | None:
        return error.status_code if isinstance(error, anthropic.APIStatusError) else None

    def assembler(self) -> _MessageAssembler:
        return _MessageAssembler()

    def response(self, response: Mapping[str, Any]) -> Any:
        return self._message.model_validate(response)

    def chunks(self, response: Mapping[str, Any], sizes: Sequence[float]) -> list[Any]:
        return [
            self._events[event["type"]].model_validate(event) for event in _events(response, sizes)
        ]

    def exception(self, error: ErrorInfo, status: int | None, url: str) -> Exception:
        request = httpx2.Request("POST", url)
        found = getattr(anthropic, error.type, None)
        cls = found if isinstance(found, type) and issubclass(found, anthropic.APIError) else None
        if cls is not None and issubclass(cls, anthropic.APIStatusError):
            own = getattr(cls, "status_code", None)
            status = status or (own if isinstance(own, int) else 500)
        if status is not None:
            response = httpx2.Response(status, request=request)
            if cls is not None and issubclass(cls, anthropic.APIStatusError):
                try:
                    return cls(error.message, response=response, body=None)
                except TypeError:  # a subclass with a constructor of its own
                    pass
            return anthropic.APIStatusError(error.message, response=response, body=None)
        if cls is not None and issubclass(cls, anthropic.APITimeoutError):
            return cls(request=request)
        if cls is not None and issubclass(cls, anthropic.APIConnectionError):
            return cls(message=error.message, request=request)
        return anthropic.APIError(error.message, request, body=None)


class _MessageAssembler:
    """Folds raw stream events into the `Message` JSON they make."""

    def __init__(self) -> None:
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._parts: dict[int, list[str]] = {}

    def add(self, event: Any) -> int:
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            key = delta.type
            if key == "text_delta":
                text = delta.text
            elif key == "input_json_delta":
                text = delta.partial_json
            elif key == "thinking_delta":
                text = delta.thinking
            else:
                self._other_delta(event.index, delta)
                return 0
            self._parts.setdefault(event.index, []).append(text)
            return len(text)
        if kind == "message_start":
            self._message = event.message.model_dump(mode="json")
        elif kind == "content_block_start":
            self._blocks[event.index] = event.content_block.model_dump(mode="json")
        elif kind == "message_delta":
            self._delta(event)
        return 0

    def _other_delta(self, index: int, delta: Any) -> None:
        block = self._blocks.get(index)
        if block is None:
            return
        if delta.type == "signature_delta":
            block["signature"] = delta.signature
        elif delta.type == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta.citation.model_dump()]
        elif delta.type == "compaction_delta":  # beta: the block's whole content, at once
            block["content"] = delta.content
            block["encrypted_content"] = delta.encrypted_content

    def _delta(self, event: Any) -> None:
        message = self._message if self._message is not None else {}
        self._message = message
        for key, value in event.delta.model_dump(mode="json").items():
            if value is not None or key in ("stop_reason", "stop_sequence"):
                message[key] = value
        usage = message.setdefault("usage", {})
        for key, value in event.usage.model_dump(mode="json").items():
            if value is not None:
                usage[key] = value
        beta_only = {"context_management", "input_transformations"}  # a beta event's own
        for key, value in event.model_dump(mode="json", include=beta_only).items():
            if value is not None:
                message[key] = value

    def result(self) -> dict[str, Any]:
        message = dict(self._message or {"type": "message", "role": "assistant", "content": []})
        content = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            text = "".join(self._parts.get(index, ()))
            kind = block.get("type")
            if kind == "text":
                block["text"] = block.get("text", "") + text
            elif kind == "thinking":
                block["thinking"] = block.get("thinking", "") + text
            elif kind in _TOOL_BLOCKS and text:
                try:
                    block["input"] = json.loads(text)
                except ValueError:  # cut short: the stream ended inside the arguments
                    block["input"] = {}
            content.append(block)
        message["content"] = content
        return message


def _events(message: Mapping[str, Any], sizes: Sequence[float]) -> list[dict[str, Any]]:
    """A recorded message as raw stream events (JSON) whose text is cut to ``sizes``."""
    blocks = list(message.get("content") or [])
    segments = [_block_text(block) for block in blocks]
    deltas: dict[int, list[str]] = {}
    for pieces in distribute(segments, sizes):
        for segment, text in pieces:
            deltas.setdefault(segment, []).append(text)
    usage = dict(message.get("usage") or {})
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 0},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(blocks):
        kind = block.get("type")
        opening = dict(block)
        if kind == "text":
            opening["text"] = ""
            delta_type, field = "text_delta", "text"
        elif kind == "thinking":
            opening["thinking"], opening["signature"] = "", ""
            delta_type, field = "thinking_delta", "thinking"
        elif kind in _TOOL_BLOCKS:
            opening["input"] = {}
            delta_type, field = "input_json_delta", "partial_json"
        else:
            delta_type, field = "", ""
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        for text in deltas.get(index, ()) if delta_type else ():
            delta = {"type": delta_type, field: text}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        if kind == "thinking" and block.get("signature"):
            delta = {"type": "signature_delta", "signature": block["signature"]}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    stop = {key: message.get(key) for key in ("stop_reason", "stop_sequence")}
    if message.get("stop_details") is not None:
        stop["stop_details"] = message["stop_details"]
    final_usage = {key: value for key, value in usage.items() if value is not None}
    final_usage.setdefault("output_tokens", 0)
    events.append({"type": "message_delta", "delta": stop, "usage": final_usage})
    events.append({"type": "message_stop"})
    return events


def _block_text(block: Mapping[str, Any]) -> str:
    """The text a content block streams: its text, thinking, or tool input as JSON."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "thinking":
        return str(block.get("thinking") or "")
    if kind in _TOOL_BLOCKS:
        return json.dumps(block.get("input") or {}, ensure_ascii=False)
    return ""
