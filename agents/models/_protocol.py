"""The `ChatModel` port: what the orchestrations need from any language model.

This module owns the protocol only. Implementations live beside it (`OpenAIChatModel`,
`AnthropicChatModel`, `ScriptedModel`) or in user code; nothing here may import a vendor SDK or
the ledger. The port is synchronous on purpose: orchestrations run step by step so a recorded run
replays deterministically.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentledger.agents.models._types import ModelRequest, ModelResponse


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
