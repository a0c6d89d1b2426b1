"""Which per-case signals predict failure: AUROC with a bootstrap interval, and a median split."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

_COLLECTIONS = (list, tuple, set, frozenset)
# Above this many distinct values the bootstrap resamples counts per quantile bin (the point estimate stays exact).
_BOOT_BINS = 2048


@dataclass(frozen=True)
class Predictor:
    """One signal against the outcome; high = above the median, or at it when nothing is above it."""

    signal: str
    n: int
    n_failed: int
    auroc: Optional[float]  # P(signal of a failed case > a passed case's), ties count 1/2
    ci_low: Optional[float]
    ci_high: Optional[float]
    strength: Optional[float]  # |auroc - 0.5|
    split: Optional[float]  # the median
    n_high: int
    n_low: int
    fail_rate_high: Optional[float]
    fail_rate_low: Optional[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(signal: str, v: Any) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, (bool, int, float)):
        f = float(v)
        return None if math.isnan(f) else f
    raise TypeError(f"signal {signal!r} has non-numeric value {v!r}; use '{signal}=<value>' for categories")


def signal_value(row: Mapping[str, Any], signal: str) -> Optional[float]:
    """Numeric value of `signal` in `row`; 'key=value' gives 1.0/0.0 for a category (or membership in a list)."""
    if signal in row or "=" not in signal:
        return _number(signal, row.get(signal))
    key, want = signal.split("=", 1)
    v = row.get(key)
    if v is None:
        return None
    if isinstance(v, _COLLECTIONS):
        return float(want in {str(x) for x in v})
    return float(str(v) == want)


def _infer_signals(rows: Sequence[Mapping[str, Any]], outcome_key: str) -> list[str]:
    seen: dict[str, bool] = {}
    for row in rows:
        for k, v in row.items():
            if k == outcome_key or v is None:
                continue
            ok = isinstance(v, (bool, int, float))
            seen[k] = seen.get(k, True) and ok
    return [k for k, ok in seen.items() if ok]


def _auroc_counts(fail, passed):
    """AUROC from counts per distinct value in ascending order (rows: resamples): P(failed > passed) + ties / 2."""
    import numpy as np

    below = np.cumsum(passed, axis=-1) - passed
    return (fail * (below + 0.5 * passed)).sum(axis=-1) / (fail.sum(axis=-1) * passed.sum(axis=-1))


def _one(signal: str, pairs: list[tuple[float, bool]], resamples: int, seed: int) -> Predictor:
    import numpy as np

    x = np.array([v for v, _ in pairs], dtype=float)
    y = np.array([f for _, f in pairs], dtype=bool)
    n, n_failed = len(pairs), int(y.sum())

    split = n_high = n_low = rate_high = rate_low = None
    if n:
        split = float(np.median(x))
        high = x > split
        if not high.any():
            high = x >= split  # the median is the maximum (e.g. a mostly-true flag): ties go high
        n_high, n_low = int(high.sum()), int((~high).sum())
        rate_high = float(y[high].mean()) if n_high else None
        rate_low = float(y[~high].mean()) if n_low else None

    auroc = lo = hi = strength = None
    values, group = np.unique(x, return_inverse=True)
    if 0 < n_failed < n and len(values) >= 2:
        fail = np.bincount(group[y], minlength=len(values)).astype(float)
        passed = np.bincount(group[~y], minlength=len(values)).astype(float)
        auroc = float(_auroc_counts(fail, passed))  # the Mann-Whitney U / (n1 n0), from one sort
        strength = abs(auroc - 0.5)
        if len(values) > _BOOT_BINS:  # the interval's resamples count per quantile bin of the values
            edges = np.unique(np.quantile(x, np.linspace(0, 1, _BOOT_BINS + 1)[1:-1]))
            binned = np.searchsorted(edges, x, side="right")
            fail = np.bincount(binned[y], minlength=len(edges) + 1).astype(float)
            passed = np.bincount(binned[~y], minlength=len(edges) + 1).astype(float)
        rng = np.random.default_rng(seed)
        # Resampling cases within each class (stratified) is drawing each class's counts per value from a
        # multinomial: the same bootstrap at a cost that does not grow with the number of cases.
        boot = _auroc_counts(
            rng.multinomial(int(fail.sum()), fail / fail.sum(), size=resamples),
            rng.multinomial(int(passed.sum()), passed / passed.sum(), size=resamples),
        )
        lo, hi = (float(q) for q in np.percentile(boot, [2.5, 97.5]))

    return Predictor(signal, n, n_failed, auroc, lo, hi, strength, split, n_high or 0, n_low or 0, rate_high, rate_low)


def predictors(
    rows: Sequence[Mapping[str, Any]],
    outcome_key: str = "failed",
    signals: Optional[Sequence[str]] = None,
    resamples: int = 1000,
    seed: int = 0,
) -> list[Predictor]:
    """Rank signals by |AUROC - 0.5| for predicting `outcome_key`; AUROC None (one class, or < 2 values) sorts last.

    `signals` defaults to every numeric or boolean key; rows whose outcome or signal is None are skipped.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if signals is None:
        signals = _infer_signals(rows, outcome_key)
    out = []
    outcomes = [row.get(outcome_key) for row in rows]
    plain = (int, float, bool)
    for signal in signals:
        pairs = []
        for row, outcome in zip(rows, outcomes):
            if outcome is None:
                continue
            v: Any = row.get(signal)
            # Plain numbers are read inline (a function call per row and signal is most of the time on 100k rows).
            value = (None if v != v else float(v)) if type(v) in plain else signal_value(row, signal)
            if value is not None:
                pairs.append((value, bool(outcome)))
        out.append(_one(signal, pairs, resamples, seed))
    out.sort(key=lambda p: (p.strength is None, -(p.strength or 0.0), p.signal))
    return out
