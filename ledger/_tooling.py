"""Recorded tools: what ``@run.recorded_tool`` wraps around a function, and how a result reads.

Owns the decorator's mechanics: binding a call's arguments to JSON (``ToolSpec.arguments``),
running the function and turning what it returned or raised into a tool result envelope
(``Outcome``), and raising a recorded failure again in replay (``raise_recorded``). The
recorder decides what happens around a call (record it live; serve it from the record in
replay). Must not record events itself.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import sys
import time
import types
from collections.abc import Callable, Coroutine, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentledger.ledger._canonical import as_recorded
from agentledger.ledger._entry import EntryError, script_module
from agentledger.ledger.errors import InvalidPayloadError, UsageError
from agentledger.ledger.events import ToolErrorInfo

if TYPE_CHECKING:
    from agentledger.ledger._recording import RunRecorder

__all__ = [
    "Outcome",
    "RecordedToolError",
    "ToolSpec",
    "error_code",
    "raise_recorded",
    "tool_wrapper",
]

_MESSAGE = 4000
"""How much of an exception's message a failed result keeps."""


class RecordedToolError(Exception):
    """A recorded tool failure raised again in replay when its exception type is not at hand.

    ``code`` is the recorded exception type (``ValueError``, ``mypkg.errors.Timeout``) and
    ``message`` its message.
    """

    def __init__(self, tool: str, code: str, message: str) -> None:
        self.tool = tool
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}" if message else code)


@dataclass(frozen=True)
class Outcome:
    """What one call of a recorded tool came to: its result envelope, and how to hand it back."""

    envelope: dict[str, Any]
    error: BaseException | None = None

    def result(self) -> Any:
        """The recorded data; raises the function's own exception when it failed."""
        if self.error is not None:
            raise self.error
        return self.envelope["data"]


@dataclass(frozen=True)
class ToolSpec:
    """A recorded tool: its name (default: the function's), version and whether it has effects."""

    name: str | None = None
    effectful: bool = False
    version: str = "1"
    signature: inspect.Signature | None = None

    @property
    def tool(self) -> str:
        """The tool's recorded name."""
        assert self.name is not None
        return self.name

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The call's arguments bound to the function's parameters, as recorded JSON."""
        assert self.signature is not None
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise UsageError(f"recorded tool {self.tool!r}: {error}") from None
        bound.apply_defaults()
        try:
            return as_recorded(dict(bound.arguments))
        except InvalidPayloadError as error:
            msg = (
                f"recorded tool {self.tool!r}: its arguments must be JSON values (they are "
                f"recorded and matched in replay): {error}"
            )
            raise UsageError(msg) from None

    def run(self, invoke: Callable[[], Any]) -> Outcome:
        """Call the function; its result (as recorded JSON) or failure, and the latency."""
        start = time.perf_counter()
        try:
            value = invoke()
        except Exception as error:  # noqa: BLE001 - recorded as a failed result, then re-raised
            return self._failed(error, start)
        return self._returned(value, start)

    async def arun(self, invoke: Callable[[], Coroutine[Any, Any, Any]]) -> Outcome:
        """`run` for an async function."""
        start = time.perf_counter()
        try:
            value = await invoke()
        except Exception as error:  # noqa: BLE001 - recorded as a failed result, then re-raised
            return self._failed(error, start)
        return self._returned(value, start)

    def _returned(self, value: Any, start: float) -> Outcome:
        latency = (time.perf_counter() - start) * 1000.0
        try:
            data = as_recorded(value)
        except InvalidPayloadError as error:
            msg = (
                f"recorded tool {self.tool!r} returned a {type(value).__name__}: a recorded tool "
                f"must return JSON values (replay hands back the recorded JSON): {error}"
            )
            return self._failed(UsageError(msg), start)
        envelope = {"ok": True, "type": self.tool, "data": data, "latency_ms": latency}
        return Outcome(envelope)

    def _failed(self, error: BaseException, start: float) -> Outcome:
        latency = (time.perf_counter() - start) * 1000.0
        info = ToolErrorInfo(code=error_code(type(error)), message=str(error)[:_MESSAGE])
        envelope = {"ok": False, "type": self.tool, "error": info, "latency_ms": latency}
        return Outcome(envelope, error)


_SIGNATURES: dict[types.CodeType, tuple[tuple[tuple[str, Any], ...], inspect.Signature]] = {}
"""Signatures of plain functions by code object, with the annotations they were built from."""
_SIGNATURES_KEPT = 256


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``inspect.signature(fn)``, kept for a plain function defined again and again.

    A tool decorated inside the function a run records is a new function object each call
    (and each replay), with the same code. For a plain function with no defaults, no wrapper
    and the very same annotation objects, inspect builds an equal signature from that code.
    """
    attrs = getattr(fn, "__dict__", None)
    if (
        type(fn) is not types.FunctionType
        or fn.__defaults__ is not None
        or fn.__kwdefaults__ is not None
        or (attrs and ("__wrapped__" in attrs or "__signature__" in attrs))
    ):
        return inspect.signature(fn)
    annotations = tuple(fn.__annotations__.items())
    kept = _SIGNATURES.get(fn.__code__)
    if kept is not None and _same(kept[0], annotations):
        return kept[1]
    signature = inspect.signature(fn)
    if len(_SIGNATURES) >= _SIGNATURES_KEPT:
        _SIGNATURES.clear()
    _SIGNATURES[fn.__code__] = (annotations, signature)
    return signature


def _same(kept: tuple[tuple[str, Any], ...], annotations: tuple[tuple[str, Any], ...]) -> bool:
    """Whether two functions' annotations are the same names bound to the same objects."""
    return len(kept) == len(annotations) and all(
        a[0] == b[0] and a[1] is b[1] for a, b in zip(kept, annotations, strict=True)
    )


def tool_wrapper(recorder: RunRecorder, fn: Callable[..., Any], spec: ToolSpec) -> Any:
    """``fn`` with each call recorded (or, in replay, served) through ``recorder``."""
    if not callable(fn):
        raise UsageError(f"recorded_tool wraps a function, not a {type(fn).__name__}")
    spec = replace(
        spec,
        name=spec.name or getattr(fn, "__name__", None) or type(fn).__name__,
        signature=_signature(fn),
    )
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            arguments = spec.arguments(args, kwargs)
            return await recorder._acall_tool(spec, arguments, lambda: fn(*args, **kwargs))

        return awrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        arguments = spec.arguments(args, kwargs)
        return recorder._call_tool(spec, arguments, lambda: fn(*args, **kwargs))

    return wrapper


def error_code(kind: type[BaseException]) -> str:
    """How a failed result names an exception type: ``ValueError``, ``pkg.mod.Error``.

    A type defined in a script run as ``python my_agent.py`` is named by the script's module
    name (``my_agent.Error``), as its recorded function is: replay imports the script under
    that name, and raises the recorded failure as the same type again.
    """
    module = kind.__module__
    if module == "builtins":
        return kind.__qualname__
    if module == "__main__" and sys.modules.get("__main__") is not None:
        with suppress(EntryError):
            module = script_module(sys.modules["__main__"], kind.__qualname__)
    return f"{module}.{kind.__qualname__}"


def raise_recorded(tool: str, code: str, message: str) -> Exception:
    """The exception a recorded failure is raised as again in replay.

    The recorded type itself when it is a built-in exception, or one of a module already
    imported (nothing is imported because a record names it), constructed from the message;
    `RecordedToolError` otherwise.
    """
    module, _, name = code.rpartition(".")
    owner: Any = sys.modules.get(module) if module else builtins
    kind: Any = owner
    for part in name.split(".") if owner is not None else []:
        kind = getattr(kind, part, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        with suppress(Exception):  # a constructor that wants more than a message
            return kind(message)
    return RecordedToolError(tool, code, message)
