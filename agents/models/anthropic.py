"""The Anthropic Messages adapter: neutral requests in, neutral responses out.

This module owns everything Anthropic-shaped: splitting system messages out into the `system`
parameter, mapping assistant tool calls to `tool_use` blocks and `tool` messages to `tool_result`
blocks (consecutive results merged into one user message), mapping the answer back (text, tool
calls, usage with cache tokens, `stop_reason`), streaming (`stream=True`: each text delta and
`input_json_delta` fragment handed on as it arrives, then the raw events assembled into one answer
with its chunk timings), and translating the SDK's errors into `ModelCallError`, Anthropic's 529
"overloaded" included.

It is the only module that imports `anthropic`. It must not record anything (the orchestration
layer records the answers) and must not keep the API key anywhere but inside the SDK client. The
SDK's own retries are off (`max_retries=0`): every attempt goes through `_retry` and is recorded;
a stream is retried only before its first chunk reached the caller.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anthropic  # noqa: TID251 (this module is the Anthropic adapter)
import httpx2

from agentledger.agents.models._retry import (
    Failure,
    Jitter,
    RetryPolicy,
    Sleep,
    call_with_retries,
    default_jitter,
    is_retryable_status,
    retry_after_seconds,
)
from agentledger.agents.models._streaming import ChunkRelay, classify_streaming
from agentledger.agents.models._types import (
    ChunkHandler,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    PriceTable,
    ToolCallRequest,
    Usage,
)
from agentledger.agents.models.errors import MissingAPIKeyError

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["AnthropicChatModel"]

API_KEY_ENV = "ANTHROPIC_API_KEY"
PROVIDER = "anthropic"

_wire = anthropic.types

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
# An error event inside a 200 stream carries only its type; Anthropic documents the HTTP status
# each type stands for, which is what the attempt records.
_STREAM_ERROR_STATUS = {
    "overloaded_error": 529,
    "api_error": 500,
    "rate_limit_error": 429,
    "timeout_error": 504,
}


class AnthropicChatModel:
    """A `ChatModel` backed by the Anthropic Messages API.

    The API key comes from `api_key` or `ANTHROPIC_API_KEY` and lives only inside the SDK client;
    `repr()` never shows it. `max_tokens` is used when a request sets none (the API requires
    one). `sleep` and `jitter` drive the backoff between attempts.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.Client | None = None,
        prices: PriceTable | None = None,
        max_attempts: int = 4,
        sleep: Sleep = time.sleep,
        max_tokens: int = 1024,
        timeout_s: float = 60.0,
        jitter: Jitter = default_jitter,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        if not key:
            raise MissingAPIKeyError(provider=PROVIDER, env_var=API_KEY_ENV)
        self._model = model
        self._max_tokens = max_tokens
        self._prices = prices if prices is not None else PriceTable.default()
        self._policy = RetryPolicy(max_attempts=max_attempts)
        self._sleep = sleep
        self._jitter = jitter
        self._client = anthropic.Anthropic(
            api_key=key,
            base_url=base_url,
            http_client=http_client,
            max_retries=0,
            timeout=timeout_s,
        )

    @property
    def name(self) -> str:
        """`anthropic:MODEL`."""
        return f"{PROVIDER}:{self._model}"

    @property
    def provider(self) -> str:
        """Always `anthropic`."""
        return PROVIDER

    @property
    def model(self) -> str:
        """The model id this adapter calls when a request leaves `model` empty."""
        return self._model

    def __repr__(self) -> str:
        return f"AnthropicChatModel(model={self._model!r}, base_url={str(self._client.base_url)!r})"

    def close(self) -> None:
        """Close the SDK client and its connections."""
        self._client.close()

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the Messages API for `request`, retrying transient failures.

        With `request.stream` the answer is streamed over the wire and assembled, and the
        response reports its chunk timings.
        """
        return self._complete(request, streaming=request.stream, on_chunk=None)

    def stream(self, request: ModelRequest, on_chunk: ChunkHandler) -> ModelResponse:
        """Stream the answer to `request`, handing each text delta or tool-input fragment on.

        Retries only before the first chunk reached `on_chunk`.
        """
        return self._complete(request, streaming=True, on_chunk=on_chunk)

    def _complete(
        self, request: ModelRequest, *, streaming: bool, on_chunk: ChunkHandler | None
    ) -> ModelResponse:
        model = request.model or self._model
        started = time.perf_counter()
        relay = ChunkRelay(on_chunk, started) if streaming else None
        answer, attempts = call_with_retries(
            lambda: self._call(model, request, relay),
            classify=_classify if relay is None else classify_streaming(_classify, relay),
            provider=PROVIDER,
            model=model,
            policy=self._policy,
            sleep=self._sleep,
            jitter=self._jitter,
        )
        if relay is not None:
            answer = relay.stamp(answer)
        cost = self._prices.cost(answer.model, answer.usage)
        return answer.model_copy(
            update={
                "attempts": attempts,
                "latency_ms": (time.perf_counter() - started) * 1000.0,
                "cost_usd": cost if cost is not None else self._prices.cost(model, answer.usage),
            }
        )

    def _call(self, model: str, request: ModelRequest, relay: ChunkRelay | None) -> ModelResponse:
        system, messages = _split_messages(request.messages)
        tools = [_tool_param(tool) for tool in request.tools]
        # The 2.x SDK dropped temperature/top_p from its signature: send them in the body, and
        # only when the request sets them (a server that refuses them answers 400, not retried).
        body: dict[str, object] = {
            key: value
            for key, value in (("temperature", request.temperature), ("top_p", request.top_p))
            if value is not None
        }
        body.update(request.extra)
        max_tokens = request.max_tokens or self._max_tokens
        stop_sequences = request.stop if request.stop is not None else anthropic.omit
        if relay is not None:
            relay.restart()
            events = self._client.messages.create(
                model=model,
                max_tokens=max_tokens,
                messages=messages,
                system=system or anthropic.omit,
                tools=tools or anthropic.omit,
                stop_sequences=stop_sequences,
                extra_body=body or None,
                stream=True,
            )
            with events:
                return _assemble_stream(events, model, relay)
        answer = self._client.messages.create(
            model=model,
            max_tokens=max_tokens,
            messages=messages,
            system=system or anthropic.omit,
            tools=tools or anthropic.omit,
            stop_sequences=stop_sequences,
            extra_body=body or None,
        )
        return _from_message(answer, model)


def _split_messages(
    messages: Iterable[Message],
) -> tuple[str, list[_wire.MessageParam]]:
    """Split system text out and map the rest, merging consecutive tool results."""
    system: list[str] = []
    mapped: list[_wire.MessageParam] = []
    pending_results: list[_wire.ToolResultBlockParam] = []

    def flush_results() -> None:
        if pending_results:
            mapped.append({"role": "user", "content": list(pending_results)})
            pending_results.clear()

    for message in messages:
        if message.role == "tool":
            pending_results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id or "",
                    "content": message.content,
                }
            )
            continue
        flush_results()
        if message.role == "system":
            system.append(message.content)
        elif message.role == "user":
            mapped.append({"role": "user", "content": message.content})
        else:
            mapped.append(_assistant_param(message))
    flush_results()
    return "\n\n".join(system), mapped


def _assistant_param(message: Message) -> _wire.MessageParam:
    """Map an assistant turn: plain text, or a text block then one `tool_use` block per call."""
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    blocks: list[_wire.TextBlockParam | _wire.ToolUseBlockParam] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        for call in message.tool_calls
    )
    return {"role": "assistant", "content": blocks}


def _tool_param(tool: dict[str, JsonValue]) -> _wire.ToolParam:
    """Map a neutral `{name, description, parameters}` schema to an Anthropic tool."""
    parameters = tool.get("parameters")
    schema: dict[str, object] = (
        dict(parameters) if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    )
    param: _wire.ToolParam = {"name": str(tool["name"]), "input_schema": schema}
    description = tool.get("description")
    if isinstance(description, str):
        param["description"] = description
    return param


def _usage(
    input_tokens: int, output_tokens: int, cache_read: int | None, cache_write: int | None
) -> Usage:
    """Neutral usage: input counts cache reads and writes too, as OpenAI's prompt tokens do."""
    return Usage(
        input_tokens=input_tokens + (cache_read or 0) + (cache_write or 0),
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def _stop(raw: str | None) -> FinishReason:
    return _STOP_REASONS.get(raw, "other") if raw is not None else "other"


def _from_message(message: _wire.Message, requested_model: str) -> ModelResponse:
    """Map a non-streamed Messages answer to a neutral response."""
    text: list[str] = []
    calls: list[ToolCallRequest] = []
    for block in message.content:
        if isinstance(block, _wire.TextBlock):
            text.append(block.text)
        elif isinstance(block, _wire.ToolUseBlock):
            calls.append(
                ToolCallRequest.model_validate(
                    {"id": block.id, "name": block.name, "arguments": block.input}
                )
            )
    usage = message.usage
    return ModelResponse(
        message=Message.assistant("".join(text), calls),
        finish_reason=_stop(message.stop_reason),
        raw_finish_reason=message.stop_reason,
        usage=_usage(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens,
        ),
        model=message.model or requested_model,
        provider=PROVIDER,
        raw_id=message.id,
    )


@dataclass
class _PartialBlock:
    """A text or tool_use block being assembled from stream deltas."""

    kind: str
    text: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""


def _assemble_stream(
    events: Iterable[_wire.RawMessageStreamEvent], requested_model: str, relay: ChunkRelay
) -> ModelResponse:
    """Fold raw stream events into one answer: text deltas, tool input JSON, final usage.

    Each text delta and tool-input fragment goes to `relay` as it arrives (`tool_index` counts
    the answer's tool calls, not its content blocks).
    """
    blocks: dict[int, _PartialBlock] = {}
    tool_numbers: dict[int, int] = {}
    raw_id: str | None = None
    model = ""
    stop: str | None = None
    input_tokens = output_tokens = 0
    cache_read: int | None = None
    cache_write: int | None = None
    for event in events:
        if isinstance(event, _wire.RawMessageStartEvent):
            raw_id, model = event.message.id, event.message.model
            start = event.message.usage
            input_tokens, output_tokens = start.input_tokens, start.output_tokens
            cache_read = start.cache_read_input_tokens
            cache_write = start.cache_creation_input_tokens
        elif isinstance(event, _wire.RawContentBlockStartEvent):
            block = event.content_block
            if isinstance(block, _wire.TextBlock):
                blocks[event.index] = _PartialBlock("text", [block.text])
                relay.emit(text=block.text)
            elif isinstance(block, _wire.ToolUseBlock):
                blocks[event.index] = _PartialBlock("tool_use", id=block.id, name=block.name)
                tool_numbers[event.index] = len(tool_numbers)
                relay.emit(tool_index=tool_numbers[event.index], tool_name=block.name)
        elif isinstance(event, _wire.RawContentBlockDeltaEvent):
            partial = blocks.get(event.index)
            delta = event.delta
            if partial is not None and isinstance(delta, _wire.TextDelta):
                partial.text.append(delta.text)
                relay.emit(text=delta.text)
            elif partial is not None and isinstance(delta, _wire.InputJSONDelta):
                partial.text.append(delta.partial_json)
                relay.emit(
                    tool_index=tool_numbers.get(event.index), tool_arguments=delta.partial_json
                )
        elif isinstance(event, _wire.RawMessageDeltaEvent):
            stop = event.delta.stop_reason or stop
            output_tokens = event.usage.output_tokens
            input_tokens = event.usage.input_tokens or input_tokens
            cache_read = event.usage.cache_read_input_tokens or cache_read
            cache_write = event.usage.cache_creation_input_tokens or cache_write
    ordered = [blocks[index] for index in sorted(blocks)]
    return ModelResponse(
        message=Message.assistant(
            "".join("".join(block.text) for block in ordered if block.kind == "text"),
            [
                ToolCallRequest.from_raw(block.id, block.name, "".join(block.text))
                for block in ordered
                if block.kind == "tool_use"
            ],
        ),
        finish_reason=_stop(stop),
        raw_finish_reason=stop,
        usage=_usage(input_tokens, output_tokens, cache_read, cache_write),
        model=model or requested_model,
        provider=PROVIDER,
        raw_id=raw_id,
    )


def _classify(error: Exception) -> Failure | None:
    """Translate an Anthropic SDK error into a neutral failure; None for anything else."""
    name = type(error).__name__
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        if status < 400 and error.type in _STREAM_ERROR_STATUS:
            status = _STREAM_ERROR_STATUS[error.type]
        retryable = is_retryable_status(status) if status >= 400 else False
        should_retry = error.response.headers.get("x-should-retry")
        if should_retry in ("true", "false"):
            retryable = should_retry == "true"
        return Failure(
            error_type=name,
            message=error.api_message or error.message,
            retryable=retryable,
            status_code=status,
            retry_after_s=retry_after_seconds(error.response.headers),
        )
    # The SDK's stream reader lets transport errors through unwrapped (a connection dropped
    # mid-stream): they are connection failures like any other.
    if isinstance(
        error, anthropic.APIConnectionError | anthropic.RetryableError | httpx2.TransportError
    ):
        return Failure(error_type=name, message=str(error), retryable=True)
    if isinstance(error, anthropic.AnthropicError):
        return Failure(error_type=name, message=str(error), retryable=False)
    return None
