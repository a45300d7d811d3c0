"""`ScriptedModel`: a deterministic `ChatModel` that answers from a script.

This module owns the fake model that tests, demos and `scripted:FILE` runs use: answers in order,
every request it saw kept in `.requests`, deterministic tool call ids (`call_1`, `call_2`, ...),
usage estimated from text length and zero latency, and a loud `ScriptExhaustedError` when the
script runs out (it never answers with nothing). It streams too, deterministically: the answer's
text word by word (each word with the whitespace after it), then one chunk per tool call, the
k-th chunk stamped `k * chunk_interval_ms` (0 by default), so offline runs and tests stream
with timings they choose. It also reads scripts from JSON or JSONL files.

It must not import a vendor SDK, touch the network, or read the clock.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from agentledger.agents.models._types import (
    Attempt,
    ChunkHandler,
    Message,
    ModelRequest,
    ModelResponse,
    StreamChunk,
    ToolCallRequest,
    Usage,
)
from agentledger.agents.models.errors import ScriptExhaustedError, ScriptFormatError

Answer = str | Message | ModelResponse
"""What a script step can be: text, an assistant message, or a full response."""

AnswerFunction = Callable[[ModelRequest], Answer]
"""A script step computed from the request it answers."""

PROVIDER = "scripted"

_WORD = re.compile(r"\s+|\S+\s*")
"""A streamed word: leading whitespace alone, else a word with the whitespace after it."""


def scripted_tool_call(
    name: str,
    arguments: dict[str, JsonValue],
    call_id: str | None = None,
    *,
    content: str = "",
) -> Message:
    """Build an assistant answer that calls the tool `name` with `arguments`.

    Without `call_id`, the `ScriptedModel` that gives this answer numbers the call (`call_1`...).
    """
    return Message.assistant(
        content, [ToolCallRequest(id=call_id or "", name=name, arguments=arguments)]
    )


def estimate_tokens(text: str) -> int:
    """Estimate tokens as one per four characters, at least one."""
    return max(1, len(text) // 4)


class ScriptedModel:
    """A `ChatModel` that answers each request with the next step of its script.

    `script` is a sequence of steps (a string becomes an assistant text answer; a `Message` must
    be an assistant message; a `ModelResponse` is returned with ids filled in; a callable receives
    the request and returns any of those), or one callable that answers every request. Every
    request is appended to `.requests` before it is answered, so a failing test can show what the
    model was asked. Asking past the end raises `ScriptExhaustedError`.

    `stream` hands the answer over in word-sized chunks; `chunk_interval_ms` is the (simulated,
    never slept) time between chunks, so the k-th chunk arrives at `k * chunk_interval_ms`.
    `keep_requests` bounds `.requests` to the latest that many (None: every one). Each request
    holds the whole conversation so far, so keeping every request of a long run takes memory
    (and garbage-collector time) that grows with the square of its length.
    """

    def __init__(
        self,
        script: Sequence[Answer | AnswerFunction] | AnswerFunction,
        *,
        name: str = "scripted:test",
        chunk_interval_ms: float = 0.0,
        keep_requests: int | None = None,
    ) -> None:
        if keep_requests is not None and keep_requests < 1:
            msg = f"keep_requests must be at least 1 (or None for all), got {keep_requests}"
            raise ValueError(msg)
        if chunk_interval_ms < 0:
            msg = f"chunk_interval_ms must be at least 0, got {chunk_interval_ms}"
            raise ValueError(msg)
        if isinstance(script, str):
            msg = "a script is a list of answers; wrap a single answer as [answer]"
            raise TypeError(msg)
        self._name = name
        self._script: Sequence[Answer | AnswerFunction] | None = (
            None if callable(script) else list(script)
        )
        self._function: AnswerFunction | None = script if callable(script) else None
        self._next_call = 1
        self._chunk_interval_ms = chunk_interval_ms
        self._prompt_seen: tuple[list[Message], int] = ([], 0)
        self.requests: list[ModelRequest] = []
        self._keep = keep_requests
        self._asked = 0

    @property
    def name(self) -> str:
        """The name given at construction (`scripted:test` by default)."""
        return self._name

    @property
    def provider(self) -> str:
        """Always `scripted`."""
        return PROVIDER

    @property
    def remaining(self) -> int | None:
        """How many scripted answers are left (None when one function answers everything)."""
        if self._script is None:
            return None
        return max(len(self._script) - self._asked, 0)

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self._name!r}, remaining={self.remaining!r})"

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        keep_requests: int | None = None,
    ) -> ScriptedModel:
        """Load a script: a JSON list of answers, or JSONL with one answer per line.

        Each answer is a string, or an object `{"content": str, "tool_calls": [{"name": str,
        "arguments": {...}, "id": str (optional)}]}`.
        """
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as error:
            raise ScriptFormatError(path=file, reason=str(error)) from error
        items = _parse_jsonl(file, text) if file.suffix == ".jsonl" else _parse_json(file, text)
        answers: list[Answer | AnswerFunction] = [
            _answer_from_item(file, n, item) for n, item in items
        ]
        return cls(answers, name=name or f"scripted:{path}", keep_requests=keep_requests)

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Record `request` and answer it with the next script step.

        With `request.stream` the answer is "streamed" (to no one) and reports its chunk timings.
        """
        if request.stream:
            return self.stream(request, _ignore)
        return self._answer(request)

    def stream(self, request: ModelRequest, on_chunk: ChunkHandler) -> ModelResponse:
        """Answer like `complete`, handing the answer to `on_chunk` in deterministic chunks."""
        response = self._answer(request)
        pieces = [
            StreamChunk(at_ms=0.0, text=word) for word in _WORD.findall(response.message.content)
        ]
        pieces += [
            StreamChunk(
                at_ms=0.0,
                tool_index=index,
                tool_name=call.name,
                tool_arguments=call.arguments_json(),
            )
            for index, call in enumerate(response.message.tool_calls)
        ]
        timings: list[tuple[float, int]] = []
        for number, piece in enumerate(pieces, start=1):
            chunk = piece.model_copy(update={"at_ms": number * self._chunk_interval_ms})
            timings.append((chunk.at_ms, chunk.chars))
            on_chunk(chunk)
        return response.model_copy(
            update={
                "ttft_ms": timings[0][0] if timings else None,
                "chunks": timings,
                "latency_ms": max(response.latency_ms, timings[-1][0] if timings else 0.0),
            }
        )

    def _answer(self, request: ModelRequest) -> ModelResponse:
        self._asked += 1
        self.requests.append(request)
        if self._keep is not None and len(self.requests) > self._keep:
            del self.requests[0]
        step: Answer | AnswerFunction
        if self._function is not None:
            step = self._function
        else:
            assert self._script is not None
            index = self._asked - 1
            if index >= len(self._script):
                raise ScriptExhaustedError(
                    name=self._name,
                    requests_seen=self._asked,
                    script_length=len(self._script),
                )
            step = self._script[index]
        answer = step(request) if callable(step) else step
        return self._respond(request, answer)

    def _respond(self, request: ModelRequest, answer: Answer) -> ModelResponse:
        if isinstance(answer, ModelResponse):
            return answer.model_copy(update={"message": self._number_calls(answer.message)})
        message = Message.assistant(answer) if isinstance(answer, str) else answer
        if message.role != "assistant":
            msg = f"{self._name} was scripted a {message.role!r} message; answers are assistant"
            raise TypeError(msg)
        message = self._number_calls(message)
        said = message.content + "".join(c.name + c.arguments_json() for c in message.tool_calls)
        return ModelResponse(
            message=message,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            usage=Usage(
                input_tokens=max(1, self._prompt_chars(request.messages) // 4),
                output_tokens=estimate_tokens(said),
            ),
            model=request.model or self._name,
            provider=PROVIDER,
            cost_usd=0.0,
            latency_ms=0.0,
            attempts=[Attempt(number=1, latency_ms=0.0)],
            raw_id=f"scripted-{self._asked}",
            raw_finish_reason="tool_calls" if message.tool_calls else "stop",
        )

    def _prompt_chars(self, messages: list[Message]) -> int:
        """The characters of the prompt's contents: those of the last prompt plus what is new.

        A conversation re-sends its history with every call; counting only the messages after
        the shared prefix (the same message objects: one C-level comparison) keeps a long run's
        estimate linear in its length. The count equals ``len("".join(contents))``.
        """
        seen, chars = self._prompt_seen
        known = len(seen)
        if len(messages) >= known and messages[:known] == seen:
            chars += sum(len(m.content) for m in messages[known:])
        else:
            chars = sum(len(m.content) for m in messages)
        self._prompt_seen = (list(messages), chars)
        return chars

    def _number_calls(self, message: Message) -> Message:
        """Give every tool call without an id the next deterministic one (`call_N`)."""
        if all(call.id for call in message.tool_calls):
            return message
        numbered = [call if call.id else self._numbered(call) for call in message.tool_calls]
        return message.model_copy(update={"tool_calls": numbered})

    def _numbered(self, call: ToolCallRequest) -> ToolCallRequest:
        number = self._next_call
        self._next_call += 1
        return call.model_copy(update={"id": f"call_{number}"})


def _ignore(chunk: StreamChunk) -> None:
    del chunk


class _ScriptedCall(BaseModel):
    """One tool call in a script file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    id: str | None = None


class _ScriptedAnswer(BaseModel):
    """One answer object in a script file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str = ""
    tool_calls: list[_ScriptedCall] = Field(default_factory=list)


def _parse_json(file: Path, text: str) -> list[tuple[int, object]]:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ScriptFormatError(path=file, reason=f"not JSON ({error})") from error
    if not isinstance(data, list):
        raise ScriptFormatError(path=file, reason="a JSON script must be a list of answers")
    return [(number, item) for number, item in enumerate(data, start=1)]


def _parse_jsonl(file: Path, text: str) -> list[tuple[int, object]]:
    items: list[tuple[int, object]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((number, json.loads(line)))
        except ValueError as error:
            raise ScriptFormatError(path=file, reason=f"line {number} is not JSON") from error
    return items


def _answer_from_item(file: Path, number: int, item: object) -> Answer:
    if isinstance(item, str):
        return item
    try:
        answer = _ScriptedAnswer.model_validate(item)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        reason = f"answer {number}: {where + ': ' if where else ''}{first['msg']}"
        raise ScriptFormatError(path=file, reason=reason) from error
    return Message.assistant(
        answer.content,
        [
            ToolCallRequest(id=call.id or "", name=call.name, arguments=call.arguments)
            for call in answer.tool_calls
        ],
    )
