"""Running one tool call and turning whatever happens into a ``ToolResult`` envelope.

Owns the call path: validate arguments BEFORE the body runs, run sync tools in a daemon worker
thread and async tools on an event loop, enforce the timeout, measure latency with
``time.perf_counter``, check the result is JSON-native, and map every failure to a code. Nothing
a tool does escapes as an exception (only cancellation of the caller's own task propagates).
It must not look tools up by name (``_registry``) or record anything: the agents layer records
the envelope in the ledger.

A sync tool that overruns its timeout keeps running in its daemon thread (Python cannot stop a
thread); its late result is discarded. Tools that must not linger should honour their own
deadline too.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from agentledger.tools._envelope import ToolErrorInfo, ToolResult
from agentledger.tools._json import JSONValue, json_problem
from agentledger.tools._tool import Tool
from agentledger.tools.errors import ToolFailure

__all__ = ["failed_result", "run_async", "run_sync"]

_GRACE_S = 1.0
"""Extra wait, beyond the tool's timeout, for an async tool that is slow to honour cancellation
when it runs on a helper thread's loop."""


@dataclass(frozen=True)
class _Outcome:
    """What a tool body did: returned ``value``, or failed with ``error``."""

    value: object = None
    error: ToolErrorInfo | None = None


def run_sync(tool: Tool[..., Any], arguments: object) -> ToolResult:
    """Call ``tool`` from synchronous code and return its envelope; never raises.

    Args:
        tool: The tool.
        arguments: The arguments object as the model sent it (validated here).

    Returns:
        The envelope. An async tool runs under ``asyncio.run`` when this thread has no running
        event loop, else on a fresh loop in a helper thread (this blocks the running loop; use
        ``run_async`` from async code).
    """
    started = time.perf_counter()
    kwargs, invalid = _prepare(tool, arguments)
    if invalid is not None:
        return _envelope(tool, _Outcome(error=invalid), started)
    if not tool.is_async:
        future = _start_thread(tool, kwargs)
        try:
            outcome = future.result(timeout=tool.spec.timeout_s)
        except TimeoutError:
            outcome = _timed_out(tool)
    elif _loop_is_running():
        future = _start_thread_loop(tool, kwargs)
        try:
            outcome = future.result(timeout=tool.spec.timeout_s + _GRACE_S)
        except TimeoutError:
            outcome = _timed_out(tool)
    else:
        outcome = asyncio.run(_await_async(tool, kwargs))
    return _envelope(tool, outcome, started)


async def run_async(tool: Tool[..., Any], arguments: object) -> ToolResult:
    """Call ``tool`` from async code and return its envelope; never raises.

    Args:
        tool: The tool.
        arguments: The arguments object as the model sent it (validated here).

    Returns:
        The envelope. Sync tools run in a worker thread, so the event loop keeps running.
    """
    started = time.perf_counter()
    kwargs, invalid = _prepare(tool, arguments)
    if invalid is not None:
        return _envelope(tool, _Outcome(error=invalid), started)
    if tool.is_async:
        outcome = await _await_async(tool, kwargs)
    else:
        scope = asyncio.timeout(tool.spec.timeout_s)
        try:
            async with scope:
                outcome = await asyncio.wrap_future(_start_thread(tool, kwargs))
        except TimeoutError:
            outcome = _timed_out(tool)
    return _envelope(tool, outcome, started)


def failed_result(
    result_type: str, code: str, message: str, started: float, *, retryable: bool = False
) -> ToolResult:
    """Build an ``ok=false`` envelope; latency runs from ``started`` (a perf_counter value)."""
    return ToolResult(
        ok=False,
        type=result_type,
        error=ToolErrorInfo(code=code, message=message, retryable=retryable),
        latency_ms=_elapsed_ms(started),
    )


def _prepare(
    tool: Tool[..., Any], arguments: object
) -> tuple[dict[str, Any], ToolErrorInfo | None]:
    name = tool.spec.name
    if not isinstance(arguments, Mapping):
        message = f"arguments for {name!r} must be a JSON object, not {type(arguments).__name__}"
        return {}, ToolErrorInfo(code="invalid_arguments", message=message)
    try:
        return tool.validate(arguments), None
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or '(arguments)'}: {detail['msg']}"
            for detail in error.errors(include_url=False)
        )
        message = f"invalid arguments for {name!r}: {problems}"
    except Exception as error:  # noqa: BLE001 - a failing custom validator is still bad input
        message = f"invalid arguments for {name!r}: {type(error).__name__}: {error}"
    return {}, ToolErrorInfo(code="invalid_arguments", message=message)


def _start_thread(tool: Tool[..., Any], kwargs: dict[str, Any]) -> Future[_Outcome]:
    """Run a sync tool body in a daemon thread (a hung tool cannot block interpreter exit)."""
    future: Future[_Outcome] = Future()
    future.set_running_or_notify_cancel()
    context = contextvars.copy_context()

    def body() -> None:
        future.set_result(context.run(_call_sync, tool, kwargs))

    threading.Thread(target=body, name=f"agentledger-tool-{tool.spec.name}", daemon=True).start()
    return future


def _start_thread_loop(tool: Tool[..., Any], kwargs: dict[str, Any]) -> Future[_Outcome]:
    """Run an async tool on a fresh event loop in a daemon thread."""
    future: Future[_Outcome] = Future()
    future.set_running_or_notify_cancel()
    context = contextvars.copy_context()

    def body() -> None:
        future.set_result(context.run(asyncio.run, _await_async(tool, kwargs)))

    threading.Thread(target=body, name=f"agentledger-tool-{tool.spec.name}", daemon=True).start()
    return future


def _call_sync(tool: Tool[..., Any], kwargs: dict[str, Any]) -> _Outcome:
    try:
        return _Outcome(value=tool.func(**kwargs))
    # A worker thread must hand back everything, SystemExit included, or the caller waits
    # for a result that never comes; the envelope records the class name.
    except BaseException as error:  # noqa: BLE001
        return _Outcome(error=_error_info(error))


async def _await_async(tool: Tool[..., Any], kwargs: dict[str, Any]) -> _Outcome:
    scope = asyncio.timeout(tool.spec.timeout_s)
    try:
        async with scope:
            value = await tool.func(**kwargs)
    except TimeoutError as error:
        return _timed_out(tool) if scope.expired() else _Outcome(error=_error_info(error))
    except Exception as error:  # noqa: BLE001 - every tool failure becomes an envelope
        return _Outcome(error=_error_info(error))
    return _Outcome(value=value)


def _error_info(error: BaseException) -> ToolErrorInfo:
    if isinstance(error, ToolFailure):
        return ToolErrorInfo(code=error.code, message=error.message, retryable=error.retryable)
    return ToolErrorInfo(code=type(error).__name__, message=str(error) or type(error).__name__)


def _timed_out(tool: Tool[..., Any]) -> _Outcome:
    message = (
        f"tool {tool.spec.name!r} did not finish within its timeout of {tool.spec.timeout_s} s"
    )
    return _Outcome(error=ToolErrorInfo(code="timeout", message=message, retryable=True))


def _envelope(tool: Tool[..., Any], outcome: _Outcome, started: float) -> ToolResult:
    spec = tool.spec
    if outcome.error is not None:
        error = outcome.error
        return failed_result(
            spec.result_type, error.code, error.message, started, retryable=error.retryable
        )
    value = outcome.value
    if inspect.iscoroutine(value):
        value.close()
        message = f"tool {spec.name!r} returned a coroutine; declare the function with async def"
        return failed_result(spec.result_type, "invalid_result", message, started)
    problem = json_problem(value)
    if problem is not None:
        message = f"tool {spec.name!r} returned a result that is not JSON-native: {problem}"
        return failed_result(spec.result_type, "invalid_result", message, started)
    data = cast("JSONValue", value)  # json_problem found nothing: the value is JSON-native
    return ToolResult(ok=True, type=spec.result_type, data=data, latency_ms=_elapsed_ms(started))


def _loop_is_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _elapsed_ms(started: float) -> float:
    return max(0.0, (time.perf_counter() - started) * 1000.0)
