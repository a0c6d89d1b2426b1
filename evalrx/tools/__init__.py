"""Built-in tools the agent under test can call.

`TOOLS` maps a tool name to a factory `factory(case) -> Tool`; tools that need the case
(`image_zoom` zooms into the case image) bind to it there. No heavy imports at module top.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from evalrx._lazy import lazy_attribute
from evalrx.core.tool import Tool
from evalrx.tools.calculator import calculator, make_calculator
from evalrx.tools.image_zoom import make_image_zoom
from evalrx.tools.lookup import make_lookup

ToolFactory = Callable[[Any], Tool]

TOOLS: dict[str, ToolFactory] = {
    "calculator": make_calculator,
    "lookup": make_lookup,
    "image_zoom": make_image_zoom,
}


def register_tool(name: str, factory: ToolFactory, *, replace: bool = False) -> None:
    """Add a tool factory (`factory(case) -> Tool`) under `name`.

    Raises:
        ValueError: if `name` is taken and `replace` is False.
    """
    if name in TOOLS and not replace:
        raise ValueError(f"Tool {name!r} is already registered; pass replace=True to override it.")
    TOOLS[name] = factory


def get_tools(names: Iterable[str] | str, case: Any = None) -> list[Tool]:
    """Build the named tools for one case.

    Args:
        names: tool names, or one comma-separated string ("calculator,lookup"); a name with a colon
            is a Python function (`package.module:function`, see `evalrx.tools.python_fn`).
        case: the `FailureCase` the tools serve (image tools bind to its image).

    Raises:
        ValueError: naming the unknown tool(s) and listing the known ones, a Python path that does not
            resolve to a function, or a Python tool whose name another tool has.
    """
    if isinstance(names, str):
        names = [n for n in names.split(",")]
    wanted = [n.strip() for n in names if n and n.strip()]
    unknown = [n for n in wanted if n not in TOOLS and ":" not in n]
    if unknown:
        raise ValueError(
            f"Unknown tool(s) {unknown}. Known tools: {sorted(TOOLS)}; "
            "a Python function is named package.module:function."
        )
    if not any(":" in n for n in wanted):
        return [TOOLS[n](case) for n in wanted]
    from evalrx.tools.python_fn import python_tool  # pydantic loads only when a Python tool is named

    tools = [python_tool(n) if ":" in n else TOOLS[n](case) for n in wanted]
    for i, tool in enumerate(tools):
        if tool.source == "python" and any(t.name == tool.name for t in tools[:i] + tools[i + 1 :]):
            raise ValueError(
                f"Python tool {tool.origin!r} is named {tool.name!r}, like another tool in the list; "
                "drop one of them or wrap the function under another name"
            )
    return tools


# MCP support loads the `mcp` SDK's models only when asked for (`from evalrx.tools import McpServer`).
_LAZY = {
    "McpServer": "evalrx.config.mcp",
    "load_mcp_config": "evalrx.config.mcp",
    "open_mcp_tools": "evalrx.tools.mcp_servers",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)


__all__ = [
    "TOOLS",
    "McpServer",
    "Tool",
    "ToolFactory",
    "calculator",
    "get_tools",
    "load_mcp_config",
    "open_mcp_tools",
    "register_tool",
]
