"""Analyzers that read the shared teacher-forced passes (`PassAnalyzer`), and several of them run on one
trajectory from one forward per pass (`analyze`).

The mechanism (planning, the forwards, the generation captures, the one shared pass) is
`evalrx.internals.passes`; here an analyzer is resolved by name and handed to it.

    from evalrx.analyzers import analyze
    results = analyze(handle, trajectory, ["logit_lens", {"name": "tool_decision", "top_k": 3}],
                      tools=schemas, system=system)
    results["logit_lens"].entropy

Nothing here imports torch at module level.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from evalrx.analyzers._base import AnalysisResult, Analyzer, get_analyzer
from evalrx.core.analyzer_entry import parse_analyzer_entry
from evalrx.internals.passes import PassRequest, PassResult, TrajectoryPlan, run_pass_analyzers

__all__ = ["PassAnalyzer", "analyze"]


class PassAnalyzer(Analyzer):
    """An analyzer that reads shared teacher-forced passes instead of running its own.

    Subclasses implement `requests` (what they read from each planned pass), `read`
    (their part of one pass) and `finish` (the result from the parts). `run_trajectory`
    is then plan + shared passes + `read` + `finish`, exactly what `analyze` does for
    several analyzers at once.

    Attributes:
        mode: planning mode, "auto" (one pass for prefix-stable turns) or "per_step".
        generation_capture: what this analyzer can read from the agent's own generation
            instead of a teacher-forced pass (kinds of `GenerationCapture`: "hidden_states",
            "attention"); empty when it needs the teacher-forced pass. An analyzer declaring
            it must read hidden states, logits and attention rows only at the positions its
            requests name, each of them a position that predicts a generated token.
    """

    mode: str = "auto"
    generation_capture: frozenset = frozenset()

    def reads_passes(self, model: Any, trajectory: Any) -> bool:
        """Whether this trajectory on this model is analysed from teacher-forced passes."""
        return True

    def without_passes(self, trajectory: Any) -> AnalysisResult:
        """The result where `reads_passes` is False (an analyzer whose `reads_passes` can say False defines it)."""
        raise NotImplementedError(f"{type(self).__name__} reads every trajectory from passes.")

    def requests(self, plan: TrajectoryPlan) -> "list[Optional[PassRequest]]":
        """One request per pass of `plan.passes` (None: nothing to read there)."""
        raise NotImplementedError

    def read(self, plan: TrajectoryPlan, request: PassRequest, result: PassResult) -> Any:
        """This analyzer's part of one pass (numpy; the pass's tensors are dropped afterwards)."""
        raise NotImplementedError

    def finish(self, plan: TrajectoryPlan, parts: list) -> AnalysisResult:
        """The result from the parts, one per pass (None where the request was None)."""
        raise NotImplementedError

    def mark_source(self, result: AnalysisResult, source: str, notes: Sequence[str] = ()) -> None:
        """Record where the result's passes came from: `info["source"]` (and a result's own `source`)."""
        info = getattr(result, "info", None)
        if isinstance(info, dict):
            info["source"] = source
            if notes:
                info["source_notes"] = list(notes)
        if isinstance(getattr(result, "source", None), str):  # a result that names its source (uncertainty)
            setattr(result, "source", source)

    def run_trajectory(
        self,
        model: Any,
        trajectory: Any,
        *,
        tools: Optional[list] = None,
        system: Optional[str] = None,
        images: Optional[dict] = None,
    ) -> AnalysisResult:
        """Analyse a stored trajectory: plan it, run its passes, read them (see `analyze` for several at once).

        Raises:
            CapabilityError: the model lacks what the passes need (and `reads_passes` says they are needed).
        """
        from evalrx.internals.passes import local_model

        if not self.reads_passes(model, trajectory):
            return self.without_passes(trajectory)
        self.check(model)
        local = local_model(model, type(self).__name__)
        return run_pass_analyzers(local, trajectory, [(self.name, self)], tools=tools, system=system, images=images)[
            self.name
        ]


def _resolve(names: Sequence[Any]) -> "list[tuple[str, Analyzer]]":
    out: list = []
    for entry in names:
        if isinstance(entry, Analyzer):
            name, analyzer = entry.name.strip().lower(), entry
        else:
            try:
                name, kwargs = parse_analyzer_entry(entry)
            except ValueError:
                raise ValueError(
                    f"an analyzer entry must be a name, {{'name': ..., ...}} or an Analyzer, got {entry!r}"
                ) from None
            analyzer = get_analyzer(name, **kwargs)
        if any(name == n for n, _ in out):
            raise ValueError(
                f"analyzer {name!r} is requested twice; analyze returns one result per name, "
                "so run the second configuration in its own call"
            )
        out.append((name, analyzer))
    return out


def analyze(
    handle: Any,
    trajectory: Any,
    names: Sequence[Any],
    tools: Optional[list] = None,
    system: Optional[str] = None,
    *,
    errors: Optional[dict] = None,
    captures: Any = "auto",
    images: Optional[dict] = None,
) -> "dict[str, AnalysisResult]":
    """Run several analyzers on one trajectory from ONE teacher-forced forward per planned pass (or none: captures).

    The trajectory is planned once (per planning mode among the analyzers), each pass
    runs once with the union of what the analyzers read (hidden states when one needs
    them, attention rows when `attention` is among them) and every analyzer reads the
    same pass result. Each result equals that analyzer's own `run_trajectory`. Analyzers
    that read no passes (`replay`, one registered without `PassAnalyzer`, or
    `token_uncertainty` reading an API trajectory's stored log-probs) run on their own.

    Args:
        handle: the model (a local handle for the white-box analyzers).
        trajectory: the stored trajectory.
        names: registry names, `{"name": ..., **kwargs}` dicts, or `Analyzer` instances.
        tools: the tools the run offered (`Tool` objects or OpenAI schema dicts).
        system: the run's system prompt.
        errors: when given, an analyzer that fails is left out of the result and its
            exception stored here by name, and the others go on; when None, the first
            failure raises.
        captures: the run's own generation captures, `{actor step: GenerationCapture}`:
            "auto" takes those the agent loop kept on the trajectory
            (`evalrx.models.agent.generation_captures`; none for a stored, imported or API
            trajectory), None forces the teacher-forced passes. A pass the captures cover
            is built from them with no forward (each result's `info["source"]` says which).
        images: `{step: [image, ...]}` the pictures the conversation showed (the case image on the
            prompt's step, a tool's images on its step): a vision model's passes then see them
            (pixel values, each image's tokens); without them image blocks are dropped.

    Returns:
        `{name: result}` in the order requested.

    Raises:
        ValueError: an unknown analyzer name, or one name requested twice.
        CapabilityError: (without `errors`) the handle lacks what an analyzer needs.
    """
    from evalrx.internals.passes import local_model

    analyzers = _resolve(names)
    if isinstance(captures, str):
        if captures != "auto":
            raise ValueError(f"captures must be 'auto', None or {{step: capture}}, got {captures!r}")
        from evalrx.models.agent import generation_captures

        captures = generation_captures(trajectory)

    def fail(name: str, exc: BaseException) -> None:
        if errors is None:
            raise exc
        errors[name] = exc

    results: dict = {}
    shared: list = []
    for name, analyzer in analyzers:
        try:
            if isinstance(analyzer, PassAnalyzer) and analyzer.reads_passes(handle, trajectory):
                analyzer.check(handle)
                shared.append((name, analyzer))
            else:
                results[name] = analyzer.run_trajectory(handle, trajectory, tools=tools, system=system)
        except Exception as exc:
            fail(name, exc)
    if shared:
        try:
            local = local_model(handle, " and ".join(type(a).__name__ for _, a in shared))
        except Exception as exc:
            for name, _ in shared:
                fail(name, exc)
        else:
            results.update(
                run_pass_analyzers(
                    local,
                    trajectory,
                    shared,
                    tools=tools,
                    system=system,
                    fail=fail,
                    captures=dict(captures or {}),
                    images=images,
                )
            )
    return {name: results[name] for name, _ in analyzers if name in results}
