"""The tools of one case, in one place for the worker, the offline runner and the diagnosis.

A case is offered the run's tools (built-in names and `package.module:function` paths), its own
function documents (a BFCL entry's; the methods of its own stateful environment, built fresh for each
case and attempt, when it has one), and the tools of the run's MCP servers: a fresh server session
per case and attempt, so a stateful server starts each case clean, unless a server's config shares
one session across cases (`mcp_sessions` gives the pool that keeps those open for a whole job).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from evalrx.config import RunConfig
from evalrx.core.case import StepRole, Trajectory
from evalrx.core.observation import picture_count

# The tools a run offers when none are named and its cases bring none of their own (a vision model adds image_zoom).
DEFAULT_TOOLS = ("calculator", "lookup")
VISION_TOOL = "image_zoom"


def tool_list(text: Optional[str]) -> Optional[list]:
    """The tools a comma- or space-separated text names (`--tools`, the page's Python paths); None for None."""
    if text is None:
        return None
    return [t for t in text.replace(",", " ").split() if t]


def _named_by_cases(cases: Sequence[Any]) -> list:
    """The tool names the cases name (`meta["tools"]`), each once, in the order they first name them."""
    seen: dict = {}
    for case in cases:
        for name in (case.meta or {}).get("tools") or []:
            if isinstance(name, str):
                seen.setdefault(name, None)
    return list(seen)


def default_tools(cases: Sequence[Any], *, vision: bool = False) -> list:
    """The tools a run offers when none are asked for: none when every case brings its own functions (BFCL's),
    so the model sees only those; else the built-in tools every case names alike (a demo suite's); else the
    demo tools, with image_zoom for a vision model."""
    from evalrx.suites import case_tool_documents
    from evalrx.tools import TOOLS

    cases = list(cases)
    if cases and all(case_tool_documents(c) for c in cases):
        return []
    lists = [[t for t in (c.meta or {}).get("tools") or [] if isinstance(t, str)] for c in cases]
    if lists and lists[0] and all(names == lists[0] for names in lists) and all(t in TOOLS for t in lists[0]):
        return list(lists[0])
    return [t for t in (*DEFAULT_TOOLS, *((VISION_TOOL,) if vision else ())) if t in TOOLS]


def run_tools(asked: Optional[Iterable[str]], cases: Sequence[Any], *, spec: Optional[str] = None) -> list:
    """A run's tools, the one decision the app, the CLI and the queue share: `asked` (None: `default_tools`
    for the model `spec`), each once, in one order: the order the cases name them, then the rest by name.
    The order is part of the prompt, so the same tools picked or typed in another order give the same run.

    Raises:
        ValueError: an unknown spec (only when `asked` is None).
    """
    if asked is None:
        from evalrx.models import resolve_spec_key
        from evalrx.specs import get_spec

        names = default_tools(cases, vision=get_spec(resolve_spec_key(spec)).vision if spec else False)
    else:
        names = [str(t).strip() for t in asked]
    wanted = list(dict.fromkeys(t for t in names if t))
    named = [t for t in _named_by_cases(cases) if t in wanted]
    return named + sorted(t for t in wanted if t not in named)


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
    from evalrx.tools.mcp_servers import McpSessionPool

    return McpSessionPool(list(run.mcp_servers))


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
    assert pool is not None  # run.mcp_servers is not empty
    try:
        box = pool.open_case()
        try:
            yield tools + list(box.tools)
        finally:
            box.close()  # the case's own servers stop; shared ones stay with the pool
    finally:
        if owned:
            pool.close()


def run_with_tools(
    handle: Any,
    run: RunConfig,
    case: Any,
    sessions: Optional[Any] = None,
    *,
    check: Optional[Callable[[], None]] = None,
    **agent_kwargs: Any,
) -> "tuple[Trajectory, list, dict]":
    """Run and grade one case with the tools it is offered (`case_toolset`): the trajectory, those tools and the
    pictures they returned by step, as the worker and `evalrx run --out` run a case. What fails before the model is
    asked (`check`, a bad tool, a server that did not start) is an error trajectory with no tools, not an exception.
    """
    from evalrx.core.case import Label
    from evalrx.models.agent import error_trajectory, run_case

    captured: list = []
    try:
        if check is not None:
            check()
        with case_toolset(run, case, sessions) as offered:
            tools = [capturing(tool, captured) for tool in offered]
            traj = run_case(handle, case, tools, grade=True, **agent_kwargs)
    except Exception as exc:  # the case fails, not the run
        traj, tools = error_trajectory(case, exc), []
        traj.outcome = Label.ERROR
    return traj, tools, pictures_by_step(traj, captured)


__all__ = [
    "DEFAULT_TOOLS",
    "capturing",
    "case_toolset",
    "default_tools",
    "mcp_sessions",
    "pictures_by_step",
    "shown_pictures",
    "run_tools",
    "run_with_tools",
    "static_tools",
    "tool_list",
]


# ---------------------------------------------------------------- the pictures tools return


def capturing(tool: Any, sink: list) -> Any:
    """The same tool, recording the pictures of every result (in call order) into `sink`."""
    from evalrx.core.tool import ToolResult

    fn = tool.fn
    if fn is None:
        return tool

    @functools.wraps(fn)  # keeps the signature the agent checks arguments against
    def call(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if isinstance(result, ToolResult) and result.images:
            sink.append(list(result.images))
        return result

    return dataclasses.replace(tool, fn=call)


def pictures_by_step(traj: Trajectory, captured: list) -> dict:
    """Pair captured picture lists with the tool steps that reported pictures, both in call order."""
    steps = [s.idx for s in traj.steps if s.role is StepRole.TOOL and picture_count(s.observation) > 0]
    return dict(zip(steps, captured))


def shown_pictures(traj: Trajectory, case: Any, by_step: dict) -> dict:
    """`{step: [picture, ...]}` every picture a finished case's conversation showed: the case's on the prompt's
    step (the first user step), those a tool returned on its step (what a VLM's analyses need); a stored
    trajectory's are `evalrx.store.shown_pictures`."""
    shown = {idx: list(pics) for idx, pics in by_step.items()}
    picture = getattr(getattr(case, "inputs", None), "image", None)
    prompt = next((s.idx for s in traj.steps if s.role is StepRole.USER), None)
    if picture is not None and prompt is not None:
        shown[prompt] = [picture]
    return shown
