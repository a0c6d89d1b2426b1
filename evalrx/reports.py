"""Run-level reports: the store's rows (`evalrx.store`) through the statistics of `evalrx.runstats`.

How reliable each case is over its attempts, what changed between two runs, which stored signals go
with failure, and how far annotators (and the automatic diagnosis) agree.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional, Sequence

from evalrx import store as S
from evalrx.store import Store


def run_reliability(run_id: int, *, store: "Store | str | None" = None) -> Any:
    """pass@k, pass^k, each case's success rate and the flaky cases of a run (`runstats.Reliability`)."""
    from evalrx.runstats import reliability

    attempts = S.attempts_of(run_id, store=store)
    passed = {cid: [o == "pass" for _, o, _, _ in rows] for cid, rows in attempts.items()}
    kinds = {cid: [k if o == "fail" else None for _, o, k, _ in rows] for cid, rows in attempts.items()}
    return reliability(passed, kinds)


def compare_runs(
    run_a: int, run_b: int, *, resamples: int = 2000, seed: int = 0, store: "Store | str | None" = None
) -> dict:
    """Two runs paired case by case (B minus A): the counts, McNemar's p, the bootstrap interval of the
    success-rate difference, cases found in one run only, and how failure kinds shifted.

    With repeats a case's value is its success rate over its graded attempts.
    """
    att_a, att_b = S.attempts_of_runs([run_a, run_b], store=store)
    return dict(compare_attempts(att_a, att_b, resamples=resamples, seed=seed), run_a=run_a, run_b=run_b)


def compare_attempts(att_a: dict, att_b: dict, *, resamples: int = 2000, seed: int = 0) -> dict:
    """`compare_runs` from two runs' `evalrx.store.attempts_of` (a page that already holds them reads nothing again)."""
    from evalrx.runstats import compare_outcomes

    def rates(att: dict) -> dict:
        return {cid: sum(o == "pass" for _, o, _, _ in rows) / len(rows) for cid, rows in att.items()}

    out = compare_outcomes(rates(att_a), rates(att_b), resamples=resamples, seed=seed).to_dict()
    paired = set(att_a) & set(att_b)
    shift: dict = defaultdict(lambda: {"a": 0, "b": 0})
    for side, att in (("a", att_a), ("b", att_b)):
        for cid in paired:
            for _, o, kind, _ in att[cid]:
                if o == "fail":
                    shift[kind or "undiagnosed"][side] += 1
    out["kind_shift"] = {
        k: dict(v, change=v["b"] - v["a"])
        for k, v in sorted(shift.items(), key=lambda kv: -abs(kv[1]["b"] - kv[1]["a"]))
    }
    return out


# Fewer passed (or failed) trajectories than this and a signal's AUROC and interval say little: one pass in
# twenty gives 1.00 (1.00-1.00) to any signal that happens to be lowest there.
MIN_CLASS = 10


def predictor_table(
    run_ids: Sequence[int], *, resamples: int = 1000, seed: int = 0, store: "Store | str | None" = None
) -> list[dict]:
    """For each stored signal: AUROC for failure with a bootstrap interval and the failure rate when
    high vs low, strongest first (`runstats.predictors` over `predictor_rows`).

    Each row also carries `n_minority` (the smaller of its passed and failed counts) and `warning`, a
    sentence when that class has fewer than `MIN_CLASS` members (None otherwise).
    """
    from evalrx.runstats import predictors

    rows = S.predictor_rows(run_ids, store=store)
    names = sorted({k for r in rows for k in r} - {"trajectory_id", "failed"})
    table = [p.to_dict() for p in predictors(rows, outcome_key="failed", signals=names, resamples=resamples, seed=seed)]
    for p in table:
        p["n_minority"], p["warning"] = _small_class(p["n"], p["n_failed"])
    return table


def _small_class(n: int, n_failed: int) -> "tuple[int, Optional[str]]":
    n_passed = n - n_failed
    smaller, which = (n_passed, "passed") if n_passed <= n_failed else (n_failed, "failed")
    if smaller >= MIN_CLASS or n == 0:
        return smaller, None
    return smaller, f"only {smaller} {which} of {n}: too few (under {MIN_CLASS}) for the AUROC to mean much"


def _automatic(annotator: str) -> bool:
    return annotator == S.AUTO or annotator.startswith(S.AUTO + ":")


def source_agreement(run_ids: Sequence[int], *, store: "Store | str | None" = None) -> dict:
    """Each diagnosis source's measured agreement with people over these runs' failures that people labelled:
    {source: {"n", "kind_agreement", "step_exact"}} (pooled over annotators), for the Why-it-failed card."""
    pooled: dict = {}
    for run_id in run_ids:
        for r in label_agreement(run_id=run_id, store=store)["auto"]:
            if r["diagnosis"] == "top" or not r["n"]:
                continue
            acc = pooled.setdefault(r["diagnosis"], {"n": 0, "kind": 0.0, "step": 0.0})
            acc["n"] += r["n"]
            acc["kind"] += (r["kind_agreement"] or 0.0) * r["n"]
            acc["step"] += (r.get("step_exact") or 0.0) * r["n"]
    return {
        src: {"n": a["n"], "kind_agreement": round(a["kind"] / a["n"], 3), "step_exact": round(a["step"] / a["n"], 3)}
        for src, a in pooled.items()
    }


def _attribution(annotator: str, machine: str, both: dict) -> "Optional[dict]":
    """The diagnosis (`machine`) against an annotator on the agent and the step, over the failures they labelled
    naming an agent (None when they named none)."""
    from evalrx.runstats import attribution_agreement

    named = {tid: v for tid, v in both.items() if v[annotator][3] is not None}
    if not named:
        return None
    return attribution_agreement(
        {tid: (v[annotator][3], v[annotator][2]) for tid, v in named.items()},
        {tid: (v[machine][3], v[machine][2]) for tid, v in named.items()},
    )


def label_agreement(
    trajectory_ids: Optional[Sequence[int]] = None, *, run_id: Optional[int] = None, store: "Store | str | None" = None
) -> dict:
    """Agreement among annotators (Cohen's kappa per pair, Fleiss' kappa for three or more) on outcome and
    on failure kind, agreement on the first wrong step (exact, within one), and the automatic diagnosis
    against each annotator (kind kappa, step agreement, confusion matrix of kinds).

    Where people's labels name the agent of a team they blame (`teams` True), each of the diagnosis's rows
    also carries `attribution` (`runstats.attribution_agreement` on the labels that name an agent: the same
    agent, the same first wrong step, each with its count and Wilson 95% interval); None elsewhere."""
    from evalrx.runstats import agreement, cohen_kappa, kind_confusion, step_agreement

    labels = S.annotator_labels(trajectory_ids, run_id=run_id, agents=True, store=store)
    raters = {a for v in labels.values() for a in v}
    humans = sorted(a for a in raters - {S.ADJUDICATOR} if not _automatic(a))
    automatic = [S.AUTO] + sorted(a for a in raters if _automatic(a) and a != S.AUTO)

    def field(i: int, who: Sequence[str]) -> dict:
        return {tid: {a: v[a][i] for a in who if a in v and v[a][i] is not None} for tid, v in labels.items()}

    out: dict = {"annotators": humans, "n_items": len(labels)}
    out["teams"] = any(v[a][3] is not None for v in labels.values() for a in humans if a in v)
    out["outcome"] = agreement({k: v for k, v in field(0, humans).items() if len(v) >= 2})
    out["kind"] = agreement({k: v for k, v in field(1, humans).items() if len(v) >= 2})
    steps = []
    for i, a in enumerate(humans):
        for b in humans[i + 1 :]:
            both = {tid: v for tid, v in labels.items() if a in v and b in v}
            steps.append(
                {
                    "a": a,
                    "b": b,
                    **step_agreement({k: v[a][2] for k, v in both.items()}, {k: v[b][2] for k, v in both.items()}),
                }
            )
    out["steps"] = steps
    auto = []
    for machine in automatic:  # the top diagnosis first, then each source's best candidate
        for a in humans:
            both = {tid: v for tid, v in labels.items() if a in v and machine in v and v[a][0] == "fail"}
            if machine != S.AUTO and not both:
                continue
            ka = {k: v[a][1] or "none" for k, v in both.items()}
            kb = {k: v[machine][1] or "none" for k, v in both.items()}
            auto.append(
                {
                    "annotator": a,
                    "diagnosis": "top" if machine == S.AUTO else machine.split(":", 1)[1],
                    "n": len(both),
                    "kind_kappa": cohen_kappa(ka, kb) if both else None,
                    "kind_agreement": round(sum(ka[k] == kb[k] for k in ka) / len(ka), 4) if both else None,
                    **{
                        f"step_{k}": v
                        for k, v in step_agreement(
                            {k: v[a][2] for k, v in both.items()}, {k: v[machine][2] for k, v in both.items()}
                        ).items()
                        if k != "n"
                    },
                    "confusion": kind_confusion(ka, kb) if both else None,
                    "attribution": _attribution(a, machine, both) if out["teams"] else None,
                }
            )
    out["auto"] = auto
    return out
