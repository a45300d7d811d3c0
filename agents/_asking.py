"""Asking a model for strict JSON (one retry, then a recorded fallback) or for a cited answer.

Owns the contract every orchestration uses for structured model output: ``ask_json`` calls the
role's model, parses its answer strictly (``_jsonparse``) and, when that fails, records
GuardrailTripped (``strict_json``, action ``retry``) and asks exactly once more with the parse
error in the request; a second failure records GuardrailTripped (action ``fallback``) and
returns ``None`` so the caller takes its recorded graceful fallback. ``ask_answer`` gets a
free-text answer (streamed when asked: it is the text a user watches arrive) and puts it through
the evidence discipline. Must not record except through
the ``RunContext``, and must not retry more than once: a second failure is the caller's
recorded fallback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from agentledger.agents._context import RunContext
from agentledger.agents._jsonparse import JSONParseError, parse_model
from agentledger.agents.evidence import answer_with_evidence
from agentledger.agents.models import Message

__all__ = ["JsonAnswer", "ask_answer", "ask_json", "retry_message"]

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class JsonAnswer(Generic[T]):
    """A parsed JSON answer, the exact text it came from, and its ModelCalled position."""

    value: T
    text: str
    position: int


def retry_message(error: str) -> str:
    """The correction sent with the one retry after a parse failure (includes the error)."""
    return (
        f"Your previous answer could not be used: {error}. Reply again with ONLY the JSON "
        "object the instructions describe: no prose, no Markdown."
    )


def ask_json(
    ctx: RunContext,
    role: str,
    messages: Sequence[Message],
    schema: type[T],
    *,
    step_id: str | None,
    caused_by: int | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> JsonAnswer[T] | None:
    """Ask ``role`` for a JSON object matching ``schema``: one retry, then ``None``."""
    conversation = list(messages)
    for attempt in ("retry", "fallback"):
        response = ctx.call_model(
            role, ctx.request(role, conversation, tools=tools), step_id=step_id, caused_by=caused_by
        )
        if response is None:
            return None
        position = ctx.position
        text = response.message.content
        try:
            return JsonAnswer(parse_model(text, schema), text, position)
        except JSONParseError as error:
            ctx.trip(
                "strict_json",
                action=attempt,
                message=str(error),
                limit=schema.__name__,
                observed=text[:500],
                step_id=step_id,
            )
            conversation += [Message.assistant(text), Message.user(retry_message(str(error)))]
            caused_by = ctx.position
    return None


def ask_answer(
    ctx: RunContext,
    role: str,
    messages: Sequence[Message],
    *,
    step_id: str | None,
    caused_by: int | None = None,
    stream: bool = False,
) -> tuple[str, tuple[str, ...], int] | None:
    """Ask ``role`` for a cited free-text answer and enforce the evidence discipline.

    Returns the answer, the ids it cites and the position of the last model call, or ``None``
    when the first call failed (the caller records its fallback). ``stream`` streams the call
    and its re-ask.
    """
    response = ctx.call_model(
        role, ctx.request(role, messages, stream=stream), step_id=step_id, caused_by=caused_by
    )
    if response is None:
        return None
    first = response.message.content
    last = ctx.position

    def reask(correction: str) -> str | None:
        nonlocal last
        again = ctx.call_model(
            role,
            ctx.request(
                role,
                [*messages, Message.assistant(first), Message.user(correction)],
                stream=stream,
            ),
            step_id=step_id,
            caused_by=ctx.position,
        )
        if again is None:
            return None
        last = ctx.position
        return again.message.content

    answer, cited = answer_with_evidence(ctx, first, reask, step_id=step_id)
    return answer, cited, last
