"""`calculator`: safe arithmetic over an `ast` whitelist (never eval/exec)."""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable

from evalrx.core.tool import Tool

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64  # larger powers are refused before they are computed
MAX_DIGITS = 60  # integer results beyond this many digits are refused
MAX_DEPTH = 100  # nesting limit, so deep parentheses cannot blow the stack

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}

SCHEMA = {
    "type": "object",
    "properties": {"expression": {"type": "string", "description": "e.g. 12 * (3 + 4)"}},
    "required": ["expression"],
}


class CalculatorError(ValueError):
    """An expression the calculator refuses or cannot compute."""


def _check_size(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise CalculatorError("result is not a finite number")
    elif isinstance(value, int) and value.bit_length() > MAX_DIGITS * 3.33:
        raise CalculatorError(f"result has more than {MAX_DIGITS} digits")
    return value


def _eval(node: ast.AST, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise CalculatorError("expression is nested too deeply")
    if isinstance(node, ast.Expression):
        return _eval(node.body, depth + 1)
    if isinstance(node, ast.Constant):
        # bool is an int subclass; True + 1 is not arithmetic the model should rely on.
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        raise CalculatorError(f"unsupported constant {node.value!r}; only numbers are allowed")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_size(_UNARY[type(node.op)](_eval(node.operand, depth + 1)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left = _eval(node.left, depth + 1)
        right = _eval(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalculatorError(f"exponent {right} is too large (at most {MAX_EXPONENT})")
            if left == 0 and right < 0:
                raise CalculatorError("division by zero")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalculatorError("division by zero")
        try:
            return _check_size(_BINOPS[type(node.op)](left, right))
        except OverflowError:
            raise CalculatorError("result is too large") from None
    raise CalculatorError(f"unsupported syntax: {type(node).__name__}; use numbers and + - * / // % ** ( )")


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression safely.

    Args:
        expression: numbers, `+ - * / // % **`, unary minus and parentheses.

    Returns:
        The numeric result.

    Raises:
        CalculatorError: for anything that is not bounded arithmetic.
    """
    if not isinstance(expression, str):
        raise CalculatorError("expression must be a string")
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("^", "**")
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot parse {expression!r}") from None
    return _eval(tree)


def format_number(value: int | float) -> str:
    """Integers without ".0"; floats to at most 6 decimals, trailing zeros dropped."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        if abs(value) >= 1e15 or (value != 0 and abs(value) < 1e-6):
            return f"{value:.6g}"
        text = f"{value:.6f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    return str(value)


def calculator(expression: str = "") -> str:
    """Tool entry point: the result as text, or `error: ...` (never raises)."""
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        return f"error: {exc}"
    except (RecursionError, MemoryError, ValueError, TypeError) as exc:  # last-resort guard
        return f"error: {type(exc).__name__}: {exc}"


def make_calculator(case: Any = None) -> Tool:
    """Build the `calculator` tool (it needs nothing from the case)."""
    return Tool(
        name="calculator",
        description="Evaluate an arithmetic expression.",
        parameters=SCHEMA,
        fn=calculator,
    )
