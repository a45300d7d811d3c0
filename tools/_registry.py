"""``ToolRegistry``: an explicit, per-run-or-per-app set of tools, looked up by name.

Owns name → tool lookup, the schema lists handed to models (neutral, OpenAI, Anthropic shapes as
plain dicts) and the ``call``/``acall`` entry points that always return a ``ToolResult``. It
must not be a global (no module-level registry, no import-time registration: two registries
never share tools), must not import vendor SDKs, and must not record events: the agents layer
records what ``call`` returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ParamSpec, TypeVar

from agentledger.tools._envelope import ToolResult, ToolSpec
from agentledger.tools._execute import failed_result, run_async, run_sync
from agentledger.tools._json import JSONValue
from agentledger.tools._tool import Tool
from agentledger.tools.errors import ToolRegistrationError, UnknownToolError

__all__ = ["ToolRegistry"]

P = ParamSpec("P")
R = TypeVar("R")


class ToolRegistry:
    """The tools one agent (or application) may call, in registration order.

    ``call`` and ``acall`` never raise for anything a tool or a model does: unknown names,
    invalid arguments, exceptions, timeouts and non-JSON results come back as ``ok=false``
    envelopes. ``register`` and ``get`` raise, because their failures are programming errors.
    """

    def __init__(self, tools: Iterable[Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool[..., Any]] = {}
        for item in tools:
            self.register(item)

    def register(self, tool_or_function: Callable[P, R]) -> Tool[P, R]:
        """Add a tool (or a plain function, wrapped with default ``@tool`` options).

        Args:
            tool_or_function: A ``Tool`` or a function with type hints and a docstring.

        Returns:
            The registered ``Tool``.

        Raises:
            ToolRegistrationError: A tool of that name is already registered, or the
                function cannot be made into a tool.
        """
        item: Tool[P, R] = (
            tool_or_function if isinstance(tool_or_function, Tool) else Tool(tool_or_function)
        )
        if item.spec.name in self._tools:
            raise ToolRegistrationError(item.spec.name, "a tool of that name is already registered")
        self._tools[item.spec.name] = item
        return item

    def get(self, name: str) -> Tool[..., Any]:
        """Return the tool called ``name``.

        Raises:
            UnknownToolError: No tool of that name is registered (lists the known names).
        """
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, self._tools) from None

    def names(self) -> tuple[str, ...]:
        """Return the registered names, in registration order."""
        return tuple(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        """Return every tool's ``ToolSpec`` in registration order (what the ledger records)."""
        return tuple(item.spec for item in self._tools.values())

    def schemas(self) -> list[dict[str, JSONValue]]:
        """Return vendor-neutral ``{"name", "description", "parameters"}`` dicts, one per tool."""
        return [item.spec.neutral_schema() for item in self._tools.values()]

    def openai_tools(self) -> list[dict[str, JSONValue]]:
        """Return OpenAI Chat Completions ``tools``: ``{"type": "function", "function": {...}}``."""
        return [item.spec.openai_schema() for item in self._tools.values()]

    def anthropic_tools(self) -> list[dict[str, JSONValue]]:
        """Return Anthropic Messages ``tools``: ``{"name", "description", "input_schema"}``."""
        return [item.spec.anthropic_schema() for item in self._tools.values()]

    def call(self, name: str, arguments: object) -> ToolResult:
        """Call a tool from synchronous code; never raises for tool or model mistakes.

        Args:
            name: The tool's name, as the model gave it.
            arguments: The arguments object, as decoded from the model's JSON.

        Returns:
            The envelope: ``ok`` with JSON-native ``data``, or ``ok=false`` with an error code
            (``unknown_tool``, ``invalid_arguments``, ``timeout``, ``invalid_result``, a
            ``ToolFailure`` code, or an exception's class name).
        """
        started = time.perf_counter()
        item = self._tools.get(name)
        if item is None:
            return self._unknown(name, started)
        return run_sync(item, arguments)

    async def acall(self, name: str, arguments: object) -> ToolResult:
        """Call a tool from async code (sync tools run in a worker thread); never raises.

        Args:
            name: The tool's name, as the model gave it.
            arguments: The arguments object, as decoded from the model's JSON.

        Returns:
            The envelope, exactly as ``call`` would return it.
        """
        started = time.perf_counter()
        item = self._tools.get(name)
        if item is None:
            return self._unknown(name, started)
        return await run_async(item, arguments)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool[..., Any]]:
        return iter(tuple(self._tools.values()))

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"

    def _unknown(self, name: str, started: float) -> ToolResult:
        known = ", ".join(self._tools) or "none"
        message = f"unknown tool {name!r}; registered tools: {known}"
        return failed_result(name, "unknown_tool", message, started)
