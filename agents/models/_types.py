"""Provider-neutral value types for model calls: messages, requests, responses, usage, prices.

This module owns the wire-independent shapes that every `ChatModel` speaks and that the
orchestration layer records: `Message`, `ToolCallRequest`, `ModelRequest` (with its replay
`fingerprint()`), `ModelResponse`, `Usage`, `Attempt`, `StreamChunk` (one piece of a streamed
answer as it arrived) and the `PriceTable` that turns usage into USD. Every model is a frozen
pydantic model with `extra="forbid"` whose JSON form is JSON-native (no NaN or Infinity), so it
can be hashed and stored as it is.

It must not know any vendor: no SDK imports, no vendor field names beyond what the adapters map.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

Role = Literal["system", "user", "assistant", "tool"]
"""Who wrote a message. Tool results travel as `tool` messages answering a call id."""

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error", "other"]
"""Why the model stopped, in neutral terms (the vendor's word stays in `raw_finish_reason`)."""


class _Value(BaseModel):
    """Base of every type here: immutable, strict about fields, JSON-native floats only."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ToolCallRequest(_Value):
    """One tool call the model asked for.

    `arguments` holds the parsed JSON object. When the model sent arguments that are not a JSON
    object (broken JSON, a bare string...), `arguments` is `{}` and `arguments_raw` keeps the text
    exactly as received, so the caller can record a bad-JSON event instead of guessing.
    """

    id: str
    name: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    arguments_raw: str | None = None

    @property
    def arguments_ok(self) -> bool:
        """Whether the model's arguments parsed as a JSON object."""
        return self.arguments_raw is None

    @classmethod
    def from_raw(cls, call_id: str, name: str, raw: str) -> Self:
        """Build a call from the argument text a model produced, keeping unparsable text raw."""
        if not raw.strip():
            return cls(id=call_id, name=name)
        try:
            parsed = json.loads(raw)
        except ValueError:
            return cls(id=call_id, name=name, arguments_raw=raw)
        if not isinstance(parsed, dict):
            return cls(id=call_id, name=name, arguments_raw=raw)
        return cls.model_validate({"id": call_id, "name": name, "arguments": parsed})

    def arguments_json(self) -> str:
        """Render the arguments as the model should see them again: raw text if bad, else JSON."""
        if self.arguments_raw is not None:
            return self.arguments_raw
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


class Message(_Value):
    """One conversation turn in neutral form.

    A `tool` message answers the call named by `tool_call_id`; only `assistant` messages carry
    `tool_calls`. Use the `system`/`user`/`assistant`/`tool` constructors for brevity.
    """

    role: Role
    content: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _check_role_fields(self) -> Self:
        if self.role == "tool" and not self.tool_call_id:
            msg = "a tool message needs the tool_call_id of the call it answers"
            raise ValueError(msg)
        if self.role != "tool" and self.tool_call_id is not None:
            msg = f"only tool messages carry tool_call_id (role is {self.role!r})"
            raise ValueError(msg)
        if self.role != "assistant" and self.tool_calls:
            msg = f"only assistant messages carry tool_calls (role is {self.role!r})"
            raise ValueError(msg)
        return self

    @classmethod
    def system(cls, content: str) -> Self:
        """Build a system prompt."""
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> Self:
        """Build a user turn."""
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: list[ToolCallRequest] | None = None) -> Self:
        """Build an assistant turn, optionally calling tools."""
        return cls(role="assistant", content=content, tool_calls=tool_calls or [])

    @classmethod
    def tool(cls, tool_call_id: str, content: str, *, name: str | None = None) -> Self:
        """Build a tool's result, answering the call `tool_call_id`."""
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)


class ModelRequest(_Value):
    """Everything a model call depends on, in neutral form.

    `model` is the vendor model id to call; an adapter given an empty string calls the model it
    was built for. `tools` are neutral schemas `{"name", "description", "parameters"}` (JSON
    Schema). `extra` is passed to the vendor request body as it is. `stream` asks for the answer
    to be streamed over the wire: `complete` then assembles it (and reports its chunk timings),
    `stream_completion` also hands each chunk to a callback as it arrives. It is not part of the
    recorded request: a streamed and an unstreamed call of the same request are the same call.
    """

    model: str
    messages: list[Message]
    tools: list[dict[str, JsonValue]] = Field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    top_p: float | None = None
    stop: list[str] | None = None
    stream: bool = False
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("messages", mode="wrap")
    @classmethod
    def _messages_once(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> list[Message]:
        """Messages that are already `Message`s (immutable, checked when made) pass as they are.

        Re-checking every message of a long history on every request made a conversation's
        cost grow with the square of its length.
        """
        if isinstance(value, list) and set(map(type, value)) <= {Message}:  # one C-level pass
            return list(value)
        checked: list[Message] = handler(value)
        return checked

    @field_validator("tools")
    @classmethod
    def _tools_are_named(cls, tools: list[dict[str, JsonValue]]) -> list[dict[str, JsonValue]]:
        for index, tool in enumerate(tools):
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                msg = f"tools[{index}] needs a non-empty string 'name'"
                raise ValueError(msg)
        return tools

    def canonical_json(self) -> str:
        """Render the request as canonical JSON: sorted keys, no spaces, UTF-8 kept as is."""
        return json.dumps(
            self.model_dump(mode="json"),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )

    def fingerprint(self) -> str:
        """SHA-256 hex of `canonical_json()`: equal exactly when two requests are identical."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()


class Usage(_Value):
    """Token counts of one call.

    `input_tokens` counts every prompt token, cached or not (for Anthropic: input plus cache reads
    plus cache writes), so the numbers compare across vendors; the cache counts are subsets of it.
    `total` defaults to input plus output.
    """

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    total: int = Field(default=0, ge=0)
    cache_read_tokens: int | None = Field(default=None, ge=0)
    cache_write_tokens: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _default_total(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("total") is None:
            return {
                **data,
                "total": int(data.get("input_tokens") or 0) + int(data.get("output_tokens") or 0),
            }
        return data


class Attempt(_Value):
    """One HTTP attempt of a model call, as the retry loop saw it.

    `status_code` is the HTTP status of a failed attempt (None when it succeeded or no response
    arrived); `backoff_s` is how long the loop slept after this attempt before the next one.
    """

    number: int = Field(ge=1)
    status_code: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    latency_ms: float = Field(ge=0)
    backoff_s: float = Field(default=0.0, ge=0)

    @property
    def succeeded(self) -> bool:
        """Whether this attempt produced the answer."""
        return self.error_type is None


class StreamChunk(_Value):
    """One piece of a streamed answer, as it arrived.

    `at_ms` is when it arrived, in milliseconds since the call started (the origin of the
    response's `latency_ms`, so a retry before the first chunk counts in it). `text` is answer
    text this chunk adds; a tool call arrives as fragments: `tool_name` on the fragment that
    starts call number `tool_index`, `tool_arguments` pieces of its argument JSON after that.
    """

    at_ms: float = Field(ge=0)
    text: str = ""
    tool_index: int | None = Field(default=None, ge=0)
    tool_name: str = ""
    tool_arguments: str = ""

    @property
    def chars(self) -> int:
        """How many characters of the answer this chunk carries (text, tool name, arguments)."""
        return len(self.text) + len(self.tool_name) + len(self.tool_arguments)


ChunkHandler = Callable[[StreamChunk], None]
"""Receives each chunk of a streamed answer as it arrives; what it raises ends the call."""


class ModelResponse(_Value):
    """A model's answer in neutral form, with what an auditor needs about how it was obtained.

    `model` is the model id the vendor reported; `latency_ms` covers the whole call, retries and
    backoff included, while each `Attempt` has its own latency. A streamed answer also reports
    `ttft_ms` (time to its first chunk) and `chunks`, each chunk's `[at_ms, characters]` in
    arrival order (both since the call started); both are None for an answer that did not
    stream. The answer itself (`message`, usage) is the assembled one.
    """

    message: Message
    finish_reason: FinishReason
    usage: Usage = Field(default_factory=Usage)
    model: str
    provider: str
    cost_usd: float | None = None
    latency_ms: float = Field(default=0.0, ge=0)
    attempts: list[Attempt] = Field(default_factory=list)
    raw_id: str | None = None
    raw_finish_reason: str | None = None
    served_from: str | None = None
    """Set when no model answered: ``RUN@POSITION`` of the recorded call this answer repeats."""
    ttft_ms: float | None = Field(default=None, ge=0)
    chunks: list[tuple[float, int]] | None = None

    @field_validator("message")
    @classmethod
    def _message_is_assistant(cls, message: Message) -> Message:
        if message.role != "assistant":
            msg = f"a model answers with an assistant message, not {message.role!r}"
            raise ValueError(msg)
        return message


class ModelPrice(_Value):
    """USD per one million tokens for one model. Cache rates default to the input rate."""

    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)
    cache_read_usd_per_mtok: float | None = Field(default=None, ge=0)
    cache_write_usd_per_mtok: float | None = Field(default=None, ge=0)

    def cost(self, usage: Usage) -> float:
        """Return the USD cost of `usage` at these rates."""
        cache_read = usage.cache_read_tokens or 0
        cache_write = usage.cache_write_tokens or 0
        uncached = max(usage.input_tokens - cache_read - cache_write, 0)
        read_rate = self.cache_read_usd_per_mtok
        write_rate = self.cache_write_usd_per_mtok
        total = (
            uncached * self.input_usd_per_mtok
            + cache_read * (self.input_usd_per_mtok if read_rate is None else read_rate)
            + cache_write * (self.input_usd_per_mtok if write_rate is None else write_rate)
            + usage.output_tokens * self.output_usd_per_mtok
        )
        return total / 1_000_000


_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


def _price(
    inp: float, out: float, read: float | None = None, write: float | None = None
) -> ModelPrice:
    return ModelPrice(
        input_usd_per_mtok=inp,
        output_usd_per_mtok=out,
        cache_read_usd_per_mtok=read,
        cache_write_usd_per_mtok=write,
    )


_DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-4o": _price(2.50, 10.00, 1.25),
    "gpt-4o-mini": _price(0.15, 0.60, 0.075),
    "gpt-4.1": _price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": _price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _price(0.10, 0.40, 0.025),
    "o4-mini": _price(1.10, 4.40, 0.275),
    "gpt-5": _price(1.25, 10.00, 0.125),
    "gpt-5-mini": _price(0.25, 2.00, 0.025),
    "gpt-5-nano": _price(0.05, 0.40, 0.005),
    "claude-opus-4-1": _price(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-5": _price(5.00, 25.00, 0.50, 6.25),
    "claude-sonnet-4-5": _price(3.00, 15.00, 0.30, 3.75),
    "claude-haiku-4-5": _price(1.00, 5.00, 0.10, 1.25),
}


class PriceTable(_Value):
    """Per-model prices. A model not in the table costs `None` (unknown), never 0.

    A dated snapshot id (`gpt-4o-mini-2024-07-18`, `claude-haiku-4-5-20251001`) is priced as its
    base model when the table has no entry of its own. `PriceTable.default()` holds list prices
    of a few OpenAI and Anthropic models as published when this table was written (`as_of`);
    pass your own table, or `default().with_prices(...)`, when those change.
    """

    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    as_of: str | None = None

    @classmethod
    def default(cls) -> PriceTable:
        """Return the built-in table of list prices."""
        return cls(prices=dict(_DEFAULT_PRICES), as_of="2025-11")

    def with_prices(self, prices: dict[str, ModelPrice], *, as_of: str | None = None) -> PriceTable:
        """Return a copy with `prices` added, replacing entries of the same name."""
        return PriceTable(prices={**self.prices, **prices}, as_of=as_of or self.as_of)

    def price_for(self, model: str) -> ModelPrice | None:
        """Return the price of `model` (or of a dated snapshot's base model), or None."""
        if model in self.prices:
            return self.prices[model]
        base = _SNAPSHOT_SUFFIX.sub("", model)
        return self.prices.get(base) if base != model else None

    def cost(self, model: str, usage: Usage) -> float | None:
        """Return the USD for `usage` on `model`, or None when its price is unknown."""
        price = self.price_for(model)
        return None if price is None else price.cost(usage)
