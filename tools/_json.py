"""The JSON-native value type and the check that a tool's result is one.

Owns ``JSONValue`` and ``json_problem``. JSON-native follows the ledger's hashing rules (DESIGN.md):
dicts with string keys, lists, strings, booleans, ``None``, finite floats and integers within
+/-(2^53-1). It must not convert values (a tuple is not silently turned into a list): a tool that
returns something else gets an ``invalid_result`` envelope instead of a half-faithful record.
"""

from __future__ import annotations

import math
from typing import TypeAlias

from pydantic import JsonValue

__all__ = ["MAX_SAFE_INTEGER", "JSONValue", "json_problem"]

JSONValue: TypeAlias = JsonValue
"""A JSON-native value: dicts with str keys, lists, str, int, float, bool or None."""

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer every JSON implementation reads exactly (RFC 8785, I-JSON)."""

_MAX_DEPTH = 200


def json_problem(value: object) -> str | None:
    """Say why ``value`` is not JSON-native, naming the JSON Pointer of the first bad part.

    Args:
        value: The value to check.

    Returns:
        ``None`` when the value is JSON-native, else a sentence such as
        ``"set at /items/0 is not JSON-native"``.
    """
    return _problem(value, "", 0)


def _scalar_problem(value: object, where: str) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        return f"integer at {where} is outside +/-(2^53-1); send large numbers as strings"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float at {where} is not finite ({value})"
    if value is None or isinstance(value, str | int | float):
        return None
    return f"{type(value).__name__} at {where} is not JSON-native"


def _problem(value: object, path: str, depth: int) -> str | None:
    where = path or "/"
    if depth > _MAX_DEPTH:
        return f"value at {where} is nested deeper than {_MAX_DEPTH} levels"
    if isinstance(value, list):
        children: list[tuple[str, object]] = [(str(i), item) for i, item in enumerate(value)]
    elif isinstance(value, dict):
        bad_keys = [key for key in value if not isinstance(key, str)]
        if bad_keys:
            return f"key {bad_keys[0]!r} at {where} is not a string"
        children = list(value.items())
    else:
        return _scalar_problem(value, where)
    for key, item in children:
        escaped = key.replace("~", "~0").replace("/", "~1")
        found = _problem(item, f"{path}/{escaped}", depth + 1)
        if found is not None:
            return found
    return None
