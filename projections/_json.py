"""The JSON value type the projections work on, and the small helpers every fold shares.

Owns `JSONValue` (a static type only: nothing here validates), deep copying of JSON trees,
JSON equality (``true`` is not ``1``) and RFC 6901 JSON Pointer rendering for error messages.
Must not import the ledger's pydantic types or know about events: it is plain data.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSONValue", "json_copy", "json_equal", "json_pointer"]

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
"""Any JSON value as Python's ``json`` module decodes it (objects are ``dict[str, ...]``)."""


def json_copy(value: JSONValue) -> JSONValue:
    """Return a deep copy of `value`: fresh dicts and lists, scalars shared (they are immutable)."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value


def json_equal(a: JSONValue, b: JSONValue) -> bool:
    """Tell whether `a` and `b` are the same JSON value.

    Unlike ``==``, a boolean never equals a number (``True == 1`` in Python, but ``true`` and
    ``1`` are different JSON values). Integers and floats compare by value, because JSON has one
    number type (``1`` and ``1.0`` canonicalise to the same text under RFC 8785).
    """
    if a is b:
        return True
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and len(a) == len(b)
            and all(key in b and json_equal(item, b[key]) for key, item in a.items())
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(b, dict | list):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def json_pointer(path: tuple[str, ...]) -> str:
    """Render `path` as an RFC 6901 JSON Pointer (``("steps", "s1")`` → ``/steps/s1``)."""
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in path)
