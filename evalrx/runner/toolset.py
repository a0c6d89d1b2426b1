"""The tools of one case, in one place for the worker, the offline runner and the diagnosis.

A case is offered the run's tools (built-in names and `package.module:function` paths), its own
function documents (a BFCL entry's; the methods of its own stateful environment, built fresh for each
case and attempt, when it has one), and the tools of the run's MCP servers: a fresh server session
per case and attempt, so a stateful server starts each case clean, unless a server's config shares
one session across cases (`mcp_sessions` gives the pool that keeps those open for a whole job).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from evalrx.config import RunConfig

# The tools a run offers when none are named and its cases bring none of their own.
DEFAULT_TOOLS = ("calculator", "lookup")


def run_tools(names: Optional[str], source: Any) -> list:
    """A run's tools from a comma-separated list; None: the demo tools, or none for a suite (or case file)
    whose cases all bring their own (BFCL's), so the model sees only the functions a case was written with."""
    if names is not None:
        return [t.strip() for t in names.split(",") if t.strip()]
    from evalrx.suites import case_tool_documents, load_cases

    cases = load_cases(source)
    return [] if cases and all(case_tool_documents(c) for c in cases) else list(DEFAULT_TOOLS)


def mcp_server_entries(path: Optional[str]) -> list:
    """An `mcpServers` file's servers as a run config stores them (secrets only as `${VAR}` names)."""
    if not path:
        return []
    from evalrx.tools.mcp_servers import load_mcp_config

    return [server.to_dict() for server in load_mcp_config(path)]


def static_tools(run: RunConfig, case: Any) -> list:
    """The run's registry and Python tools, then the case's own: its documents, bound to a fresh environment
    (built from the case's `meta["environment"]`, for this case and attempt alone) when it has one."""
    from evalrx.suites import case_tool_documents, case_tools
    from evalrx.tools import get_tools

    spec = (getattr(case, "meta", None) or {}).get("environment")
    if isinstance(spec, dict):
        from evalrx.tools.environment import Environment

        own = Environment.from_spec(spec).tools(case_tool_documents(case))
    else:
        own = case_tools(case)
    return list(get_tools(run.tools, case=case)) + own


def mcp_sessions(run: RunConfig) -> Optional[Any]:
    """The run's MCP servers for one job (`McpSessionPool`: shared sessions stay open, restarted when broken;
    the others open per case), or None for a run without servers."""
    if not run.mcp_servers:
        return None
    from evalrx.tools.mcp_servers import McpServer, McpSessionPool

    return McpSessionPool([McpServer.from_dict(d) for d in run.mcp_servers])


@contextlib.contextmanager
def case_toolset(run: RunConfig, case: Any, sessions: Optional[Any] = None) -> Iterator[list]:
    """Every tool one case is offered, MCP servers started for it and stopped after.

    Raises:
        ValueError: an unknown tool, a bad Python path or tool document, an MCP server that does not start.
    """
    tools = static_tools(run, case)
    if not run.mcp_servers:
        yield tools
        return
    owned = sessions is None
    pool = sessions if sessions is not None else mcp_sessions(run)
    try:
        box = pool.open_case()
        try:
            yield tools + list(box.tools)
        finally:
            box.close()  # the case's own servers stop; shared ones stay with the pool
    finally:
        if owned:
            pool.close()


__all__ = ["DEFAULT_TOOLS", "case_toolset", "mcp_server_entries", "mcp_sessions", "run_tools", "static_tools"]
