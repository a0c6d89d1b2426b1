"""The rows run-level questions are answered from: each case's attempts, the signals stored beside each
outcome, each annotator's latest word, and the lists built on them (disagreements, second opinions).

The numbers come from `evalrx.reports` (over `evalrx.runstats`); this module only reads the rows they
need, in few queries, so a 50k-trajectory run is answered in about a second. A case is known by its `sample_id` (the
case id); only graded attempts (pass or fail) count: errors are the harness's, not the model's.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional, Sequence

from sqlalchemy import and_, select

from evalrx.core.case import Label
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve

GRADED = (Label.PASS.value, Label.FAIL.value)
# Stored numbers a predictor row carries, by the name the table shows (columns of `trajectories`).
COLUMN_SIGNALS = {
    "turns": "n_turns",
    "tool_calls": "n_tool_calls",
    "parse_errors": "n_parse_errors",
    "prompt_tokens": "prompt_tokens",
    "latency_ms": "latency_ms",
}
AUTO = "auto"  # the automatic diagnosis, compared with the annotators as if it were one
ADJUDICATOR = "adjudicator"  # who an adjudicated label is saved as: a verdict on a disagreement, not a rater


def _attempts(session: Any, run_id: int) -> dict:
    """{case id: [(attempt, outcome, failure kind, trajectory id)]} of a run's graded attempts."""
    T = t.Trajectory
    out: dict = defaultdict(list)
    rows = session.execute(
        select(T.sample_id, T.attempt, T.outcome, T.diagnosis_kind, T.id).where(
            T.run_id == run_id, T.outcome.in_(GRADED)
        )
    )
    for sample_id, attempt, outcome, kind, tid in rows:
        out[sample_id].append((attempt, outcome, kind, tid))
    return out


def _check_run(session: Any, run_id: int) -> t.Run:
    run = session.get(t.Run, run_id)
    if run is None:
        raise ValueError(f"no run with id {run_id}")
    return run


def attempts_of(run_id: int, *, store: "Store | str | None" = None) -> dict:
    """{case id: [(attempt, outcome, failure kind, trajectory id)], sorted by attempt} of a run."""
    with resolve(store).read() as s:
        _check_run(s, run_id)
        return {k: sorted(v) for k, v in _attempts(s, run_id).items()}


def attempts_of_runs(run_ids: Sequence[int], *, store: "Store | str | None" = None) -> list[dict]:
    """`attempts_of` of several runs, read in one transaction and in the store's order within a case (what a
    comparison needs: one consistent snapshot, no sorting of 50k lists it does not look at in order)."""
    with resolve(store).read() as s:
        for run_id in run_ids:
            _check_run(s, run_id)
        return [dict(_attempts(s, run_id)) for run_id in run_ids]


def trajectories_of_case(run_id: int, sample_id: str, *, store: "Store | str | None" = None) -> list[int]:
    """Trajectory ids of one case (its `sample_id`) in a run, by attempt (any outcome)."""
    T = t.Trajectory
    with resolve(store).read() as s:
        return list(
            s.execute(select(T.id).where(T.run_id == run_id, T.sample_id == sample_id).order_by(T.attempt)).scalars()
        )


def other_runs_of_case(trajectory_id: int, *, limit: int = 20, store: "Store | str | None" = None) -> list[dict]:
    """The same case (by case id) in other runs: [{run_id, run_name, trajectory_id, attempt, outcome}]."""
    T = t.Trajectory
    with resolve(store).read() as s:
        me = s.get(T, trajectory_id)
        if me is None:
            raise ValueError(f"no trajectory with id {trajectory_id}")
        rows = s.execute(
            select(T.run_id, t.Run.name, T.id, T.attempt, T.outcome)
            .join(t.Run, t.Run.id == T.run_id)
            .where(T.sample_id == me.sample_id, T.id != me.id)
            .order_by(T.run_id.desc(), T.attempt)
            .limit(limit)
        ).all()
    return [{"run_id": r[0], "run_name": r[1], "trajectory_id": r[2], "attempt": r[3], "outcome": r[4]} for r in rows]


def predictor_rows(run_ids: Sequence[int], *, store: "Store | str | None" = None) -> list[dict]:
    """One row per graded trajectory of the runs: `failed` and the stored numbers (columns, indexed
    analysis scores). No diagnosed kind: the diagnosis runs on failures only, so a kind would
    "predict" failure by construction."""
    T = t.Trajectory
    cols = [getattr(T, c) for c in COLUMN_SIGNALS.values()]
    with resolve(store).read() as s:
        for rid in run_ids:
            _check_run(s, rid)
        where = and_(T.run_id.in_(list(run_ids)), T.outcome.in_(GRADED))
        rows = {
            r[0]: {
                "trajectory_id": r[0],
                "failed": r[1] == "fail",
                **{name: r[2 + i] for i, name in enumerate(COLUMN_SIGNALS)},
            }
            for r in s.execute(select(T.id, T.outcome, *cols).where(where))
        }
        for tid, name, value in s.execute(
            select(t.TrajectoryScore.trajectory_id, t.TrajectoryScore.name, t.TrajectoryScore.value)
            .join(T, T.id == t.TrajectoryScore.trajectory_id)
            .where(where)
        ):
            rows[tid][name] = value
    return list(rows.values())


def annotator_labels(
    trajectory_ids: Optional[Sequence[int]] = None,
    *,
    run_id: Optional[int] = None,
    agents: bool = False,
    store: "Store | str | None" = None,
) -> dict:
    """{trajectory id: {annotator: (outcome, kind, first wrong step)}}: each annotator's latest word on a
    whole trajectory (superseded labels count: the history keeps who said what), plus the automatic
    diagnosis as annotator `auto` (kind and step) where a trajectory has one, and each source's best
    candidate as `auto:<source>` (`auto:reference`, `auto:heuristic`, `auto:judge`, ...). With `agents`
    each word ends with the team's agent it blames too: (outcome, kind, first wrong step, agent)."""
    L, T, D = t.LabelRow, t.Trajectory, t.DiagnosisRow
    with resolve(store).read() as s:
        q = (
            select(L.trajectory_id, L.annotator, L.outcome, L.failure_kind, L.first_wrong_step, L.agent)
            .where(L.step_idx.is_(None))
            .order_by(L.created_at, L.id)
        )
        # Only labelled trajectories' diagnoses are compared: the rest of a large run is never read.
        labelled_ids = select(L.trajectory_id).where(L.step_idx.is_(None))
        dq = (
            select(D.trajectory_id, D.kind, D.first_wrong_step, D.agent, D.source, D.rank)
            .where(D.trajectory_id.in_(labelled_ids))
            .order_by(D.rank)
        )
        if run_id is not None:
            q = q.join(T, T.id == L.trajectory_id).where(T.run_id == run_id)
            dq = dq.join(T, T.id == D.trajectory_id).where(T.run_id == run_id)
        if trajectory_ids is not None:
            q = q.where(L.trajectory_id.in_(list(trajectory_ids)))
            dq = dq.where(D.trajectory_id.in_(list(trajectory_ids)))
        out: dict = defaultdict(dict)
        for tid, who, outcome, kind, step, agent in s.execute(q):
            # later rows overwrite: the latest word
            out[tid][who or "anonymous"] = (outcome, kind, step, agent) if agents else (outcome, kind, step)
        labelled = set(out)
        for tid, kind, step, agent, source, rank in s.execute(dq):
            if tid not in labelled:
                continue
            word = (None, kind, step, agent) if agents else (None, kind, step)
            if rank == 0:
                out[tid][AUTO] = word
            out[tid].setdefault(f"{AUTO}:{source}", word)  # each source's best, by rank
    return dict(out)


def is_automatic(annotator: str) -> bool:
    """The automatic diagnosis (`auto`) or one of its sources (`auto:reference`, `auto:judge`, ...): not a person."""
    return annotator == AUTO or annotator.startswith(AUTO + ":")


def disagreements(run_id: int, *, store: "Store | str | None" = None) -> list[dict]:
    """Trajectories whose annotators' latest words differ on outcome or kind and that no adjudicator has
    resolved yet (the adjudication list)."""
    out = []
    for tid, words in sorted(annotator_labels(run_id=run_id, store=store).items()):
        if ADJUDICATOR in words:
            continue  # already resolved
        human = {a: v for a, v in words.items() if not is_automatic(a)}
        if len(human) >= 2 and len({(v[0], v[1]) for v in human.values()}) > 1:
            out.append(
                {
                    "trajectory_id": tid,
                    "labels": {
                        a: {"outcome": v[0], "kind": v[1], "first_wrong_step": v[2]} for a, v in sorted(human.items())
                    },
                }
            )
    return out


def second_opinion_queue(
    run_id: int, annotator: str, *, fraction: float = 0.2, seed: int = 0, store: "Store | str | None" = None
) -> list[int]:
    """A fixed random sample (`fraction`) of a run's failures labelled by someone else and not yet by
    `annotator`: what the label queue's second-opinion mode routes to them, blind to the first label."""
    import random

    words = annotator_labels(run_id=run_id, store=store)
    failed = sorted(
        tid
        for tid, v in words.items()
        if any(w[0] == "fail" for a, w in v.items() if a != ADJUDICATOR and not is_automatic(a))
    )
    rng = random.Random(f"{seed}:{run_id}")  # the same sample for everyone, whoever asks first
    sample = sorted(rng.sample(failed, max(1, round(len(failed) * fraction)))) if failed else []
    return [tid for tid in sample if annotator not in words[tid]]
