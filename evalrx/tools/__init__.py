"""Built-in tools the agent under test can call.

`TOOLS` maps a tool name to a factory `factory(case) -> Tool`; tools that need the case
(`image_zoom` zooms into the case image) bind to it there. No heavy imports at module top.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

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
        names: tool names, or one comma-separated string ("calculator,lookup").
        case: the `FailureCase` the tools serve (image tools bind to its image).

    Raises:
        ValueError: naming the unknown tool(s) and listing the known ones.
    """
    if isinstance(names, str):
        names = [n for n in names.split(",")]
    wanted = [n.strip() for n in names if n and n.strip()]
    unknown = [n for n in wanted if n not in TOOLS]
    if unknown:
        raise ValueError(f"Unknown tool(s) {unknown}. Known tools: {sorted(TOOLS)}.")
    return [TOOLS[n](case) for n in wanted]


# MCP support loads the `mcp` SDK's models only when asked for (`from evalrx.tools import McpServer`).
_LAZY = {
    "McpServer": "evalrx.tools.mcp_servers",
    "load_mcp_config": "evalrx.tools.mcp_servers",
    "open_mcp_tools": "evalrx.tools.mcp_servers",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'evalrx.tools' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


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
