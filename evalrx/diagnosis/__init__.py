"""Diagnosis: why a trajectory failed, in the one failure vocabulary (`evalrx.core.failures`).

    from evalrx.diagnosis import diagnose
    ranked = diagnose(trajectory, case=case, tools=tools)   # [Diagnosis, ...], best first

Sources, strongest first: `reference` (the case's reference calls and expected answer, or each user turn's
expected answer; `reference_of(case)` says which a case has),
`heuristic` (model-free rules on the steps; a team's log also gets the team signs of `team`, and every
diagnosis of a team's log names the agent it blames), `whitebox` (stored tool-decision margins and logit lens),
`judge` (a model reading the steps: `evalrx.diagnosis.judge.judge`, asked on demand, never by `diagnose`).
A passing trajectory has no diagnosis; an errored one is `infra_error`, not a model failure.
Imports only `evalrx.core` and `evalrx.grade` (no torch, no store).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from evalrx.core.case import FailureCase, Label, Trajectory
from evalrx.core.failures import SOURCES, Diagnosis
from evalrx.diagnosis.judge import (
    JUDGE_SCHEMA,
    PROMPT_VERSION,
    JudgeResult,
    build_prompt,
    check_verdict,
    parse_verdict,
    verdict_key,
)
from evalrx.diagnosis.judge import (
    STRATEGIES as JUDGE_STRATEGIES,
)
from evalrx.diagnosis.reference import from_reference, reference_calls, reference_of
from evalrx.diagnosis.rules import RULES, from_rules
from evalrx.diagnosis.team import blame, from_team, is_team
from evalrx.diagnosis.whitebox import from_analyses

# Bumped when the rules change, so stored diagnoses can be told apart and recomputed.
# 2: a tool output that is a dict or list is read as JSON (`observation_text`), so the count rules see it.
DIAGNOSIS_VERSION = 2
# A diagnosis this unsure is a fallback ("graded wrong, no step shows why"): any real sign outranks it.
FALLBACK_BELOW = 0.3


def rank(candidates: Iterable[Diagnosis]) -> "list[Diagnosis]":
    """Best first: an infra error; then any real sign before a low-confidence fallback; then by source
    strength, the earliest step and confidence."""

    def key(d: Diagnosis) -> tuple:
        step = d.first_wrong_step if d.first_wrong_step is not None else 1 << 30
        return (d.kind != "infra_error", d.confidence < FALLBACK_BELOW, SOURCES.index(d.source), step, -d.confidence)

    return sorted(candidates, key=key)


def combine(found: Iterable[Diagnosis], kept: Iterable[Diagnosis]) -> "list[Diagnosis]":
    """One trajectory's candidates from sources computed at different times (the rules now, a judge's verdict
    kept), ranked; a "nothing went wrong" verdict (no kind) comes last, so it never hides a kind."""
    both = [*found, *kept]
    return rank(d for d in both if d.kind is not None) + [d for d in both if d.kind is None]


def diagnose(
    trajectory: Trajectory,
    *,
    case: Optional[FailureCase] = None,
    tools: Optional[Sequence[Any]] = None,
    analyses: Optional[dict] = None,
    use_reference: bool = True,
    tool_marks: Optional[dict] = None,
) -> "list[Diagnosis]":
    """Ranked diagnoses of a trajectory ([] for a passing one).

    Args:
        trajectory: the trajectory, graded (its `outcome`).
        case: its case, for the reference source (reference calls, expected answer).
        tools: the Tool objects it had (to judge calls by what they return), or a name -> Tool dict.
        analyses: stored white-box results by analyzer name (`{"meta", "arrays"}`).
        use_reference: False hides the reference (what an imported trajectory gets).
        tool_marks: people's marks of what tools do, name -> "read" / "write" (`evalrx.store.tool_marks`).
    """
    if trajectory.outcome is Label.PASS:
        return []
    found: list = []
    if use_reference and trajectory.outcome is not Label.UNKNOWN:
        by_name = tools if isinstance(tools, dict) else {t.name: t for t in tools or []}
        ref = from_reference(trajectory, case, by_name or None, tool_marks)
        if ref is not None:
            found.append(ref)
    system = (case.meta or {}).get("system") if case is not None else None
    found += from_rules(trajectory, system=system, marks=tool_marks)
    if is_team(trajectory):
        if not trajectory.terminated:  # a team's log that does not say how it ended marks no answer either
            found = [d for d in found if d.kind != "no_final_answer"]
        expected = case.expected if use_reference and case is not None else None
        found += from_team(trajectory, expected)
    if analyses:
        found += from_analyses(analyses, trajectory)
    return [blame(trajectory, d) for d in rank(found)]


__all__ = [
    "DIAGNOSIS_VERSION",
    "JUDGE_SCHEMA",
    "JUDGE_STRATEGIES",
    "JudgeResult",
    "PROMPT_VERSION",
    "build_prompt",
    "check_verdict",
    "combine",
    "parse_verdict",
    "verdict_key",
    "RULES",
    "diagnose",
    "from_analyses",
    "from_reference",
    "from_rules",
    "from_team",
    "blame",
    "rank",
    "reference_calls",
    "reference_of",
]
