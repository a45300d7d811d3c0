"""Argument schemas from a function's signature, type hints and Google-style docstring.

Owns ``parse_docstring`` and ``build_arguments``: the pydantic model that validates a call's
arguments and the JSON Schema a model sees. Parameters with defaults are optional; descriptions
come from the docstring's ``Args:`` section and the tool description from its first line (the
Tantra pattern). It must not call tools or know about registries; every problem it finds is a
``ToolRegistrationError`` raised at definition time, never at call time.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from agentledger.tools._json import JSONValue, json_problem
from agentledger.tools.errors import ToolRegistrationError

__all__ = ["Arguments", "Docstring", "build_arguments", "parse_docstring"]

_ARGS_HEADERS = frozenset({"args:", "arguments:", "parameters:", "params:"})
_ENTRY = re.compile(r"^(?P<name>\*{0,2}[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:$")
_FIELD_PREFIX = "arg_"


@dataclass(frozen=True)
class Docstring:
    """What a docstring says: the summary line and one description per documented parameter."""

    summary: str
    params: dict[str, str]


@dataclass(frozen=True)
class Arguments:
    """A tool's argument model and its JSON Schema.

    Fields of ``model`` are named ``arg_<parameter>`` with the parameter name as alias, so a
    parameter may be called ``schema`` or ``model_config`` without clashing with pydantic.
    """

    model: type[BaseModel]
    schema: dict[str, JSONValue]
    names: tuple[str, ...]

    def to_kwargs(self, validated: BaseModel) -> dict[str, Any]:
        """Return the keyword arguments to call the function with, from a validated model."""
        return {name: getattr(validated, _FIELD_PREFIX + name) for name in self.names}


def parse_docstring(doc: str | None) -> Docstring:
    """Read a Google-style docstring: its first line and its ``Args:`` entries.

    Args:
        doc: The raw docstring, or ``None``.

    Returns:
        The summary (first non-empty line) and parameter descriptions, continuation lines
        joined with single spaces.
    """
    if not doc:
        return Docstring(summary="", params={})
    lines = inspect.cleandoc(doc).splitlines()
    summary = next((line.strip() for line in lines if line.strip()), "")
    params: dict[str, str] = {}
    in_args = False
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped.lower() in _ARGS_HEADERS and indent == 0:
            in_args, entry_indent, current = True, None, None
            continue
        if not in_args or not stripped:
            continue
        if indent == 0 and _SECTION.match(stripped):
            in_args = False
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _ENTRY.match(stripped)
        if indent <= entry_indent and match is not None:
            current = match["name"].lstrip("*")
            params[current] = match["text"].strip()
        elif current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return Docstring(summary=summary, params=params)


def build_arguments(
    func: Callable[..., Any], tool_name: str, descriptions: dict[str, str]
) -> Arguments:
    """Build the argument model and JSON Schema for ``func``.

    Args:
        func: The tool function; every parameter needs a type hint and must be passable by
            keyword (no positional-only parameters, no ``*args`` or ``**kwargs``).
        tool_name: The tool's name, for error messages.
        descriptions: Parameter descriptions from the docstring.

    Returns:
        The model (``extra="forbid"``: unknown arguments are refused) and its schema.

    Raises:
        ToolRegistrationError: The signature, a type hint or a default cannot be expressed
            as JSON Schema, or the docstring documents a parameter the function lacks.
    """
    try:
        signature = inspect.signature(func)
        annotated = func if inspect.isroutine(func) else type(func).__call__
        hints = get_type_hints(annotated, include_extras=True)
    except (TypeError, ValueError, NameError) as error:
        raise ToolRegistrationError(tool_name, f"cannot read the signature: {error}") from error
    fields: dict[str, Any] = {}
    for name, param in signature.parameters.items():
        fields[_FIELD_PREFIX + name] = _field(tool_name, param, hints, descriptions.get(name))
    stray = sorted(set(descriptions) - set(signature.parameters))
    if stray:
        reason = f"the docstring documents parameters the function lacks: {', '.join(stray)}"
        raise ToolRegistrationError(tool_name, reason)
    model_name = "".join(part.title() for part in re.split(r"[_\W]+", tool_name)) + "Arguments"
    names = tuple(signature.parameters)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = create_model(
                model_name,
                __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
                **fields,
            )
            schema = model.model_json_schema(by_alias=True)
    except Exception as error:  # any pydantic error or warning means a bad signature
        reason = f"arguments cannot be expressed as JSON Schema: {error}"
        raise ToolRegistrationError(tool_name, reason) from error
    return Arguments(model=model, schema=_tidy(schema, tool_name), names=names)


def _field(
    tool_name: str,
    param: inspect.Parameter,
    hints: dict[str, Any],
    description: str | None,
) -> tuple[Any, Any]:
    if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        reason = f"*{param.name} / **{param.name} cannot be described as a JSON object"
        raise ToolRegistrationError(tool_name, reason)
    if param.kind is inspect.Parameter.POSITIONAL_ONLY:
        reason = f"parameter {param.name!r} is positional-only; tools are called by keyword"
        raise ToolRegistrationError(tool_name, reason)
    if param.name not in hints:
        raise ToolRegistrationError(tool_name, f"parameter {param.name!r} has no type hint")
    if param.default is inspect.Parameter.empty:
        return hints[param.name], Field(alias=param.name, description=description)
    problem = json_problem(param.default)
    if problem is not None:
        reason = f"default of {param.name!r} must be JSON-native ({problem})"
        raise ToolRegistrationError(tool_name, reason)
    return hints[param.name], Field(
        default=param.default, alias=param.name, description=description
    )


def _tidy(schema: dict[str, Any], tool_name: str) -> dict[str, JSONValue]:
    """Drop pydantic's generated titles (noise in a prompt) and check the schema is JSON."""
    schema.pop("title", None)
    properties = schema.get("properties", {})
    for prop in properties.values():
        prop.pop("title", None)
    schema.setdefault("properties", {})
    problem = json_problem(schema)
    if problem is not None:
        raise ToolRegistrationError(tool_name, f"the argument schema is not JSON: {problem}")
    return schema
