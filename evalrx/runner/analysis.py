"""The extension point for analyses that run after each case of a run.

A run config's `analyzers` lists names (or `{"name": ..., **kwargs}` dicts) of the one
registry `evalrx.analyzers.ANALYZERS`: an analyzer (its `run_trajectory(handle, trajectory,
tools=..., system=...)` result is stored as compact arrays plus meta) or a hook registered
here. A hook is any callable `hook(ctx) -> iterable of AnalysisRecord` (or None), for
analyses that are not `Analyzer` classes; `register_hook` enters it in that registry as a
`HookAnalyzer`, so the queue's check and the New run page know it by name:

    from evalrx.runner.analysis import AnalysisRecord, register_hook

    def answer_length(ctx):
        yield AnalysisRecord("answer_length", meta={"chars": len(ctx.trajectory.final_answer or "")})

    register_hook("answer_length", answer_length)

Hooks and analyzers run in the worker after the case finishes and before it is
written, outside the write transaction; their records are written with the case.
A failing analysis is recorded (meta `error`) and never fails the case. The analyzer
entries of one config run together through `evalrx.analyzers.analyze`: one teacher-forced
forward per planned pass, read by every analyzer.

On a local model the white-box analyzers read the agent's own generation instead where they
can: `with_capture` switches capture on in the agent's chat kwargs for the analyzers the run
asks for, the agent loop keeps each turn's capture on the trajectory object (never stored),
`analyze` builds the passes the captures cover without running the model again, and `run_all`
releases the captures once the case's analyses are done. Stored, imported and API
trajectories (replay, analysis requests) carry no captures and stay teacher-forced.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from evalrx.core.analyzer_entry import parse_analyzer_entry

if TYPE_CHECKING:
    from evalrx.config import RunConfig


@dataclass
class CaseContext:
    """What an analysis gets: the live handle, the case, its trajectory and the run's setup
    (`run`: the run's `RunConfig`, as the worker holds it), and the pictures the conversation
    showed (`images`: `{step: [image, ...]}`, the case image on the prompt's step, a tool's on its own)."""

    handle: Any
    case: Any
    trajectory: Any
    tools: list
    tool_schemas: list
    system: Optional[str]
    run: "RunConfig"
    images: dict = field(default_factory=dict)

    @property
    def run_config(self) -> "RunConfig":
        """The run's config under its earlier name (hooks written for earlier releases read it)."""
        return self.run


@dataclass
class AnalysisRecord:
    """One stored analysis result: compact numpy arrays plus JSON meta, optionally for one step.

    `result` is the analyzer's result object when there is one (never stored); `scores` are the numbers
    the store indexes for it (`evalrx.analyzers.analysis_scores`), filled by `run_all`.
    """

    analyzer: str
    arrays: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    step_idx: Optional[int] = None
    result: Any = field(default=None, repr=False, compare=False)
    scores: dict = field(default_factory=dict, repr=False, compare=False)


Hook = Callable[[CaseContext], Optional[Iterable[AnalysisRecord]]]


def register_hook(name: str, hook: Hook, *, replace: bool = False) -> None:
    """Register a per-case analysis hook under `name` (usable in a run config's `analyzers`).

    Raises:
        ValueError: the name is taken (by a hook or an analyzer) and `replace` is False.
    """
    from evalrx.analyzers import HookAnalyzer, register_analyzer

    key = name.strip().lower()
    entry = type(f"Hook_{key}", (HookAnalyzer,), {"name": key, "hook": staticmethod(hook), "__doc__": hook.__doc__})
    register_analyzer(entry, replace=replace)


def _hook(name: str, kwargs: dict) -> Optional[Hook]:
    """The registered hook behind `name`, or None when `name` is an analyzer.

    Raises:
        ValueError: `name` is unknown (the message lists the known ones), or a hook is given arguments.
    """
    from evalrx.analyzers import HookAnalyzer, analyzer_class

    cls = analyzer_class(name)
    if not issubclass(cls, HookAnalyzer):
        return None
    if kwargs:
        raise ValueError(f"the analysis hook {name!r} takes no arguments, got {sorted(kwargs)}")
    return cls().run_case


def _analyzer_hook(name: str, kwargs: dict) -> Hook:
    from evalrx.analyzers import get_analyzer

    analyzer = get_analyzer(name, **kwargs)  # raises ValueError listing the known analyzers

    def hook(ctx: CaseContext) -> list:
        pictures = {"images": ctx.images} if ctx.images else {}  # an analyzer written before pictures takes none
        result = analyzer.run_trajectory(
            ctx.handle, ctx.trajectory, tools=ctx.tool_schemas, system=ctx.system, **pictures
        )
        meta = dict(result.meta)
        return [
            AnalysisRecord(name, arrays=result.to_arrays(), meta=meta, step_idx=meta.get("step_idx"), result=result)
        ]

    return hook


def _error_record(name: str, exc: BaseException) -> AnalysisRecord:
    return AnalysisRecord(
        name,
        meta={
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(exc, limit=3))[-2000:],
        },
    )


def _shared_pass_hook(specs: list) -> Hook:
    """One hook for several analyzers: `analyze` runs them from one teacher-forced forward per planned pass.

    An analyzer that fails gets its own error record; the others are kept.
    """
    from evalrx.analyzers import analyze, get_analyzer

    for name, kwargs in specs:
        get_analyzer(name, **kwargs)  # raises ValueError listing the known analyzers

    def hook(ctx: CaseContext) -> list:
        errors: dict = {}
        try:
            results = analyze(
                ctx.handle,
                ctx.trajectory,
                [dict(kwargs, name=name) for name, kwargs in specs],
                tools=ctx.tool_schemas,
                system=ctx.system,
                errors=errors,
                images=ctx.images or None,
            )
        except Exception as exc:  # nothing ran: every analyzer records why
            results, errors = {}, {name: exc for name, _ in specs}
        records = []
        for name, _ in specs:
            if name not in results:
                records.append(_error_record(name, errors.get(name) or RuntimeError("no result")))
                continue
            meta = dict(results[name].meta)
            records.append(
                AnalysisRecord(
                    name,
                    arrays=results[name].to_arrays(),
                    meta=meta,
                    step_idx=meta.get("step_idx"),
                    result=results[name],
                )
            )
        return records

    return hook


def capture_kinds(entries: Iterable[Any]) -> frozenset:
    """What the agent's generation should capture for a run's analyzer entries (empty: nothing to capture).

    The analyzers that run together through `analyze` and declare `generation_capture`
    count; hooks and second configurations of an analyzer (run on their own) do not.
    """
    from evalrx.analyzers import get_analyzer

    kinds: set = set()
    seen: set = set()
    for entry in entries or []:
        name, kwargs = parse_analyzer_entry(entry)
        if name in seen:
            continue
        seen.add(name)
        try:
            if _hook(name, kwargs) is not None:
                continue
            analyzer = get_analyzer(name, **kwargs)
        except (ValueError, TypeError):  # `resolve` reports a bad entry; capture just leaves it out
            continue
        kinds |= set(getattr(analyzer, "generation_capture", ()) or ())
    return frozenset(kinds)


def with_capture(agent_kwargs: dict, handle: Any, entries: Iterable[Any]) -> dict:
    """`agent_kwargs` with generation capture switched on where the run's analyzers read it.

    Only for a handle whose `chat` takes `capture` (hf_local), and not when attention is asked of
    a model whose attention kernel gives no rows (neither eager nor sdpa); a run config that sets
    `chat_kwargs["capture"]` keeps its choice.
    """
    import inspect

    kinds = capture_kinds(entries)
    chat = getattr(handle, "chat", None)
    try:
        takes = callable(chat) and "capture" in inspect.signature(chat).parameters
    except (TypeError, ValueError):  # pragma: no cover - a chat without a signature
        takes = False
    if not kinds or not takes:
        return dict(agent_kwargs)
    if "attention" in kinds and not getattr(handle, "captures_attention", False):
        # A kernel that gives no attention rows: the teacher-forced pass runs anyway for attention, every
        # analyzer shares it, and capturing during generation would only add its hooks.
        return dict(agent_kwargs)
    chat_kwargs = dict(agent_kwargs.get("chat_kwargs") or {})
    chat_kwargs.setdefault("capture", sorted(kinds))
    return {**agent_kwargs, "chat_kwargs": chat_kwargs}


def resolve(entries: Iterable[Any]) -> list[tuple[str, Hook]]:
    """Turn a run config's `analyzers` into (name, hook) pairs; unknown names raise ValueError.

    Registered hooks stay one hook each; the analyzers become one hook that shares their
    teacher-forced passes (a second configuration of the same analyzer keeps a hook of its own).
    """
    out: list = []
    shared: list = []
    at = None
    for entry in entries or []:
        name, kwargs = parse_analyzer_entry(entry)
        hook = _hook(name, kwargs)
        if hook is not None:
            out.append((name, hook))
        elif any(name == n for n, _ in shared):
            out.append((name, _analyzer_hook(name, kwargs)))
        else:
            at = len(out) if at is None else at
            shared.append((name, kwargs))
    if shared:
        assert at is not None  # set with the first shared entry
        out.insert(at, ("+".join(name for name, _ in shared), _shared_pass_hook(shared)))
    return out


def run_all(hooks: list, ctx: CaseContext) -> list[AnalysisRecord]:
    """Run every hook on one case; a failure becomes a record with meta `error`.

    The trajectory's generation captures (if the agent kept any) are released afterwards.
    """
    from evalrx.models.agent import drop_generation_captures

    records: list = []
    try:
        for name, hook in hooks:
            try:
                produced = hook(ctx)
                records.extend(list(produced or []))
            except Exception as exc:  # an analysis never fails the case
                records.append(_error_record(name, exc))
    finally:
        drop_generation_captures(ctx.trajectory)
    from evalrx.analyzers import analysis_scores

    for rec in records:  # read from the result objects while the worker still holds them
        rec.scores = analysis_scores(rec.analyzer, rec.meta or {}, rec.arrays or {}, rec.result)
    return records


def analyse_case(
    hooks: list, handle: Any, run: "RunConfig", case: Any, traj: Any, tools: list, pictures: dict
) -> list[AnalysisRecord]:
    """A finished case's analysis records, as the worker and `evalrx run --out` run them: after the case, reading
    its generation's captures and the pictures its conversation showed (`pictures`: `toolset.shown_pictures`)."""
    from evalrx.models.agent import case_system

    ctx = CaseContext(
        handle=handle,
        case=case,
        trajectory=traj,
        tools=tools,
        tool_schemas=[tool.to_openai() for tool in tools],
        system=case_system(run.system, case.meta),
        run=run,
        images=pictures,
    )
    return run_all(hooks, ctx)
