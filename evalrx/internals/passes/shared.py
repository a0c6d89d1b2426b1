"""One teacher-forced forward per planned pass, shared by every analyzer of a trajectory.

An analyzer that reads teacher-forced passes (`PassReader`; `evalrx.analyzers.PassAnalyzer`)
runs no forward of its own. For each planned pass it says what it reads (`PassRequest`: the
positions whose final logits it needs, whether it needs every layer's hidden states, the
query positions whose attention rows it needs), reads its part from the `PassResult` once
the pass has run, and assembles its result from those parts.

`run_pass_analyzers` plans a trajectory once per planning mode, runs ONE forward per planned
pass for all the analyzers given (the union of what they read; attention rows
rebuilt from the pass's KV cache, or eager attention for that pass only where the
model does not allow it, when one of them reads attention) and hands the same pass result
to each (`evalrx.analyzers.analyze` resolves the analyzers by name and calls it; an
analyzer's own `run_trajectory` is the same path with one analyzer).
Passes run one at a time and are dropped once every analyzer has read them, so
memory holds one pass's hidden states, as with one analyzer.

When the agent captured its own generation (`chat(..., capture=...)` on hf_local, kept on
the trajectory by the agent loop), a pass whose turns the captures cover exactly is built
from them instead (`capture`): no forward runs. A pass they do not cover (a template that
rewrites history, a re-tokenized turn, attention from a model that generated without eager
attention) runs teacher-forced as before. Each result's `info["source"]` says which
("generation", "teacher_forced" or "mixed"), and `info["source_notes"]` why a pass fell back.

Nothing here imports torch at module level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from evalrx.internals.passes.planning import PassResult, TrajectoryPlan

__all__ = ["PassReader", "PassRequest", "pass_result", "run_pass", "run_pass_analyzers"]


@dataclass
class PassRequest:
    """What one analyzer reads from one planned pass.

    Attributes:
        logits: predicting positions whose final logits it needs.
        hidden: it needs every layer's hidden states.
        attention: query positions whose head-averaged attention rows it needs.
        state: the analyzer's own data for reading this pass (its decision points, ...).
        lens: where it may read the lens (`lens.LensRequest`), so that analyzers at the same positions
            share one unembedding (`PassResult.lens_stats`).
    """

    logits: Sequence[int] = ()
    hidden: bool = False
    attention: Sequence[int] = ()
    state: Any = None
    lens: Any = None


class PassReader(Protocol):
    """What the shared passes need of an analyzer that reads them (`evalrx.analyzers.PassAnalyzer` is one).

    Attributes:
        mode: its planning mode ("auto" or "per_step").
        generation_capture: the `GenerationCapture` kinds it can read instead of a teacher-forced pass.
    """

    mode: str
    generation_capture: frozenset

    def requests(self, plan: TrajectoryPlan) -> "list[Optional[PassRequest]]": ...

    def read(self, plan: TrajectoryPlan, request: PassRequest, result: PassResult) -> Any: ...

    def finish(self, plan: TrajectoryPlan, parts: list) -> Any: ...

    def mark_source(self, result: Any, source: str, notes: Sequence[str] = ()) -> None: ...


def _raise(name: str, exc: BaseException) -> None:
    raise exc


def run_pass_analyzers(
    local: Any,
    trajectory: Any,
    analyzers: "Sequence[tuple[str, PassReader]]",
    *,
    tools: Optional[list] = None,
    system: Optional[str] = None,
    fail: Any = _raise,
    captures: Optional[dict] = None,
    images: Optional[dict] = None,
) -> dict:
    """Run pass analyzers (capabilities already checked) on one plan per mode and one forward per pass.

    Args:
        local: the model (`compute.local_model`).
        trajectory: the stored trajectory.
        analyzers: `(name, analyzer)` pairs.
        tools, system: as the run used them.
        fail: `fail(name, exc)` on an analyzer's failure; the default raises.
        captures: `{actor step: GenerationCapture}` of the run's own generation: passes
            they cover are built from them instead of run (see the module docstring).
        images: `{step: [image, ...]}` the pictures a vision model saw (`TrajectoryPlan.build`).

    Returns:
        `{name: result}` of the analyzers that did not fail.
    """
    from evalrx.models import batch_threads

    results: dict = {}
    by_mode: dict = {}
    for name, analyzer in analyzers:
        by_mode.setdefault(analyzer.mode, []).append((name, analyzer))
    with batch_threads(local.handle):  # passes and the lens are large products: the free cores share them
        for mode, group in by_mode.items():
            _run_group(local, trajectory, group, tools, system, mode, results, fail, captures or {}, images)
    return results


_CAPTURED = {"hidden_states": "hidden", "attention": "attention"}  # GenerationCapture field per kind


def _source(read: set, captures: dict, analyzer: PassReader) -> str:
    """One word for where an analyzer's passes came from (for one that read none: where they would have)."""
    if read:
        return next(iter(read)) if len(read) == 1 else "mixed"
    kinds = analyzer.generation_capture
    covered = (
        bool(captures)
        and bool(kinds)
        and all(
            getattr(cap, _CAPTURED.get(kind, kind), None) is not None for cap in captures.values() for kind in kinds
        )
    )
    return "generation" if covered else "teacher_forced"


def _pass_notes(request: PassRequest, result: PassResult) -> "tuple[set, list]":
    """The sources an analyzer's request read from a pass, and the notes that concern it."""
    reads = set()
    if request.logits or request.hidden:
        reads.add("tensors")
    if request.attention:
        reads.add("attention")
    sources = {result.source if part == "tensors" else result.attention_source for part in reads}
    notes = [why for part, why in result.notes if part == "all" or part in reads]
    return sources, notes


def _run_group(local, trajectory, group, tools, system, mode, results, fail, captures, images=None) -> None:
    failed: set = set()

    def failure(name: str, exc: BaseException) -> None:
        failed.add(name)
        fail(name, exc)

    try:
        plan = TrajectoryPlan.build(
            local, trajectory, tools=tools, system=system, mode=mode, captures=captures, images=images
        )
    except Exception as exc:
        for name, _ in group:
            failure(name, exc)
        return
    requests: dict = {}
    for name, analyzer in group:
        try:
            reqs = list(analyzer.requests(plan))
            if len(reqs) != len(plan.passes):
                raise RuntimeError(
                    f"{type(analyzer).__name__}.requests gave {len(reqs)} requests for {len(plan.passes)} passes"
                )
            requests[name] = reqs
        except Exception as exc:
            failure(name, exc)
    analyzers = dict(group)
    parts = {name: [None] * len(plan.passes) for name in requests}
    sources: dict = {name: set() for name in requests}
    notes: dict = {name: [] for name in requests}
    for i in range(len(plan.passes)):
        wanted = [(name, reqs[i]) for name, reqs in requests.items() if reqs[i] is not None and name not in failed]
        if not wanted:
            continue
        try:
            result = pass_result(
                plan,
                i,
                [req for _, req in wanted],
                captures,
                all(analyzers[name].generation_capture for name, _ in wanted),
            )
        except Exception as exc:
            for name, _ in wanted:
                failure(name, exc)
            continue
        result.lens_requests = [req.lens for _, req in wanted if req.lens is not None]
        for name, req in wanted:
            try:
                parts[name][i] = analyzers[name].read(plan, req, result)
            except Exception as exc:
                failure(name, exc)
                continue
            read, why = _pass_notes(req, result)
            sources[name] |= read
            notes[name].extend(w for w in why if w not in notes[name])
        del result  # the pass's hidden states go before the next pass runs
    for name in requests:
        if name in failed:
            continue
        try:
            results[name] = analyzers[name].finish(plan, parts[name])
            source = _source(sources[name], captures, analyzers[name])
            analyzers[name].mark_source(results[name], source, notes[name])
        except Exception as exc:
            failure(name, exc)


def pass_result(
    plan: TrajectoryPlan, index: int, requests: Sequence[PassRequest], captures: dict, capturable: bool = True
) -> PassResult:
    """Pass `index` as `requests` read it: from the generation captures where they cover it, else ONE forward.

    Args:
        plan: the trajectory's plan.
        index: the pass.
        requests: what the analyzers read from it.
        captures: `{actor step: GenerationCapture}` (empty: teacher-forced).
        capturable: every analyzer reading the pass can be served by captures.
    """
    if not captures:
        return run_pass(plan, index, requests)
    if not capturable:
        result = run_pass(plan, index, requests)
        result.notes.append(("all", "an analyzer of this pass reads teacher-forced passes only"))
        return result
    from evalrx.internals.passes.capture import capture_pass, capture_problem

    tensors = any(r.logits or r.hidden for r in requests)
    problem = tensors and capture_problem(
        plan, index, captures, hidden=True, positions=[p for r in requests for p in r.logits]
    )
    if problem:
        result = run_pass(plan, index, requests)
        result.notes.append(("all", f"pass {index}: {problem}"))
        return result
    attention = [p for r in requests for p in r.attention]
    problem = capture_problem(plan, index, captures, attention=True, positions=attention) if attention else None
    try:
        if not problem:
            return capture_pass(plan, index, requests, captures)
        if tensors:  # logits and hidden states from the generation, attention rows from a forward below
            result = capture_pass(plan, index, [PassRequest(r.logits, r.hidden) for r in requests], captures)
    except Exception as exc:  # a capture that cannot be read costs a forward, never the analysis
        result = run_pass(plan, index, requests)
        result.notes.append(("all", f"pass {index}: reading the captures failed: {type(exc).__name__}: {exc}"))
        return result
    note = ("attention", f"pass {index}: {problem}")
    if not tensors:
        result = run_pass(plan, index, requests)
        result.notes.append(note)
        return result
    forced = run_pass(plan, index, [PassRequest(attention=r.attention) for r in requests if r.attention])
    result.attention_positions, result.attention = forced.attention_positions, forced.attention
    result.attention_source = "teacher_forced"
    result.notes.append(note)
    return result


def run_pass(plan: TrajectoryPlan, index: int, requests: Sequence[PassRequest]) -> PassResult:
    """ONE forward over pass `index` giving the union of what `requests` read."""
    from evalrx.internals.passes.compute import teacher_forced

    tf_pass = plan.passes[index]
    ids = tf_pass.ids
    wanted = {int(p) for r in requests for p in r.logits}
    if wanted:
        # The final projection's rows differ in their last bits with the number of rows in the
        # product, so logits are always taken at every generated token (a superset of what the
        # built-in analyzers read): an analyzer's numbers do not depend on who shares its pass.
        wanted.update(i - 1 for pt in tf_pass.turns for i in range(max(1, pt.gen_tokens[0]), pt.gen_tokens[1]))
    logit_positions = sorted(wanted) or [len(ids) - 1]
    attention = sorted({int(p) for r in requests for p in r.attention})
    hidden = any(r.hidden for r in requests)
    logits, states, rows = teacher_forced(
        plan.local, ids, logit_positions, hidden=hidden, attention=attention or None, inputs=plan.inputs(index)
    )
    return PassResult(plan, index, logit_positions, logits, states, attention, rows)
