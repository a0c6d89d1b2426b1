"""The runner's diagnosis glue: the diagnoses of a case the worker just finished (`diagnose_case`),
and recomputing stored ones (after an analysis adds white-box evidence, or for trajectories stored
before diagnoses existed): `evalrx diagnose` and the Trajectory page's "Diagnose again"."""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from evalrx.core.case import FailureCase, Trajectory
from evalrx.store import Store, get_trajectory, load_analyses, resolve, run_config, tool_marks, update_diagnoses
from evalrx.store import trajectory_ids as all_trajectory_ids

log = logging.getLogger("evalrx.worker")  # diagnose_case runs in the worker, and logs to its log
JUDGE = "judge"  # the source a judge model's verdicts are stored as


def stored_case(c: dict) -> FailureCase:
    """A stored case (`TrajectoryDetail.case`) as the diagnosis reads it: prompt, id, expected, grader, meta."""
    return FailureCase.from_dict(c)


def rediagnose(
    trajectory_ids: Optional[Sequence[int]] = None,
    *,
    run_id: Optional[int] = None,
    store: "Store | str | None" = None,
) -> int:
    """Diagnose stored trajectories again and replace the computed sources' candidates (a judge's are kept);
    returns how many were written.

    Args:
        trajectory_ids: these trajectories; None: every trajectory of `run_id` (or of the store).
        run_id: limit to one run.
        store: the store (default when None).
    """
    from evalrx.diagnosis import DIAGNOSIS_VERSION, combine, diagnose
    from evalrx.suites import case_tools
    from evalrx.tools import TOOLS, get_tools

    st = resolve(store)
    if trajectory_ids is None:
        trajectory_ids = all_trajectory_ids(run_id, store=st)
    configs: dict = {}
    marks = tool_marks(store=st)
    n = 0
    for tid in trajectory_ids:
        detail = get_trajectory(tid, store=st)
        if detail is None:
            continue
        rid = detail.row.run_id
        if rid not in configs:
            configs[rid] = run_config(rid, store=st)
        names = [n_ for n_ in configs[rid].get("tools") or [] if n_ in TOOLS]
        case = stored_case(detail.case)
        analyses: dict = {}
        for rec in load_analyses(tid, store=st):  # oldest first: the newest result per analyzer wins
            analyses[rec["analyzer"]] = rec
        tools = (get_tools(names, case) if names else []) + case_tools(case)
        found = diagnose(detail.trajectory, case=case, tools=tools or None, analyses=analyses, tool_marks=marks)

        def keep_judged(stored: list, found: list = found) -> list:
            # Only the computed sources are replaced: a judge's verdict stays until the judge runs again.
            return combine(found, [d for d in stored if d.source == JUDGE])

        update_diagnoses(tid, keep_judged, version=DIAGNOSIS_VERSION, store=st)
        n += 1
    return n


def diagnose_case(
    traj: Trajectory,
    case: Optional[FailureCase],
    tools: Sequence[Any],
    records: Sequence[Any],
    marks: Optional[dict] = None,
) -> list:
    """The ranked diagnoses of a finished case: its reference, the model-free rules, and its white-box results
    (`marks`: people's marks of what tools do, `evalrx.store.tool_marks`)."""
    from evalrx.diagnosis import diagnose

    analyses = {r.analyzer: {"meta": r.meta or {}, "arrays": r.arrays or {}} for r in records}
    try:
        return diagnose(traj, case=case, tools=tools, analyses=analyses, tool_marks=marks)
    except Exception as exc:  # a diagnosis bug must not lose the trajectory
        log.warning("diagnosis of case %s failed: %s", traj.sample_id, exc)
        return []


__all__ = ["JUDGE", "diagnose_case", "rediagnose", "stored_case"]
