"""Trajectory heuristics: failure signs read from the steps alone, no model needed.

Each finding names a tag (what was seen), a proposed failure mode (what a human is
asked to confirm in the label queue), the steps involved and a one-line detail.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

from evalrx.analyzers._base import AnalysisResult, Analyzer, register_analyzer, register_result
from evalrx.core.case import StepRole, Trajectory

__all__ = ["FAILURE_MODES", "Finding", "HeuristicsAnalyzer", "HeuristicsResult", "trajectory_heuristics"]

# tag -> proposed failure mode
FAILURE_MODES = {
    "repeated_call": "repeated_identical_calls",
    "observation_ignored": "ignored_observation",
    "tool_error": "tool_error",
    "unknown_tool": "hallucinated_tool",
    "malformed_call": "malformed_tool_call",
    "no_final_answer": "no_final_answer",
    "out_of_turns": "ran_out_of_turns",
    "run_error": "run_error",
}
TAGS = tuple(FAILURE_MODES)


@dataclass
class Finding:
    """One heuristic finding.

    Attributes:
        tag: what was seen (a key of `FAILURE_MODES`).
        failure_mode: the failure mode proposed for a human to confirm.
        steps: the trajectory steps involved.
        detail: one line for the reviewer.
    """

    tag: str
    failure_mode: str
    steps: list = field(default_factory=list)
    detail: str = ""


def _signature(call: dict) -> "tuple[str, str]":
    from evalrx.analyzers.replay import normalize_call

    c = normalize_call(call)
    return c["name"], json.dumps(c["args"], sort_keys=True, default=str)


def _obs_text(observation: Any) -> str:
    if isinstance(observation, dict) and "text" in observation:
        return str(observation["text"])
    return "" if observation is None else str(observation)


def _is_error(step: Any) -> bool:
    text = _obs_text(step.observation).lstrip()
    return bool(step.span.get("tool_error")) or text.startswith("[tool error")


def _finding(tag: str, steps: list, detail: str) -> Finding:
    return Finding(tag, FAILURE_MODES[tag], sorted(set(steps)), detail)


def trajectory_heuristics(trajectory: Trajectory) -> "list[Finding]":
    """Run every heuristic on `trajectory`.

    Returns:
        Findings, at most one per tag (the steps list every occurrence).
    """
    steps = list(trajectory.steps)
    out: list = []

    # Each model turn's calls, and for each tool step the call it answered.
    actor_calls: "dict[int, list]" = {}
    answered: "dict[int, tuple]" = {}
    last_actor: Optional[int] = None
    for s in steps:
        if s.role is StepRole.ACTOR:
            last_actor = s.idx
            actor_calls[s.idx] = [_signature(c) for c in (s.tool_calls or [])]
        elif s.role is StepRole.TOOL and last_actor is not None and not s.span.get("parse_error"):
            calls = actor_calls.get(last_actor, [])
            i = int(s.span.get("call", 0) or 0)
            if i < len(calls):
                answered[s.idx] = (last_actor, calls[i])

    # Repeated identical calls, anywhere in the run (the loop policy's blocks count too).
    seen: "dict[tuple, list]" = {}
    for idx, sigs in actor_calls.items():
        for sig in sigs:
            seen.setdefault(sig, []).append(idx)
    repeats = {sig: idxs for sig, idxs in seen.items() if len(idxs) > 1}
    blocked = [s.idx for s in steps if s.role is StepRole.TOOL and s.span.get("repeat_blocked")]
    if repeats or blocked:
        involved = [i for idxs in repeats.values() for i in idxs] + blocked
        worst = max(repeats.items(), key=lambda kv: len(kv[1])) if repeats else None
        detail = (
            f"{worst[0][0]}({worst[0][1]}) called {len(worst[1])} times" if worst else "the loop blocked a repeated call"
        )
        if len(repeats) > 1:
            detail += f"; {len(repeats)} distinct calls repeated"
        out.append(_finding("repeated_call", involved, detail))

    # Tool errors, unknown tools, and errors the model answered with the same call.
    errors = [s for s in steps if s.role is StepRole.TOOL and not s.span.get("parse_error") and _is_error(s)]
    unknown = [s for s in errors if "unknown tool" in _obs_text(s.observation)]
    if errors:
        first = _obs_text(errors[0].observation).strip().splitlines()[0][:160]
        out.append(_finding("tool_error", [s.idx for s in errors], f"{len(errors)} tool error(s); first: {first}"))
    if unknown:
        names = sorted({s.content for s in unknown if s.content})
        out.append(_finding("unknown_tool", [s.idx for s in unknown], f"called tools that do not exist: {', '.join(names)}"))

    ignored: list = []
    details: list = []
    actor_order = [s.idx for s in steps if s.role is StepRole.ACTOR]
    for s in errors:
        if s.idx not in answered:
            continue
        turn, sig = answered[s.idx]
        later = [a for a in actor_order if a > turn]
        if later and sig in actor_calls.get(later[0], []):
            ignored.extend([s.idx, later[0]])
            details.append(f"{sig[0]} failed at step {s.idx} and was called again unchanged at step {later[0]}")
    by_idx = {s.idx: s for s in steps}
    for s in steps:
        if s.role is StepRole.TOOL and s.span.get("parse_error"):
            prev = [a for a in actor_order if a < s.idx]
            nxt = [a for a in actor_order if a > s.idx]
            if prev and nxt:
                before, after = by_idx[prev[-1]], by_idx[nxt[0]]
                if after.parse_error and (after.content or "").strip() == (before.content or "").strip():
                    ignored.extend([s.idx, after.idx])
                    details.append(f"the malformed call of step {before.idx} was repeated verbatim at step {after.idx}")
    if ignored:
        out.append(_finding("observation_ignored", ignored, "; ".join(details)))

    malformed = [s for s in steps if s.role is StepRole.ACTOR and s.parse_error]
    if malformed:
        out.append(
            _finding("malformed_call", [s.idx for s in malformed], f"{len(malformed)} malformed call(s); first: {malformed[0].parse_error[:160]}")
        )

    terminated = trajectory.terminated
    answer = trajectory.final_answer
    if terminated == "error":
        out.append(_finding("run_error", [], str(trajectory.metrics.get("error", "the run raised"))[:200]))
    if answer is None or not str(answer).strip():
        last = actor_order[-1:] if actor_order else []
        out.append(_finding("no_final_answer", last, f"the run ended ({terminated or 'unknown'}) without an answer"))
    if terminated in ("max_turns", "forced_final"):
        n = trajectory.metrics.get("n_turns", len(actor_order))
        how = "an answer was forced" if terminated == "forced_final" else "the loop stopped"
        out.append(_finding("out_of_turns", actor_order[-1:], f"used all {n} turns; {how}"))
    return out


@register_result
class HeuristicsResult(AnalysisResult):
    """The findings of `trajectory_heuristics` (arrays: tag code and first step per finding)."""

    result_type = "heuristics"

    def __init__(self, findings: list) -> None:
        self.findings = [f if isinstance(f, Finding) else Finding(**f) for f in findings]

    @property
    def tags(self) -> list:
        """Tags found, in a stable order (what a filter offers)."""
        return [t for t in TAGS if any(f.tag == t for f in self.findings)]

    @property
    def failure_modes(self) -> list:
        """Proposed failure modes, one per finding."""
        return [f.failure_mode for f in self.findings]

    def to_arrays(self) -> dict:
        return {
            "tag": np.array([TAGS.index(f.tag) for f in self.findings], dtype=np.int8),
            "first_step": np.array([f.steps[0] if f.steps else -1 for f in self.findings], dtype=np.int32),
        }

    @property
    def meta(self) -> dict:
        return {
            "result_type": self.result_type,
            "analyzer": HeuristicsAnalyzer.name,
            "tags": list(TAGS),
            "findings": [asdict(f) for f in self.findings],
        }

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "HeuristicsResult":
        return cls(meta.get("findings") or [])


@register_analyzer
class HeuristicsAnalyzer(Analyzer):
    """Failure signs from the trajectory's steps (repeats, ignored errors, malformed calls, ...); no model."""

    name = "heuristics"
    requires = frozenset()

    def run_trajectory(
        self,
        model: Any,
        trajectory: Trajectory,
        *,
        tools: Optional[list] = None,
        system: Optional[str] = None,
    ) -> HeuristicsResult:
        """Findings for `trajectory`; `model`, `tools` and `system` are not needed (pass None)."""
        return HeuristicsResult(trajectory_heuristics(trajectory))
