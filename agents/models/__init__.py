"""Model ports: the `ChatModel` protocol, neutral request/response types, and their adapters.

`StreamingChatModel` is the optional streaming capability (every model here has it) and
`stream_completion` streams through any `ChatModel`, handing a model that cannot stream's answer
over as one chunk.

`OpenAIChatModel` and `AnthropicChatModel` are imported on first use (PEP 562), so importing this
package never imports a vendor SDK; `ScriptedModel` is the deterministic fake for tests and
offline runs. Models are pure ports: they answer requests and never touch the ledger; the
orchestration layer records what they return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentledger.agents.models._protocol import ChatModel, StreamingChatModel, stream_completion
from agentledger.agents.models._registry import model_from_spec
from agentledger.agents.models._scripted import ScriptedModel, estimate_tokens, scripted_tool_call
from agentledger.agents.models._types import (
    Attempt,
    ChunkHandler,
    FinishReason,
    Message,
    ModelPrice,
    ModelRequest,
    ModelResponse,
    PriceTable,
    Role,
    StreamChunk,
    ToolCallRequest,
    Usage,
)
from agentledger.agents.models.errors import (
    MissingAPIKeyError,
    ModelCallError,
    ModelError,
    ScriptExhaustedError,
    ScriptFormatError,
    UnknownModelSpecError,
    UnrecordedCallError,
)

if TYPE_CHECKING:
    from agentledger.agents.models.anthropic import AnthropicChatModel
    from agentledger.agents.models.openai import OpenAIChatModel

__all__ = [
    "AnthropicChatModel",
    "Attempt",
    "ChatModel",
    "ChunkHandler",
    "FinishReason",
    "Message",
    "MissingAPIKeyError",
    "ModelCallError",
    "ModelError",
    "ModelPrice",
    "ModelRequest",
    "ModelResponse",
    "OpenAIChatModel",
    "PriceTable",
    "Role",
    "ScriptExhaustedError",
    "ScriptFormatError",
    "ScriptedModel",
    "StreamChunk",
    "StreamingChatModel",
    "ToolCallRequest",
    "UnknownModelSpecError",
    "UnrecordedCallError",
    "Usage",
    "estimate_tokens",
    "model_from_spec",
    "scripted_tool_call",
    "stream_completion",
]


def __getattr__(name: str) -> object:
    """Import a vendor adapter on first use, so the SDKs load only when needed."""
    if name == "OpenAIChatModel":
        from agentledger.agents.models.openai import OpenAIChatModel

        return OpenAIChatModel
    if name == "AnthropicChatModel":
        from agentledger.agents.models.anthropic import AnthropicChatModel

        return AnthropicChatModel
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
