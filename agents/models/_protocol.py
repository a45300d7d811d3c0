"""The `ChatModel` port: what the orchestrations need from any language model.

This module owns the protocol: `ChatModel` (answer a request), the optional streaming
capability `StreamingChatModel` (answer it chunk by chunk) and `stream_completion`, which streams
through a model that can and gives a model that cannot its one honest default: the whole answer
as a single chunk once it is complete. Implementations live beside it (`OpenAIChatModel`,
`AnthropicChatModel`, `ScriptedModel`) or in user code; nothing here may import a vendor SDK or
the ledger. The port is synchronous on purpose: orchestrations run step by step so a recorded run
replays deterministically.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentledger.agents.models._types import (
    ChunkHandler,
    ModelRequest,
    ModelResponse,
    StreamChunk,
)


@runtime_checkable
class ChatModel(Protocol):
    """A language model that answers one neutral request with one neutral response.

    `name` identifies the configured model for the ledger (`"openai:gpt-4o-mini"`), `provider`
    the vendor (`"openai"`, `"anthropic"`, `"scripted"`). `complete` either returns the answer or
    raises a `ModelError`; it never returns an empty stand-in.
    """

    @property
    def name(self) -> str:
        """The configured model, as `provider:model`."""
        ...

    @property
    def provider(self) -> str:
        """The vendor (or fake) behind this model."""
        ...

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer `request`, retrying transient failures; raise `ModelError` on failure."""
        ...


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A `ChatModel` that can also hand its answer over chunk by chunk as it arrives.

    `stream` streams whatever `request.stream` says, calls `on_chunk` with each `StreamChunk`
    in arrival order, and returns the assembled answer with its `ttft_ms` and `chunks` timings.
    Transient failures are retried only before the first chunk reaches `on_chunk`; after it, a
    failure raises `ModelCallError` at once. What `on_chunk` raises ends the call and propagates.
    """

    def stream(self, request: ModelRequest, on_chunk: ChunkHandler) -> ModelResponse:
        """Answer `request`, handing each chunk to `on_chunk` as it arrives."""
        ...


def stream_completion(
    model: ChatModel, request: ModelRequest, on_chunk: ChunkHandler | None = None
) -> ModelResponse:
    """Answer `request` through `model`, streaming when the model can.

    A `StreamingChatModel` streams (whatever `request.stream` says). Any other model answers
    with `complete`; its text then reaches `on_chunk` as one chunk, at the answer's latency, and
    the response reports no stream timings (it did not stream): a model replaying a record
    answers this way.
    """
    if isinstance(model, StreamingChatModel):
        return model.stream(request, on_chunk if on_chunk is not None else _ignore)
    response = model.complete(request)
    if on_chunk is not None and response.message.content:
        on_chunk(StreamChunk(at_ms=response.latency_ms, text=response.message.content))
    return response


def _ignore(chunk: StreamChunk) -> None:
    del chunk
