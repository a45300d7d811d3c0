"""Errors of the tools layer.

The tree::

    ToolError
    ├── ToolRegistrationError   the caller's code is wrong: a duplicate name, a bad signature,
    │                           a missing description, a bad option (tool_name, reason)
    ├── UnknownToolError        no tool by that name in this registry (name, known)
    └── ToolFailure             raised INSIDE a tool body to report an expected failure with a
                                stable code (code, message, retryable); the registry turns it
                                into an ``ok=false`` result envelope, so it never reaches callers
                                of ``ToolRegistry.call``

``ToolRegistry.call`` and ``acall`` never raise for anything a tool does: unknown names, invalid
arguments, timeouts, exceptions and non-JSON results all come back as ``ok=false`` envelopes
(failures the system expects are data, not exceptions). Only ``register`` and ``get`` raise.

This module owns the exception classes and nothing else; it must not import the rest of the
package.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ToolError", "ToolFailure", "ToolRegistrationError", "UnknownToolError"]


class ToolError(Exception):
    """Base of every error the tools layer raises."""


class ToolRegistrationError(ToolError):
    """A tool cannot be defined or registered: fix the function or the call to ``register``."""

    def __init__(self, tool_name: str, reason: str) -> None:
        self.tool_name = tool_name
        self.reason = reason
        super().__init__(f"cannot register tool {tool_name!r}: {reason}")


class UnknownToolError(ToolError, LookupError):
    """``ToolRegistry.get`` was asked for a name the registry does not hold."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known: tuple[str, ...] = tuple(known)
        listing = ", ".join(self.known) if self.known else "none"
        super().__init__(f"unknown tool {name!r}; registered tools: {listing}")


# The name is the tools API's term for an expected failure a tool reports; it is a result the
# registry turns into an envelope, not a programming error, so it does not end in "Error".
class ToolFailure(ToolError):  # noqa: N818
    """An expected failure a tool reports with a stable, machine-readable code.

    Raise it from a tool body, e.g. ``raise ToolFailure("not_found", "no place 'Atlantis'")``.
    The registry records ``code``, ``message`` and ``retryable`` in the result envelope.
    """

    def __init__(self, code: str, message: str, *, retryable: bool = False) -> None:
        self.code = code
        self.message = message
        self.retryable = retryable
        super().__init__(f"{code}: {message}")
