"""Strict parsing of a model's JSON answer into a typed value.

Owns what "strict JSON" means for every orchestration: the whole answer is one JSON object
(optionally inside a single Markdown code fence, or a JSON string that itself holds the object,
which models produce when they double-encode), validated against a pydantic model. Anything else
is a ``JSONParseError`` whose message is fed back to the model on the one retry. It must not call
models or record anything: ``_asking.ask_json`` does that.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["JSONParseError", "parse_json_object", "parse_model"]

T = TypeVar("T", bound=BaseModel)

_FENCE = re.compile(r"^```[A-Za-z]*\s*\n?(?P<body>.*?)\n?\s*```$", re.DOTALL)


class JSONParseError(ValueError):
    """A model's answer is not the JSON object the contract asks for; says why."""


def parse_json_object(text: str) -> dict[str, Any]:
    """Return the JSON object a model answered with, or raise ``JSONParseError`` saying why."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced is not None:
        body = fenced.group("body").strip()
    if not body:
        msg = "the answer is empty; expected one JSON object"
        raise JSONParseError(msg)
    try:
        value = json.loads(body)
    except ValueError as error:
        msg = f"the answer is not valid JSON ({error}); expected one JSON object and nothing else"
        raise JSONParseError(msg) from None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            msg = "the answer is a JSON string, not a JSON object"
            raise JSONParseError(msg) from None
    if not isinstance(value, dict):
        msg = f"the answer is a JSON {type(value).__name__}, not a JSON object"
        raise JSONParseError(msg)
    return value


def parse_model(text: str, model: type[T]) -> T:
    """Parse ``text`` strictly and validate it as ``model``; raise ``JSONParseError`` if not."""
    value = parse_json_object(text)
    try:
        return model.model_validate(value)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or '(object)'}: {item['msg']}"
            for item in error.errors(include_url=False)
        )
        msg = f"the JSON object does not match the contract: {problems}"
        raise JSONParseError(msg) from None
