"""The ``Tool`` object and the ``@tool`` decorator that makes one from a function.

Owns what a tool IS: the wrapped function, its ``ToolSpec`` (name, description, version, risk,
effectful, timeout, result type, argument schema) and its argument model. A ``Tool`` is still
callable like the function, so unit tests call it directly. This module must not execute tools
on behalf of a run (timeouts, envelopes: ``_execute``) or hold any registry (``_registry``).
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Generic, Literal, ParamSpec, TypeAlias, TypeVar, overload

from agentledger.tools._envelope import RiskLevel, ToolSpec
from agentledger.tools._schema import Arguments, build_arguments, parse_docstring
from agentledger.tools.errors import ToolRegistrationError

__all__ = ["Risk", "Tool", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

Risk: TypeAlias = RiskLevel | Literal["low", "medium", "high"]
"""A risk level, as the enum or its string value."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Tool names both OpenAI and Anthropic accept."""


class Tool(Generic[P, R]):
    """A function with the metadata and argument schema a model and the ledger need.

    Make one with ``@tool`` rather than directly. ``tool.spec`` is the ``ToolSpec`` the ledger
    records; ``tool(...)`` calls the function unchanged (a coroutine for async tools);
    ``tool.validate(arguments)`` checks a model's arguments without calling anything.
    """

    __name__: str  # copied from the function, with its docstring, by functools.update_wrapper
    spec: ToolSpec
    func: Callable[P, R]
    is_async: bool
    arguments: Arguments

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        version: str = "1",
        risk: Risk = RiskLevel.LOW,
        effectful: bool = False,
        timeout_s: float = 10.0,
        result_type: str | None = None,
    ) -> None:
        if isinstance(func, Tool):
            raise ToolRegistrationError(func.spec.name, "the function is already a Tool")
        tool_name = name if name is not None else getattr(func, "__name__", repr(func))
        if not _NAME.fullmatch(tool_name):
            reason = "a name is 1-64 characters from A-Z, a-z, 0-9, '_' and '-'"
            raise ToolRegistrationError(tool_name, reason)
        doc = parse_docstring(inspect.getdoc(func))
        summary = description if description is not None else doc.summary
        if not summary.strip():
            reason = "a tool needs a description: give the function a docstring"
            raise ToolRegistrationError(tool_name, reason)
        _check_options(tool_name, version=version, risk=risk, timeout_s=timeout_s)
        arguments = build_arguments(func, tool_name, doc.params)
        functools.update_wrapper(self, func)
        self.func = func
        self.is_async = _is_async(func)
        self.arguments = arguments
        self.spec = ToolSpec(
            name=tool_name,
            description=summary.strip(),
            version=version,
            risk=RiskLevel(risk),
            effectful=effectful,
            timeout_s=float(timeout_s),
            result_type=result_type if result_type is not None else tool_name,
            parameters=arguments.schema,
        )

    @property
    def name(self) -> str:
        """The name a model calls the tool by."""
        return self.spec.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        spec = self.spec
        return (
            f"<Tool {spec.name!r} v{spec.version} risk={spec.risk.value} "
            f"effectful={spec.effectful} timeout_s={spec.timeout_s}>"
        )

    def validate(self, arguments: Mapping[str, object]) -> dict[str, Any]:
        """Validate a model's arguments and return the keyword arguments to call with.

        Args:
            arguments: The arguments object, as decoded from the model's JSON.

        Returns:
            Keyword arguments with defaults filled in and values converted to the hinted types.

        Raises:
            pydantic.ValidationError: An argument is missing, unknown or of the wrong type.
        """
        validated = self.arguments.model.model_validate(dict(arguments))
        return self.arguments.to_kwargs(validated)


@overload
def tool(func: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    version: str = "1",
    risk: Risk = RiskLevel.LOW,
    effectful: bool = False,
    timeout_s: float = 10.0,
    result_type: str | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    version: str = "1",
    risk: Risk = RiskLevel.LOW,
    effectful: bool = False,
    timeout_s: float = 10.0,
    result_type: str | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Turn a sync or async function into a ``Tool``; use bare (``@tool``) or with options.

    The argument schema comes from the signature and type hints; the description from the
    docstring's first line and parameter descriptions from its ``Args:`` section. Parameters
    with defaults are optional.

    Args:
        func: The function, when used bare.
        name: The tool's name (default: the function's name).
        description: Overrides the docstring's first line.
        version: The tool's version, recorded with every call so replays can tell changes.
        risk: ``"low"``, ``"medium"`` or ``"high"``; guardrails can cap it.
        effectful: True when a call acts outside the run (sends, writes): replay never
            re-executes it silently.
        timeout_s: Seconds a call may take before it is reported as ``timeout``.
        result_type: The name of what the tool returns (default: the tool's name).

    Returns:
        The ``Tool``, or a decorator making one when options are given.

    Raises:
        ToolRegistrationError: The name, an option, the docstring or the signature is invalid.
    """

    def decorate(inner: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            inner,
            name=name,
            description=description,
            version=version,
            risk=risk,
            effectful=effectful,
            timeout_s=timeout_s,
            result_type=result_type,
        )

    if func is None:
        return decorate
    return decorate(func)


def _check_options(tool_name: str, *, version: str, risk: Risk, timeout_s: float) -> None:
    if not version:
        raise ToolRegistrationError(tool_name, "version must be a non-empty string")
    try:
        RiskLevel(risk)
    except ValueError as error:
        reason = f"risk must be 'low', 'medium' or 'high', not {risk!r}"
        raise ToolRegistrationError(tool_name, reason) from error
    if isinstance(timeout_s, bool) or not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ToolRegistrationError(tool_name, f"timeout_s must be positive, not {timeout_s!r}")


def _is_async(func: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 - a callable object's async __call__
    return call is not None and inspect.iscoroutinefunction(call)
