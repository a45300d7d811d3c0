"""ToolRegistry: lookup, schema shapes, and the never-raising call path with its envelopes."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from pydantic import ValidationError

from agentledger.tools import (
    ToolError,
    ToolErrorInfo,
    ToolFailure,
    ToolRegistrationError,
    ToolRegistry,
    ToolResult,
    UnknownToolError,
    builtin_registry,
    tool,
)


@tool(result_type="sum")
def add(a: int, b: int = 1) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
async def double(x: float) -> float:
    """Double a number, asynchronously.

    Args:
        x: The number.
    """
    await asyncio.sleep(0)
    return x * 2


@tool(timeout_s=0.05)
def slow_sync(seconds: float) -> str:
    """Sleep, then answer.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return "late"


@tool(timeout_s=0.05)
async def slow_async(seconds: float) -> str:
    """Sleep asynchronously, then answer.

    Args:
        seconds: How long to sleep.
    """
    await asyncio.sleep(seconds)
    return "late"


@tool
def explode(message: str) -> None:
    """Raise a ValueError.

    Args:
        message: The error text.
    """
    raise ValueError(message)


@tool
def refuse(code: str) -> None:
    """Raise a ToolFailure with a code.

    Args:
        code: The failure code.
    """
    raise ToolFailure(code, f"refused with {code}", retryable=True)


@pytest.fixture
def registry() -> ToolRegistry:
    """Return a registry with the tools above."""
    return ToolRegistry([add, double, slow_sync, slow_async, explode, refuse])


def test_a_successful_call_returns_an_ok_envelope(registry: ToolRegistry) -> None:
    """The result lands in ``data`` with the declared type and a measured latency."""
    result = registry.call("add", {"a": 2, "b": 3})
    assert result.ok
    assert result.data == 5
    assert result.type == "sum"
    assert result.error is None
    assert result.latency_ms >= 0.0


def test_defaults_fill_in_optional_arguments(registry: ToolRegistry) -> None:
    """An omitted optional argument takes the function's default."""
    assert registry.call("add", {"a": 2}).data == 3


def test_invalid_arguments_are_refused_before_the_body_runs() -> None:
    """A missing, mistyped or unknown argument never reaches the tool; the message names it."""
    calls: list[int] = []

    @tool
    def count(n: int) -> int:
        """Count a call.

        Args:
            n: A number.
        """
        calls.append(n)
        return n

    registry = ToolRegistry([count])
    for arguments, field in [({}, "n"), ({"n": "many"}, "n"), ({"n": 1, "extra": 2}, "extra")]:
        result = registry.call("count", arguments)
        assert not result.ok
        assert result.error is not None
        assert result.error.code == "invalid_arguments"
        assert f"{field}:" in result.error.message
    assert calls == []
    assert registry.call("count", {"n": 4}).data == 4
    assert calls == [4]


def test_arguments_that_are_not_an_object_are_invalid(registry: ToolRegistry) -> None:
    """A model that sends a list instead of an object gets ``invalid_arguments``."""
    result = registry.call("add", [1, 2])
    assert result.error == ToolErrorInfo(
        code="invalid_arguments", message="arguments for 'add' must be a JSON object, not list"
    )


def test_an_exception_becomes_an_envelope_named_for_its_class(registry: ToolRegistry) -> None:
    """A tool's exception never escapes: the code is its class name, the message its text."""
    result = registry.call("explode", {"message": "boom"})
    assert not result.ok
    assert result.data is None
    assert result.error == ToolErrorInfo(code="ValueError", message="boom")


def test_a_tool_failure_supplies_its_own_code(registry: ToolRegistry) -> None:
    """``ToolFailure(code, message)`` is recorded as given, retryable flag included."""
    result = registry.call("refuse", {"code": "rate_limited"})
    assert result.error == ToolErrorInfo(
        code="rate_limited", message="refused with rate_limited", retryable=True
    )


def test_a_sync_tool_over_its_timeout_reports_timeout(registry: ToolRegistry) -> None:
    """A sync tool sleeping 0.5 s with a 0.05 s timeout is cut off well before it finishes."""
    started = time.perf_counter()
    result = registry.call("slow_sync", {"seconds": 0.5})
    elapsed = time.perf_counter() - started
    assert result.error is not None
    assert result.error.code == "timeout"
    assert result.error.retryable
    assert elapsed < 0.4


def test_an_async_tool_over_its_timeout_reports_timeout(registry: ToolRegistry) -> None:
    """An async tool past its timeout is cancelled, through ``call`` and through ``acall``."""
    result = registry.call("slow_async", {"seconds": 0.5})
    assert result.error is not None
    assert result.error.code == "timeout"
    result = asyncio.run(registry.acall("slow_async", {"seconds": 0.5}))
    assert result.error is not None
    assert result.error.code == "timeout"
    assert result.latency_ms < 400


def test_a_sync_tool_over_its_timeout_reports_timeout_through_acall(
    registry: ToolRegistry,
) -> None:
    """``acall`` enforces a sync tool's timeout without blocking the event loop."""
    result = asyncio.run(registry.acall("slow_sync", {"seconds": 0.5}))
    assert result.error is not None
    assert result.error.code == "timeout"


def test_a_tool_raising_its_own_timeout_error_is_not_a_timeout() -> None:
    """Only the registry's deadline yields ``timeout``; a tool's TimeoutError keeps its name."""

    @tool
    async def upstream(url: str) -> str:
        """Fail like a slow upstream service.

        Args:
            url: Where.
        """
        raise TimeoutError(f"{url} did not answer")

    result = ToolRegistry([upstream]).call("upstream", {"url": "x"})
    assert result.error == ToolErrorInfo(code="TimeoutError", message="x did not answer")


def test_an_async_tool_runs_through_call_without_a_loop(registry: ToolRegistry) -> None:
    """``call`` runs an async tool with ``asyncio.run`` when no loop is running."""
    assert registry.call("double", {"x": 2.5}).data == 5.0


def test_an_async_tool_runs_through_acall(registry: ToolRegistry) -> None:
    """``acall`` awaits an async tool on the caller's loop."""
    assert asyncio.run(registry.acall("double", {"x": 4})).data == 8.0


def test_call_works_inside_a_running_event_loop(registry: ToolRegistry) -> None:
    """Calling an async tool with ``call`` from async code still works (on a helper thread)."""

    async def main() -> ToolResult:
        return registry.call("double", {"x": 1.5})

    assert asyncio.run(main()).data == 3.0


def test_acall_runs_sync_tools_in_a_worker_thread() -> None:
    """A sync tool called through ``acall`` does not run on the event loop's thread."""

    @tool
    def where(tag: str) -> str:
        """Report the current thread.

        Args:
            tag: A label.
        """
        return f"{tag}:{threading.current_thread().name}"

    registry = ToolRegistry([where])
    data = asyncio.run(registry.acall("where", {"tag": "t"})).data
    assert data == "t:agentledger-tool-where"


def test_an_unknown_tool_via_call_is_an_envelope(registry: ToolRegistry) -> None:
    """A name the model made up yields ``unknown_tool`` listing the real names."""
    result = registry.call("teleport", {})
    assert not result.ok
    assert result.error is not None
    assert result.error.code == "unknown_tool"
    assert "add, double" in result.error.message
    assert asyncio.run(registry.acall("teleport", {})).error == result.error


def test_get_of_an_unknown_name_raises_with_fields(registry: ToolRegistry) -> None:
    """``get`` raises UnknownToolError carrying the name and the known names."""
    with pytest.raises(UnknownToolError) as caught:
        registry.get("teleport")
    assert caught.value.name == "teleport"
    assert caught.value.known == registry.names()
    assert isinstance(caught.value, ToolError)
    assert isinstance(caught.value, LookupError)


class _Opaque:
    """Something with no JSON form."""


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({1, 2}, "set at / is not JSON-native"),
        (b"raw", "bytes at / is not JSON-native"),
        ({"item": _Opaque()}, "_Opaque at /item is not JSON-native"),
        ([1, (2, 3)], "tuple at /1 is not JSON-native"),
        ({"x": float("nan")}, "float at /x is not finite"),
        ({"n": 2**60}, "integer at /n is outside"),
        ({1: "one"}, "key 1 at / is not a string"),
    ],
)
def test_a_non_json_result_is_an_invalid_result(value: object, problem: str) -> None:
    """A result that is not JSON-native is refused as ``invalid_result``, naming where."""

    @tool
    def produce(seed: int) -> object:
        """Return a fixed value.

        Args:
            seed: Ignored beyond being recorded.
        """
        return value if seed else None

    result = ToolRegistry([produce]).call("produce", {"seed": 1})
    assert result.error is not None
    assert result.error.code == "invalid_result"
    assert problem in result.error.message


def test_a_sync_tool_returning_a_coroutine_is_an_invalid_result() -> None:
    """A coroutine from a sync function is closed (no warning) and reported, not awaited."""

    async def inner() -> int:
        return 1

    @tool
    def sneaky(flag: bool) -> object:
        """Return a coroutine by mistake.

        Args:
            flag: Unused switch.
        """
        return inner() if flag else None

    result = ToolRegistry([sneaky]).call("sneaky", {"flag": True})
    assert result.error is not None
    assert result.error.code == "invalid_result"
    assert "async def" in result.error.message


def test_system_exit_in_a_sync_tool_becomes_an_envelope() -> None:
    """Even SystemExit raised by a tool body comes back as data, not a dead worker."""

    @tool
    def quit_now(status: int) -> None:
        """Exit the interpreter, or try to.

        Args:
            status: Exit status.
        """
        raise SystemExit(status)

    result = ToolRegistry([quit_now]).call("quit_now", {"status": 3})
    assert result.error == ToolErrorInfo(code="SystemExit", message="3")


def test_two_registries_do_not_share_tools() -> None:
    """Registering in one registry leaves another untouched: there is no global registry."""
    first, second = ToolRegistry(), ToolRegistry()
    first.register(add)
    assert "add" in first
    assert "add" not in second
    assert len(second) == 0
    assert builtin_registry() is not builtin_registry()


def test_a_duplicate_name_is_refused() -> None:
    """Registering two tools under one name raises ToolRegistrationError naming it."""
    registry = ToolRegistry([add])
    with pytest.raises(ToolRegistrationError) as caught:
        registry.register(add)
    assert caught.value.tool_name == "add"
    assert "already registered" in caught.value.reason


def test_a_plain_function_is_wrapped_on_registration() -> None:
    """``register`` accepts a plain function and makes it a Tool with default options."""

    def shout(text: str) -> str:
        """Upper-case the text.

        Args:
            text: The text.
        """
        return text.upper()

    registry = ToolRegistry()
    registered = registry.register(shout)
    assert registry.get("shout") is registered
    assert registry.call("shout", {"text": "hi"}).data == "HI"


def test_registration_order_is_kept(registry: ToolRegistry) -> None:
    """Names, specs and schemas list tools in the order they were registered."""
    expected = ("add", "double", "slow_sync", "slow_async", "explode", "refuse")
    assert registry.names() == expected
    assert tuple(spec.name for spec in registry.specs()) == expected
    assert tuple(item.name for item in registry) == expected


def test_schemas_have_the_neutral_shape(registry: ToolRegistry) -> None:
    """``schemas()`` gives ``{name, description, parameters}`` per tool."""
    first = registry.schemas()[0]
    assert first == {
        "name": "add",
        "description": "Add two integers.",
        "parameters": add.spec.parameters,
    }


def test_openai_tools_have_the_chat_completions_shape(registry: ToolRegistry) -> None:
    """``openai_tools()`` wraps each schema as ``{"type": "function", "function": {...}}``."""
    first = registry.openai_tools()[0]
    assert first == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": add.spec.parameters,
        },
    }


def test_anthropic_tools_have_the_messages_shape(registry: ToolRegistry) -> None:
    """``anthropic_tools()`` gives ``{name, description, input_schema}`` per tool."""
    first = registry.anthropic_tools()[0]
    assert first == {
        "name": "add",
        "description": "Add two integers.",
        "input_schema": add.spec.parameters,
    }


def test_schema_lists_are_copies(registry: ToolRegistry) -> None:
    """Mutating a returned schema does not change the tool's spec."""
    schema: Any = registry.openai_tools()[0]
    schema["function"]["parameters"]["properties"].clear()
    assert add.spec.parameters["properties"] != {}


def test_tool_result_keeps_ok_and_error_consistent() -> None:
    """An envelope cannot claim success with an error, or failure without one."""
    error = ToolErrorInfo(code="x", message="y")
    with pytest.raises(ValidationError):
        ToolResult(ok=True, type="t", error=error, latency_ms=1.0)
    with pytest.raises(ValidationError):
        ToolResult(ok=False, type="t", latency_ms=1.0)
    with pytest.raises(ValidationError):
        ToolResult(ok=False, type="t", data=1, error=error, latency_ms=1.0)


def test_tool_result_is_frozen_and_forbids_extra_fields() -> None:
    """The envelope is immutable and refuses unknown fields, like every ledger record."""
    result = ToolResult(ok=True, type="t", data={"a": 1}, latency_ms=1.0)
    with pytest.raises(ValidationError):
        result.ok = False  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ToolResult.model_validate({"ok": True, "type": "t", "latency_ms": 1.0, "extra": 1})
    assert ToolResult.model_validate_json(result.model_dump_json()) == result
