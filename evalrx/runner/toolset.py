"""The tools of one case, in one place for the worker, the offline runner and the diagnosis.

A case is offered the run's tools (built-in names and `package.module:function` paths), its own
function documents (a BFCL entry's), and the tools of the run's MCP servers: a fresh server session
per case and attempt, so a stateful server starts each case clean, unless a server's config shares
one session across cases (`McpSessions` keeps those open for a whole job).
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
    """The run's registry and Python tools, then the case's own documents (no server is started)."""
    from evalrx.suites import case_tools
    from evalrx.tools import get_tools

    return list(get_tools(run.tools, case=case)) + case_tools(case)


class McpSessions:
    """The run's MCP servers for one job: shared sessions stay open across cases, the others open per case."""

    def __init__(self, run: RunConfig) -> None:
        from evalrx.tools.mcp_servers import McpServer

        servers = [McpServer.from_dict(d) for d in run.mcp_servers or []]
        self.fresh = [s for s in servers if not s.share_session]
        self.shared = [s for s in servers if s.share_session]
        self._shared_box: Optional[Any] = None

    def shared_tools(self) -> list:
        if not self.shared:
            return []
        if self._shared_box is None:
            from evalrx.tools.mcp_servers import open_mcp_tools

            self._shared_box = open_mcp_tools(self.shared)
        return list(self._shared_box.tools)

    @contextlib.contextmanager
    def for_case(self) -> Iterator[list]:
        """The MCP tools of one case; a fresh session's servers stop when the case ends."""
        tools = self.shared_tools()
        if not self.fresh:
            yield tools
            return
        from evalrx.tools.mcp_servers import open_mcp_tools

        box = open_mcp_tools(self.fresh)
        try:
            yield tools + list(box.tools)
        finally:
            box.close()

    def close(self) -> None:
        if self._shared_box is not None:
            self._shared_box.close()
            self._shared_box = None


@contextlib.contextmanager
def case_toolset(run: RunConfig, case: Any, sessions: Optional[McpSessions] = None) -> Iterator[list]:
    """Every tool one case is offered, MCP servers started for it and stopped after.

    Raises:
        ValueError: an unknown tool, a bad Python path or tool document, an MCP server that does not start.
    """
    tools = static_tools(run, case)
    if not run.mcp_servers:
        yield tools
        return
    owned = sessions is None
    sessions = sessions or McpSessions(run)
    try:
        with sessions.for_case() as mcp_tools:
            yield tools + mcp_tools
    finally:
        if owned:
            sessions.close()


__all__ = ["DEFAULT_TOOLS", "McpSessions", "case_toolset", "mcp_server_entries", "run_tools", "static_tools"]
