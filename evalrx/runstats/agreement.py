"""Inter-annotator agreement: Cohen's and Fleiss' kappa, first-wrong-step agreement, kind confusion, and in a team
of agents, agreement on the agent blamed and the step (counts with Wilson intervals)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from itertools import combinations
from typing import Any, Optional, Union

from evalrx.runstats._order import sorted_ids

Labeling = Union[Mapping[Hashable, Any], Sequence[Any]]


def _paired(a: Labeling, b: Labeling) -> tuple[list, list]:
    """Two mappings pair on their common item ids; two sequences must be the same length."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        common = sorted_ids(set(a) & set(b))
        return [a[k] for k in common], [b[k] for k in common]
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        raise TypeError("pass two mappings (item -> label) or two sequences, not one of each")
    if len(a) != len(b):
        raise ValueError(f"labelings differ in length: {len(a)} vs {len(b)}")
    return list(a), list(b)


def cohen_kappa(a: Labeling, b: Labeling) -> Optional[float]:
    """Cohen's kappa of two labelings of the same items; None when there are no items."""
    import numpy as np
    from statsmodels.stats.inter_rater import cohens_kappa

    xa, xb = _paired(a, b)
    if not xa:
        return None
    cats = sorted_ids(set(xa) | set(xb))
    if len(cats) == 1:
        return 1.0  # expected agreement 1 (kappa is 0/0) happens only here, where observed agreement is 1 too
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cats), len(cats)))
    for x, y in zip(xa, xb):
        table[index[x], index[y]] += 1
    return float(cohens_kappa(table, return_results=False))


def fleiss_kappa(ratings: Sequence[Sequence[Hashable]]) -> Optional[float]:
    """Fleiss' kappa; `ratings[i]` lists item i's labels and every item needs the same number (>= 2)."""
    import numpy as np
    from statsmodels.stats.inter_rater import aggregate_raters
    from statsmodels.stats.inter_rater import fleiss_kappa as _fleiss

    if not ratings:
        return None
    counts = {len(r) for r in ratings}
    if len(counts) != 1 or counts.pop() < 2:
        raise ValueError("every item needs the same number of ratings, at least 2")
    cats = sorted_ids({x for r in ratings for x in r})
    if len(cats) == 1:
        return 1.0  # expected agreement 1 only with a single category, where observed agreement is 1 too
    index = {c: i for i, c in enumerate(cats)}
    codes = np.array([[index[x] for x in r] for r in ratings])
    table, _ = aggregate_raters(codes, n_cat=len(cats))
    return float(_fleiss(table, method="fleiss"))


def step_agreement(a: Labeling, b: Labeling) -> dict[str, Any]:
    """Agreement on first-wrong-step indices; None ('no wrong step') agrees only with None."""
    xa, xb = _paired(a, b)
    exact = sum(x == y for x, y in zip(xa, xb))
    within = sum(x == y or (x is not None and y is not None and abs(x - y) <= 1) for x, y in zip(xa, xb))
    n = len(xa)
    return {"n": n, "exact": exact / n if n else None, "within_one": within / n if n else None}


def wilson_share(k: int, n: int, *, confidence: float = 0.95) -> dict[str, Any]:
    """k agreements out of n as a share with its Wilson score interval (scipy's `binomtest`); share and
    interval None when n is 0."""
    if n == 0:
        return {"k": 0, "n": 0, "share": None, "low": None, "high": None}
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return {"k": k, "n": n, "share": k / n, "low": float(ci.low), "high": float(ci.high)}


def attribution_agreement(truth: Labeling, guess: Labeling) -> dict[str, Any]:
    """How often `guess` names the same agent and the same first wrong step as `truth`, each item an
    (agent, step) pair (a team's failure as the Who&When paper scores it): {"n", "agent", "step"}, the last
    two `wilson_share`'s counts, share and 95% interval. The agent is scored on the items whose truth names
    one, the step on those whose truth gives one; a guess that names none never agrees."""
    xa, xb = _paired(truth, guess)
    scored = {}
    for i, what in enumerate(("agent", "step")):
        pairs = [(t[i], g[i]) for t, g in zip(xa, xb) if t[i] is not None]
        scored[what] = wilson_share(sum(t == g for t, g in pairs), len(pairs))
    return {"n": len(xa), **scored}


def kind_confusion(a: Labeling, b: Labeling) -> dict[str, Any]:
    """Confusion matrix of two labelings: matrix[r][c] counts items labelled labels[r] by A, labels[c] by B."""
    xa, xb = _paired(a, b)
    labels = sorted_ids(set(xa) | set(xb))
    index = {c: i for i, c in enumerate(labels)}
    cells = Counter((index[x], index[y]) for x, y in zip(xa, xb))
    matrix = [[cells[(r, c)] for c in range(len(labels))] for r in range(len(labels))]
    return {"labels": labels, "matrix": matrix}


def agreement(labels: Mapping[Hashable, Mapping[str, Any]]) -> dict[str, Any]:
    """Pairwise Cohen's kappa and, with 3+ annotators, Fleiss' kappa; None values count as unlabelled.

    Fleiss uses the items carrying the most common number of ratings (ties: the larger number).
    """
    given = {item: {ann: v for ann, v in by.items() if v is not None} for item, by in labels.items()}
    annotators = sorted_ids({ann for by in given.values() for ann in by})

    pairs = []
    for x, y in combinations(annotators, 2):
        both = [by for by in given.values() if x in by and y in by]
        pairs.append(
            {"a": x, "b": y, "n": len(both), "kappa": cohen_kappa([by[x] for by in both], [by[y] for by in both])}
        )

    fleiss = None
    if len(annotators) >= 3:
        sizes = Counter(len(by) for by in given.values() if len(by) >= 2)
        if sizes:
            m = max(sizes, key=lambda s: (sizes[s], s))
            ratings = [list(by.values()) for by in given.values() if len(by) == m]
            fleiss = {"n": len(ratings), "raters": m, "kappa": fleiss_kappa(ratings)}
    return {"pairs": pairs, "fleiss": fleiss}
