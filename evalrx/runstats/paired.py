"""Paired comparison of two runs over the same cases: 2x2 counts, McNemar and a bootstrap interval."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Optional

from evalrx.runstats._order import sorted_ids


@dataclass(frozen=True)
class PairedComparison:
    """A vs B; a case passes at rate 1.0 and fails at 0.0, any rate in between counts as `mixed`."""

    n_paired: int
    only_a: int
    only_b: int
    both_pass: int
    both_fail: int
    regressions: int
    fixes: int
    mixed: int
    mcnemar_p: float
    diff: Optional[float]
    diff_ci_low: Optional[float]
    diff_ci_high: Optional[float]
    cases: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        # Shallow: `asdict` deep-copies every case dict (a second on a 50k-case comparison).
        return {
            f.name: (list(getattr(self, f.name)) if f.name == "cases" else getattr(self, f.name)) for f in fields(self)
        }


def _rate(side: str, cid: Hashable, value: float) -> float:
    v = float(value)
    if not 0.0 <= v <= 1.0:  # also rejects NaN
        raise ValueError(f"{side}[{cid!r}] = {value!r} is not a rate in [0, 1]")
    return v


def bootstrap_mean_ci(values, *, resamples: int = 2000, seed: int = 0, level: float = 0.95):
    """Percentile bootstrap interval of the mean of `values` (one value per case)."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return None, None
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    # Per-case differences take few distinct values: drawing how often each is picked (multinomial) is the
    # same resampling as drawing case indices, at a cost that does not grow with the number of cases.
    distinct, counts = np.unique(x, return_counts=True)
    picks = rng.multinomial(x.size, counts / x.size, size=resamples)
    means = picks @ distinct / x.size
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def compare_outcomes(
    a: Mapping[Hashable, float],
    b: Mapping[Hashable, float],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> PairedComparison:
    """Compare per-case success rates of run A and run B on the cases both ran (B minus A)."""
    from scipy.special import bdtr  # the binomial CDF; scipy.stats (binomtest) takes 0.7 s to import

    common = sorted_ids(set(a) & set(b))
    cases = [{"case_id": cid, "a": _rate("a", cid, a[cid]), "b": _rate("b", cid, b[cid])} for cid in common]

    both_pass = both_fail = regressions = fixes = mixed = 0
    for c in cases:
        ra, rb = c["a"], c["b"]
        if ra not in (0.0, 1.0) or rb not in (0.0, 1.0):
            mixed += 1
        elif ra == rb:
            both_pass += ra == 1.0
            both_fail += ra == 0.0
        elif ra == 1.0:
            regressions += 1
        else:
            fixes += 1

    discordant = regressions + fixes
    # McNemar's exact test: two-sided binomial at p = 0.5 (symmetric, so twice the smaller tail, at most 1).
    p = min(1.0, 2.0 * float(bdtr(min(regressions, fixes), discordant, 0.5))) if discordant else 1.0

    diffs = [c["b"] - c["a"] for c in cases]
    diff = sum(diffs) / len(diffs) if diffs else None
    # Own numpy resampling of the per-case differences (the paired bootstrap): scipy's default BCa
    # breaks down when every difference is equal, which is common for 0/1 outcomes on small runs.
    low, high = bootstrap_mean_ci(diffs, resamples=resamples, seed=seed)

    return PairedComparison(
        n_paired=len(cases),
        only_a=len(set(a) - set(b)),
        only_b=len(set(b) - set(a)),
        both_pass=both_pass,
        both_fail=both_fail,
        regressions=regressions,
        fixes=fixes,
        mixed=mixed,
        mcnemar_p=float(p),
        diff=diff,
        diff_ci_low=low,
        diff_ci_high=high,
        cases=cases,
    )
