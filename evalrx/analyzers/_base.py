"""The analyzer contract, its registry, and the storable result base class.

`ANALYZERS` is the one registry of analysis names: the analyzer classes, and the worker
hooks (`HookAnalyzer`, registered by `evalrx.runner.register_hook`) that a run config,
the queue's check and the New run page name the same way (`known_analyzers`).

An analyzer declares the capabilities it needs; they are checked before it runs, so
asking a black-box handle for a logit lens fails at once with a `CapabilityError`
naming the analyzer, the model and what is missing. Results are storable: every
result turns into a dict of compact numpy arrays plus a small JSON-safe `meta` dict,
and back (`result_from_arrays`). Nothing here imports torch.
"""

from __future__ import annotations

import json
from typing import Any, Callable, ClassVar, Optional, Type

import numpy as np

from evalrx.core.capability import CapabilityError
from evalrx.core.model import Model, model_id  # re-exported: the analyzers' results name their model with it

__all__ = [
    "ANALYZERS",
    "RESULT_TYPES",
    "AnalysisResult",
    "Analyzer",
    "HookAnalyzer",
    "analyzer_class",
    "get_analyzer",
    "known_analyzers",
    "model_id",
    "register_analyzer",
    "register_result",
    "result_from_arrays",
]


class AnalysisResult:
    """Base class of analyzer results: compact arrays plus small JSON metadata.

    Subclasses set `result_type`, implement `to_arrays`, `meta` and `from_arrays`, and
    register themselves with `register_result` so stored results can be rebuilt.
    """

    result_type: ClassVar[str] = "base"

    def to_arrays(self) -> "dict[str, np.ndarray]":
        """The numeric content as named numpy arrays (never full-vocabulary tensors)."""
        raise NotImplementedError

    @property
    def meta(self) -> dict:
        """Small JSON-safe metadata; always carries `result_type`."""
        raise NotImplementedError

    @classmethod
    def from_arrays(cls, arrays: "dict[str, np.ndarray]", meta: dict) -> "AnalysisResult":
        """Rebuild a result from what `to_arrays` and `meta` returned."""
        raise NotImplementedError

    def stored_nbytes(self) -> int:
        """Bytes a store keeps for this result: array payloads plus the JSON metadata."""
        arrays = self.to_arrays()
        meta_bytes = len(json.dumps(self.meta, ensure_ascii=False).encode("utf-8"))
        return int(sum(a.nbytes for a in arrays.values())) + meta_bytes


RESULT_TYPES: "dict[str, Type[AnalysisResult]]" = {}


def register_result(cls: "Type[AnalysisResult]") -> "Type[AnalysisResult]":
    """Class decorator: make `result_from_arrays` able to rebuild `cls` by its `result_type`."""
    RESULT_TYPES[cls.result_type] = cls
    return cls


def result_from_arrays(arrays: "dict[str, np.ndarray]", meta: dict) -> AnalysisResult:
    """Rebuild any stored result from its arrays and meta (dispatch on `meta["result_type"]`).

    Raises:
        ValueError: the meta names no known result type.
    """
    kind = meta.get("result_type")
    cls = RESULT_TYPES.get(str(kind))
    if cls is None:
        raise ValueError(f"Unknown result_type {kind!r}; known: {', '.join(sorted(RESULT_TYPES))}.")
    return cls.from_arrays(arrays, meta)


class Analyzer:
    """Base class of analyzers.

    Subclasses set `name` and `requires` and implement `run` (one prompt) and
    `run_trajectory` (a stored trajectory). Both start with `self.check(model)`.
    """

    name: ClassVar[str] = "analyzer"
    requires: ClassVar[frozenset] = frozenset()
    # What the CapabilityError suggests when the handle is an API model.
    api_hint: ClassVar[str] = (
        "API models expose no internals; replay the trajectory on a local model "
        "(ReplayAnalyzer) to get white-box evidence."
    )

    def check(self, model: Model) -> None:
        """Raise `CapabilityError` when `model` lacks any capability this analyzer needs."""
        have = frozenset(getattr(model, "capabilities", frozenset()) or frozenset())
        missing = frozenset(self.requires) - have
        if missing:
            hint = self.api_hint if getattr(model, "backend", None) == "api" else ""
            raise CapabilityError(analyzer=type(self).__name__, model=model_id(model), missing=missing, hint=hint)

    def run(self, model: Model, text: str) -> AnalysisResult:
        """Analyse one prompt."""
        raise NotImplementedError(f"{type(self).__name__} does not analyse single prompts.")

    def run_trajectory(
        self,
        model: Model,
        trajectory: Any,
        *,
        tools: Optional[list] = None,
        system: Optional[str] = None,
        images: Optional[dict] = None,
    ) -> AnalysisResult:
        """Analyse a stored trajectory (tools and system prompt as the agent used them; `images`:
        `{step: [image, ...]}` the pictures its conversation showed, for a vision model's passes)."""
        raise NotImplementedError(self._no_trajectories())

    def _no_trajectories(self) -> str:
        """Why `run_trajectory` refuses (an analyzer that does not analyse trajectories)."""
        return f"{type(self).__name__} does not analyse trajectories."

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HookAnalyzer(Analyzer):
    """A worker hook in the analyzer registry: a callable run on each finished case, not on model passes.

    `evalrx.runner.register_hook(name, hook)` registers a subclass holding `hook`; the worker
    calls `run_case(ctx)` with its `CaseContext` and stores the `AnalysisRecord`s it returns.
    """

    hook: ClassVar[Callable[[Any], Any]]

    def run_case(self, ctx: Any) -> Any:
        """Run the hook on one finished case: an iterable of `AnalysisRecord` (or None)."""
        return type(self).hook(ctx)  # a staticmethod: the class gives the plain function

    def _no_trajectories(self) -> str:
        return (
            f"{self.name!r} is a worker hook: it runs on each finished case of a run that lists it, "
            "not on a stored trajectory."
        )


ANALYZERS: "dict[str, Type[Analyzer]]" = {}


def register_analyzer(cls: "Optional[Type[Analyzer]]" = None, *, replace: bool = False) -> Any:
    """Register an analyzer class under its `name` (usable as a plain call or a decorator).

    Args:
        cls: the analyzer class.
        replace: allow overriding a registered name.

    Raises:
        ValueError: the name is taken and `replace` is False.
    """

    def add(klass: "Type[Analyzer]") -> "Type[Analyzer]":
        key = klass.name.strip().lower()
        if key in ANALYZERS and ANALYZERS[key] is not klass and not replace:
            raise ValueError(f"Analyzer {key!r} is already registered; pass replace=True to override it.")
        ANALYZERS[key] = klass
        return klass

    return add if cls is None else add(cls)


def known_analyzers() -> "list[str]":
    """Every registered analysis name (analyzers and worker hooks), sorted."""
    return sorted(ANALYZERS)


def analyzer_class(name: Any) -> "Type[Analyzer]":
    """The class registered under `name` (case and surrounding spaces ignored).

    Raises:
        ValueError: the name is unknown (or not a string); the message lists the known ones.
    """
    cls = ANALYZERS.get(name.strip().lower()) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"Unknown analyzer {name!r}. Known analyzers: {', '.join(known_analyzers())}.")
    return cls


def get_analyzer(name: str, **kwargs: Any) -> Analyzer:
    """Instantiate a registered analyzer by name, forwarding `kwargs` to its constructor.

    Raises:
        ValueError: the name is unknown; the message lists the known ones.
    """
    return analyzer_class(name)(**kwargs)
