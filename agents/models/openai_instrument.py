"""The OpenAI SDK instrumentation: `run.instrument(openai.OpenAI(...))` records every call.

Provides, through the ``agentledger.instrumentations`` entry point ``openai``, the
`Instrumentation` for `openai.OpenAI` and `openai.AsyncOpenAI` (and their subclasses). The
wrapped client keeps the client's interface: everything passes through to it except
``chat.completions.create`` (``stream=True`` included, ``stream_options`` as given; the same
resource reached as ``beta.chat.completions`` too), which is recorded as one ModelCalled per
call (see `agentledger.agents.models._instrument_calls`), and ``with_options``/``copy``, which
return an instrumented copy recording into the same run. ``with_raw_response``,
``with_streaming_response`` and ``chat.completions.parse``/``stream`` (through ``beta`` too)
would call the model unrecorded, so they raise `UnrecordedCallError`. Other resources
(``responses``, ``embeddings``, ``files``, the rest of ``beta``...) pass through unrecorded.

In replay, ``create`` makes no network call: the recorded answer comes back as a real
`ChatCompletion`, or for ``stream=True`` as real `ChatCompletionChunk`s carrying the recorded
text cut to the recorded chunk sizes (a role chunk first, then the text and tool-call
fragments, a finish chunk, and a usage chunk when the recorded answer has usage). A recorded
error is raised again as the SDK class of that name: an `APIStatusError` subclass with a
synthetic ``httpx2`` response of the recorded status (default: the class's status), body
``None``; `APITimeoutError` and `APIConnectionError` on a synthetic request; anything else as
`APIError`.

Streamed answers are recorded as the assembled `ChatCompletion` (first choice's text, refusal
and tool calls per choice; logprobs are not kept). Must not record anything but through the
port, and never an API key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar

import httpx2
import openai  # noqa: TID251 (this module is the OpenAI SDK's instrumentation)

from agentledger.agents.models._instrument_calls import CallSite
from agentledger.agents.models._instrument_support import (
    InstrumentedClient,
    Passthrough,
    Scrubber,
    distribute,
)
from agentledger.ledger import ModelCallPort
from agentledger.ledger.events import ErrorInfo

__all__ = ["InstrumentedOpenAI", "OpenAIInstrumentation", "instrumentation"]

PROVIDER = "openai"
_STATUS = {
    "BadRequestError": 400,
    "AuthenticationError": 401,
    "PermissionDeniedError": 403,
    "NotFoundError": 404,
    "ConflictError": 409,
    "UnprocessableEntityError": 422,
    "RateLimitError": 429,
    "InternalServerError": 500,
}
_STATUS_IN_MESSAGE = re.compile(r"^Error code: (\d{3})\b")
_RAW = "call the method itself: its return value is recorded"
_HELPERS = "use chat.completions.create (with stream=True for a stream): it is recorded"
_chat = openai.types.chat


class OpenAIInstrumentation:
    """Wraps `openai.OpenAI` and `openai.AsyncOpenAI` clients for `RunRecorder.instrument`."""

    name = PROVIDER

    def handles(self, client: object) -> bool:
        """Whether ``client`` is an OpenAI SDK client, sync or async."""
        return isinstance(client, openai.OpenAI | openai.AsyncOpenAI)

    def wrap(self, client: object, port: ModelCallPort) -> InstrumentedOpenAI:
        """``client`` with its chat completions recorded through ``port``."""
        assert isinstance(client, openai.OpenAI | openai.AsyncOpenAI)
        return InstrumentedOpenAI(client, port)


def instrumentation() -> OpenAIInstrumentation:
    """The entry point's factory (group ``agentledger.instrumentations``)."""
    return OpenAIInstrumentation()


class InstrumentedOpenAI(InstrumentedClient):
    """An OpenAI client whose chat completions are recorded (see the module docstring)."""

    refused: ClassVar[Mapping[str, str]] = {
        "with_raw_response": _RAW,
        "with_streaming_response": _RAW,
    }

    def __init__(self, client: openai.OpenAI | openai.AsyncOpenAI, port: ModelCallPort) -> None:
        super().__init__(client, port)
        self._site = CallSite(
            _OpenAIVendor(),
            port,
            Scrubber(_secrets(client)),
            f"{str(client.base_url).rstrip('/')}/chat/completions",
        )

    @cached_property
    def chat(self) -> _Chat:
        """``client.chat``, its completions recorded."""
        return _Chat(self._wrapped.chat, self._site)

    @cached_property
    def beta(self) -> _Beta:
        """``client.beta``: its ``chat`` is the same resource as ``client.chat``, recorded."""
        return _Beta(self._wrapped.beta, self._site)


class _Beta(Passthrough):
    refused: ClassVar[Mapping[str, str]] = {
        "with_raw_response": _RAW,
        "with_streaming_response": _RAW,
    }

    def __init__(self, beta: Any, site: CallSite) -> None:
        super().__init__(beta)
        self._site = site

    @cached_property
    def chat(self) -> _Chat:
        """``client.beta.chat``, its completions recorded as ``client.chat``'s are."""
        return _Chat(self._wrapped.chat, self._site)


class _Chat(Passthrough):
    refused: ClassVar[Mapping[str, str]] = {
        "with_raw_response": _RAW,
        "with_streaming_response": _RAW,
    }

    def __init__(self, chat: Any, site: CallSite) -> None:
        super().__init__(chat)
        self._site = site

    @cached_property
    def completions(self) -> _Completions | _AsyncCompletions:
        """``chat.completions``, ``create`` recorded."""
        completions = self._wrapped.completions
        if isinstance(completions, openai.resources.chat.AsyncCompletions):
            return _AsyncCompletions(completions, self._site)
        return _Completions(completions, self._site)


_COMPLETIONS_REFUSED = {
    "with_raw_response": _RAW,
    "with_streaming_response": _RAW,
    "parse": _HELPERS,
    "stream": _HELPERS,
}


class _Completions(Passthrough):
    refused: ClassVar[Mapping[str, str]] = _COMPLETIONS_REFUSED

    def __init__(self, completions: Any, site: CallSite) -> None:
        super().__init__(completions)
        self._site = site

    def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create(...)``, recorded (served from the record in replay)."""
        return self._site.call(self._wrapped.create, kwargs)


class _AsyncCompletions(Passthrough):
    refused: ClassVar[Mapping[str, str]] = _COMPLETIONS_REFUSED

    def __init__(self, completions: Any, site: CallSite) -> None:
        super().__init__(completions)
        self._site = site

    async def create(self, **kwargs: Any) -> Any:
        """``await chat.completions.create(...)``, recorded (served from the record in replay)."""
        return await self._site.acall(self._wrapped.create, kwargs)


def _secrets(client: openai.OpenAI | openai.AsyncOpenAI) -> list[object]:
    """The client's credentials (whatever of them it holds as text)."""
    return [getattr(client, name, None) for name in ("api_key", "admin_api_key", "webhook_secret")]


class _OpenAIVendor:
    """How `CallSite` handles OpenAI: its errors, its stream chunks, its objects."""

    provider = PROVIDER
    errors: tuple[type[Exception], ...] = (openai.APIError,)

    def omitted(self, value: object) -> bool:
        return isinstance(value, openai.Omit | openai.NotGiven)

    def outcome(self, response: Mapping[str, Any]) -> tuple[dict[str, int], str | None]:
        usage = response.get("usage") or {}
        choices = response.get("choices") or [{}]
        prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
        return {
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": usage.get("total_tokens") or prompt + completion,
        }, choices[0].get("finish_reason")

    def status(self, error: BaseException) -> int | None:
        return error.status_code if isinstance(error, openai.APIStatusError) else None

    def assembler(self) -> _ChatAssembler:
        return _ChatAssembler()

    def response(self, response: Mapping[str, Any]) -> _chat.ChatCompletion:
        return _chat.ChatCompletion.model_validate(response)

    def chunks(
        self, response: Mapping[str, Any], sizes: Sequence[float]
    ) -> list[_chat.ChatCompletionChunk]:
        return [_chat.ChatCompletionChunk.model_validate(c) for c in _chunks(response, sizes)]

    def exception(self, error: ErrorInfo, status: int | None, url: str) -> Exception:
        request = httpx2.Request("POST", url)
        found = getattr(openai, error.type, None)
        cls = found if isinstance(found, type) and issubclass(found, openai.APIError) else None
        if status is None:
            status = _STATUS.get(error.type)
        if status is None and cls is not None and issubclass(cls, openai.APIStatusError):
            match = _STATUS_IN_MESSAGE.match(error.message)
            status = int(match.group(1)) if match else 500
        if status is not None:
            response = httpx2.Response(status, request=request)
            if cls is not None and issubclass(cls, openai.APIStatusError):
                try:
                    return cls(error.message, response=response, body=None)
                except TypeError:  # a subclass with a constructor of its own
                    pass
            return openai.APIStatusError(error.message, response=response, body=None)
        if cls is not None and issubclass(cls, openai.APITimeoutError):
            return cls(request=request)
        if cls is not None and issubclass(cls, openai.APIConnectionError):
            return cls(message=error.message, request=request)
        return openai.APIError(error.message, request, body=None)


class _ChoiceParts:
    """One choice of a streamed completion, as its fragments arrive."""

    __slots__ = ("calls", "content", "finish_reason", "refusal", "role")

    def __init__(self) -> None:
        self.role: str | None = None
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None


class _ChatAssembler:
    """Folds `ChatCompletionChunk`s into the `ChatCompletion` JSON they make."""

    def __init__(self) -> None:
        self._head: dict[str, Any] | None = None
        self._choices: dict[int, _ChoiceParts] = {}
        self._usage: Any = None

    def add(self, chunk: _chat.ChatCompletionChunk) -> int:
        if self._head is None:
            self._head = {
                "id": chunk.id,
                "created": chunk.created,
                "model": chunk.model,
                "system_fingerprint": getattr(chunk, "system_fingerprint", None),
                "service_tier": getattr(chunk, "service_tier", None),
            }
        if chunk.usage is not None:
            self._usage = chunk.usage
        chars = 0
        for choice in chunk.choices:
            parts = self._choices.get(choice.index)
            if parts is None:
                parts = self._choices[choice.index] = _ChoiceParts()
            delta = choice.delta
            if delta.role:
                parts.role = delta.role
            if delta.content:
                parts.content.append(delta.content)
                chars += len(delta.content)
            if delta.refusal:
                parts.refusal.append(delta.refusal)
                chars += len(delta.refusal)
            for fragment in delta.tool_calls or ():
                chars += _add_fragment(parts.calls, fragment)
            if choice.finish_reason is not None:
                parts.finish_reason = choice.finish_reason
        return chars

    def result(self) -> dict[str, Any]:
        head = self._head or {"id": "", "created": 0, "model": ""}
        choices = []
        for index in sorted(self._choices):
            parts = self._choices[index]
            message: dict[str, Any] = {
                "role": parts.role or "assistant",
                "content": "".join(parts.content) if parts.content else None,
                "refusal": "".join(parts.refusal) if parts.refusal else None,
            }
            if parts.calls:
                message["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                    }
                    for _, call in sorted(parts.calls.items())
                ]
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "finish_reason": parts.finish_reason,
                    "logprobs": None,
                }
            )
        return {
            **head,
            "object": "chat.completion",
            "choices": choices,
            "usage": self._usage.model_dump(mode="json") if self._usage is not None else None,
        }


def _add_fragment(calls: dict[int, dict[str, Any]], fragment: Any) -> int:
    call = calls.get(fragment.index)
    if call is None:
        call = calls[fragment.index] = {"id": "", "name": "", "arguments": []}
    if fragment.id:
        call["id"] = fragment.id
    function = fragment.function
    if function is None:
        return 0
    if function.name:
        call["name"] += function.name
    if function.arguments:
        call["arguments"].append(function.arguments)
        return len(function.arguments)
    return 0


def _chunks(response: Mapping[str, Any], sizes: Sequence[float]) -> list[dict[str, Any]]:
    """A recorded completion as stream chunks (JSON) whose text is cut to ``sizes``."""
    head = {
        "id": response.get("id", ""),
        "object": "chat.completion.chunk",
        "created": response.get("created", 0),
        "model": response.get("model", ""),
        "system_fingerprint": response.get("system_fingerprint"),
        "service_tier": response.get("service_tier"),
    }
    choices = response.get("choices") or []
    segments: list[tuple[int, str, int, str]] = []  # (choice, kind, tool index, text)
    for choice in choices:
        message = choice.get("message") or {}
        index = choice.get("index", 0)
        segments.append((index, "content", 0, message.get("content") or ""))
        segments.append((index, "refusal", 0, message.get("refusal") or ""))
        for number, call in enumerate(message.get("tool_calls") or ()):
            arguments = (call.get("function") or {}).get("arguments") or ""
            segments.append((index, "tool", number, arguments))
    calls = {
        (choice.get("index", 0), number): call
        for choice in choices
        for number, call in enumerate((choice.get("message") or {}).get("tool_calls") or ())
    }
    opened: set[tuple[int, int]] = set()

    def fragment(choice: int, number: int, arguments: str) -> dict[str, Any]:
        call = calls[(choice, number)]
        out: dict[str, Any] = {"index": number, "function": {"arguments": arguments}}
        if (choice, number) not in opened:
            opened.add((choice, number))
            out["id"] = call.get("id")
            out["type"] = call.get("type", "function")
            out["function"]["name"] = (call.get("function") or {}).get("name")
        return out

    def chunk(deltas: Mapping[int, dict[str, Any]], finish: bool = False) -> dict[str, Any]:
        return {
            **head,
            "choices": [
                {
                    "index": index,
                    "delta": delta,
                    "finish_reason": finish_reasons.get(index) if finish else None,
                    "logprobs": None,
                }
                for index, delta in deltas.items()
            ],
        }

    finish_reasons = {c.get("index", 0): c.get("finish_reason") for c in choices}
    roles = {
        c.get("index", 0): {"role": (c.get("message") or {}).get("role") or "assistant"}
        for c in choices
    }
    out = [chunk({index: {**role, "content": ""} for index, role in roles.items()})]
    for pieces in distribute([s[3] for s in segments], sizes):
        deltas: dict[int, dict[str, Any]] = {}
        for segment, text in pieces:
            index, kind, number, _ = segments[segment]
            delta = deltas.setdefault(index, {})
            if kind == "tool":
                delta.setdefault("tool_calls", []).append(fragment(index, number, text))
            else:
                delta[kind] = delta.get(kind, "") + text
        out.append(chunk(deltas))
    last: dict[int, dict[str, Any]] = {index: {} for index in roles}
    for choice, number in sorted(set(calls) - opened):  # tool calls without arguments
        last[choice].setdefault("tool_calls", []).append(fragment(choice, number, ""))
    out.append(chunk(last, finish=True))
    if response.get("usage") is not None:
        out.append({**head, "choices": [], "usage": response["usage"]})
    return out
