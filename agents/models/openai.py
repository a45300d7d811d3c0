"""The OpenAI Chat Completions adapter: neutral requests in, neutral responses out.

This module owns everything OpenAI-shaped: mapping `ModelRequest` to a Chat Completions call
(tools as `{"type": "function", "function": ...}`, tool results as `tool` messages), mapping the
answer back (tool calls parsed into `ToolCallRequest`, usage, finish reason), streaming
(`stream=True` with `stream_options.include_usage`: each text delta and tool-call fragment handed
on as it arrives, then assembled into one answer with its chunk timings), and translating the
SDK's errors into `ModelCallError`. It works with any OpenAI-compatible server through
`base_url`.

It is the only module that imports `openai`. It must not record anything (the orchestration layer
records the answers) and must not keep the API key anywhere but inside the SDK client. The SDK's
own retries are off (`max_retries=0`): every attempt goes through `_retry` and is recorded; a
stream is retried only before its first chunk reached the caller.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import httpx2
import openai  # noqa: TID251 (this module is the OpenAI adapter)

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

__all__ = ["OpenAIChatModel"]

API_KEY_ENV = "OPENAI_API_KEY"
PROVIDER = "openai"

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}
_RETRYABLE_STREAM_ERRORS = frozenset({"server_error", "rate_limit_exceeded", "overloaded"})

T = TypeVar("T")
_chat = openai.types.chat


class OpenAIChatModel:
    """A `ChatModel` backed by OpenAI Chat Completions (or any OpenAI-compatible server).

    The API key comes from `api_key` or `OPENAI_API_KEY` and lives only inside the SDK client;
    `repr()` never shows it. `sleep` and `jitter` drive the backoff between attempts.
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
        timeout_s: float = 60.0,
        jitter: Jitter = default_jitter,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        if not key:
            raise MissingAPIKeyError(provider=PROVIDER, env_var=API_KEY_ENV)
        self._model = model
        self._prices = prices if prices is not None else PriceTable.default()
        self._policy = RetryPolicy(max_attempts=max_attempts)
        self._sleep = sleep
        self._jitter = jitter
        self._client = openai.OpenAI(
            api_key=key,
            base_url=base_url,
            http_client=http_client,
            max_retries=0,
            timeout=timeout_s,
        )

    @property
    def name(self) -> str:
        """`openai:MODEL`."""
        return f"{PROVIDER}:{self._model}"

    @property
    def provider(self) -> str:
        """Always `openai`."""
        return PROVIDER

    @property
    def model(self) -> str:
        """The model id this adapter calls when a request leaves `model` empty."""
        return self._model

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self._model!r}, base_url={str(self._client.base_url)!r})"

    def close(self) -> None:
        """Close the SDK client and its connections."""
        self._client.close()

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Call Chat Completions for `request`, retrying transient failures.

        With `request.stream` the answer is streamed over the wire and assembled, and the
        response reports its chunk timings.
        """
        return self._complete(request, streaming=request.stream, on_chunk=None)

    def stream(self, request: ModelRequest, on_chunk: ChunkHandler) -> ModelResponse:
        """Stream the answer to `request`, handing each text delta or tool-call fragment on.

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
        completions = self._client.chat.completions
        messages = [_message_param(message) for message in request.messages]
        tools = [_tool_param(tool) for tool in request.tools]
        if relay is not None:
            relay.restart()
            stream = completions.create(
                model=model,
                messages=messages,
                tools=tools if tools else openai.omit,
                temperature=_given(request.temperature),
                top_p=_given(request.top_p),
                max_completion_tokens=_given(request.max_tokens),
                stop=_given(request.stop),
                extra_body=request.extra or None,
                stream=True,
                stream_options={"include_usage": True},
            )
            with stream:
                return _assemble_stream(stream, model, relay)
        completion = completions.create(
            model=model,
            messages=messages,
            tools=tools if tools else openai.omit,
            temperature=_given(request.temperature),
            top_p=_given(request.top_p),
            max_completion_tokens=_given(request.max_tokens),
            stop=_given(request.stop),
            extra_body=request.extra or None,
        )
        return _from_completion(completion, model)


def _given(value: T | None) -> T | openai.Omit:
    return openai.omit if value is None else value


def _message_param(message: Message) -> _chat.ChatCompletionMessageParam:
    """Map one neutral message to a Chat Completions message."""
    if message.role == "tool":
        return {
            "role": "tool",
            "content": message.content,
            "tool_call_id": message.tool_call_id or "",
        }
    if message.role == "system":
        if message.name:
            return {"role": "system", "content": message.content, "name": message.name}
        return {"role": "system", "content": message.content}
    if message.role == "user":
        if message.name:
            return {"role": "user", "content": message.content, "name": message.name}
        return {"role": "user", "content": message.content}
    assistant: _chat.ChatCompletionAssistantMessageParam = {
        "role": "assistant",
        "content": message.content if message.content or not message.tool_calls else None,
    }
    if message.name:
        assistant["name"] = message.name
    if message.tool_calls:
        assistant["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call in message.tool_calls
        ]
    return assistant


def _tool_param(tool: dict[str, JsonValue]) -> _chat.ChatCompletionFunctionToolParam:
    """Map a neutral `{name, description, parameters}` schema to an OpenAI function tool."""
    function: openai.types.shared_params.FunctionDefinition = {"name": str(tool["name"])}
    description = tool.get("description")
    if isinstance(description, str):
        function["description"] = description
    parameters = tool.get("parameters")
    function["parameters"] = (
        dict(parameters) if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    )
    strict = tool.get("strict")
    if isinstance(strict, bool):
        function["strict"] = strict
    return {"type": "function", "function": function}


def _usage(usage: openai.types.CompletionUsage | None) -> Usage:
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total=usage.total_tokens,
        cache_read_tokens=details.cached_tokens if details else None,
        cache_write_tokens=details.cache_write_tokens if details else None,
    )


def _finish(raw: str | None) -> FinishReason:
    return _FINISH_REASONS.get(raw, "other") if raw is not None else "other"


def _from_completion(completion: _chat.ChatCompletion, requested_model: str) -> ModelResponse:
    """Map a non-streamed completion to a neutral response (first choice only)."""
    if not completion.choices:
        return ModelResponse(
            message=Message.assistant(),
            finish_reason="error",
            usage=_usage(completion.usage),
            model=completion.model or requested_model,
            provider=PROVIDER,
            raw_id=completion.id,
        )
    choice = completion.choices[0]
    calls = [
        ToolCallRequest.from_raw(call.id, call.function.name, call.function.arguments)
        if isinstance(call, _chat.ChatCompletionMessageFunctionToolCall)
        else ToolCallRequest.from_raw(call.id, call.custom.name, call.custom.input)
        for call in choice.message.tool_calls or []
    ]
    content = choice.message.content or choice.message.refusal or ""
    return ModelResponse(
        message=Message.assistant(content, calls),
        finish_reason=_finish(choice.finish_reason),
        raw_finish_reason=choice.finish_reason,
        usage=_usage(completion.usage),
        model=completion.model or requested_model,
        provider=PROVIDER,
        raw_id=completion.id,
    )


@dataclass
class _PartialCall:
    """A tool call being assembled from streamed fragments."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _assemble_stream(
    chunks: Iterable[_chat.ChatCompletionChunk], requested_model: str, relay: ChunkRelay
) -> ModelResponse:
    """Fold streamed chunks (text, tool-call argument fragments, final usage) into one answer.

    Each text delta and tool-call fragment goes to `relay` as it arrives.
    """
    text: list[str] = []
    refusal: list[str] = []
    calls: dict[int, _PartialCall] = {}
    finish: str | None = None
    usage: openai.types.CompletionUsage | None = None
    raw_id: str | None = None
    model = ""
    for chunk in chunks:
        raw_id = raw_id or chunk.id
        model = model or chunk.model
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
                relay.emit(text=delta.content)
            if delta.refusal:
                refusal.append(delta.refusal)
                relay.emit(text=delta.refusal)
            for fragment in delta.tool_calls or []:
                partial = calls.setdefault(fragment.index, _PartialCall())
                if fragment.id:
                    partial.id = fragment.id
                if fragment.function is not None:
                    name = ""
                    if fragment.function.name and not partial.name:
                        partial.name = name = fragment.function.name
                    if fragment.function.arguments:
                        partial.arguments.append(fragment.function.arguments)
                    relay.emit(
                        tool_index=fragment.index,
                        tool_name=name,
                        tool_arguments=fragment.function.arguments or "",
                    )
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    tool_calls = [
        ToolCallRequest.from_raw(
            partial.id or f"call_{index + 1}", partial.name, "".join(partial.arguments)
        )
        for index, partial in sorted(calls.items())
    ]
    return ModelResponse(
        message=Message.assistant("".join(text) or "".join(refusal), tool_calls),
        finish_reason=_finish(finish),
        raw_finish_reason=finish,
        usage=_usage(usage),
        model=model or requested_model,
        provider=PROVIDER,
        raw_id=raw_id,
    )


def _classify(error: Exception) -> Failure | None:
    """Translate an OpenAI SDK error into a neutral failure; None for anything else."""
    name = type(error).__name__
    if isinstance(error, openai.APIStatusError):
        retryable = is_retryable_status(error.status_code)
        should_retry = error.response.headers.get("x-should-retry")
        if should_retry in ("true", "false"):
            retryable = should_retry == "true"
        return Failure(
            error_type=name,
            message=error.message,
            retryable=retryable,
            status_code=error.status_code,
            retry_after_s=retry_after_seconds(error.response.headers),
        )
    if isinstance(error, openai.APIConnectionError | httpx2.TransportError):
        return Failure(error_type=name, message=str(error), retryable=True)
    if isinstance(error, openai.APIError):
        retryable = error.type in _RETRYABLE_STREAM_ERRORS or error.code in _RETRYABLE_STREAM_ERRORS
        return Failure(error_type=name, message=error.message, retryable=retryable)
    if isinstance(error, openai.OpenAIError):
        return Failure(error_type=name, message=str(error), retryable=False)
    return None
