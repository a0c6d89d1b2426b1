"""The calculator tool the agent and codec tests give their models (one definition for every test module)."""

from __future__ import annotations

from evalrx.core.tool import Tool


def calculator(expression: str) -> str:
    # eval restricted to arithmetic characters is enough for a test tool
    if not set(expression) <= set("0123456789+-*/(). "):
        raise ValueError(f"unsupported expression {expression!r}")
    return str(eval(expression))


CALC = Tool(
    "calculator",
    "Evaluate arithmetic.",
    {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    fn=calculator,
)
