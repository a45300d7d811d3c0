"""Safe arithmetic: evaluate an expression by walking its ``ast`` (never ``eval``).

Owns ``evaluate``: numbers, parentheses, ``+ - * / // % **`` and unary signs, nothing else. Names,
attributes, calls, subscripts, strings and every other node are refused with a
``ToolFailure("unsupported_expression")`` naming what was found, so ``__import__('os')`` is
rejected before anything runs. Results stay JSON-native (integers within +/-(2^53-1), finite floats)
and large powers are refused before they are computed. It must not import or execute code.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from agentledger.tools._json import MAX_SAFE_INTEGER
from agentledger.tools.errors import ToolFailure

__all__ = ["MAX_EXPRESSION_LENGTH", "evaluate"]

MAX_EXPRESSION_LENGTH = 200
"""Longer expressions are refused (a model has no reason to send more)."""

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely.

    Args:
        expression: Such as ``"(3 + 4) * 2 / 7"`` or ``"2 ** 10"``.

    Returns:
        The value; an ``int`` when every step stayed integral.

    Raises:
        ToolFailure: ``invalid_expression`` (syntax, empty, too long), ``unsupported_expression``
            (anything but numbers and arithmetic), ``division_by_zero`` or ``out_of_range``.
    """
    if not expression.strip():
        raise ToolFailure("invalid_expression", "the expression is empty")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        message = f"the expression is longer than {MAX_EXPRESSION_LENGTH} characters"
        raise ToolFailure("invalid_expression", message)
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        message = f"not an arithmetic expression: {error.msg}"
        raise ToolFailure("invalid_expression", message) from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolFailure("unsupported_expression", f"only numbers are allowed, not {value!r}")
        return _checked(value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            return _checked(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ToolFailure("division_by_zero", "division by zero") from None
        except OverflowError:
            raise ToolFailure("out_of_range", "the result is too large") from None
    raise ToolFailure("unsupported_expression", _describe(node))


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"names are not allowed: {node.id!r}"
    if isinstance(node, ast.Attribute):
        return f"attributes are not allowed: {node.attr!r}"
    if isinstance(node, ast.Call):
        called = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
        return f"function calls are not allowed: {called!r}"
    return f"{type(node).__name__} is not allowed; use numbers, parentheses and + - * / // % **"


def _check_power(base: Number, exponent: Number) -> None:
    if isinstance(exponent, float) and not exponent.is_integer() and base < 0:
        raise ToolFailure("out_of_range", "a negative number to a fractional power is not real")
    if base == 0 and exponent < 0:
        raise ToolFailure("division_by_zero", "zero to a negative power")
    magnitude = abs(base)
    if magnitude > 1 and exponent * math.log2(magnitude) > 1024:
        raise ToolFailure("out_of_range", "the result is too large")


def _checked(value: Number) -> Number:
    if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
        message = f"the integer result is outside +/-{MAX_SAFE_INTEGER} (JSON's exact range)"
        raise ToolFailure("out_of_range", message)
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolFailure("out_of_range", "the result is not a finite number")
    return value
