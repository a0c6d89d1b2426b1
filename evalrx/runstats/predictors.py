"""Which per-case signals predict failure: AUROC with a bootstrap interval, and a median split."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

_COLLECTIONS = (list, tuple, set, frozenset)
# Upper bound on resample-by-row cells held at once, so big runs do not exhaust memory.
_CHUNK_CELLS = 2_000_000


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


def _auroc(x_fail, x_pass, axis: int = -1):
    from scipy.stats import mannwhitneyu

    # Only U is used; the asymptotic p-value is cheap but warns on all-tied resamples, so it is silenced.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        u = mannwhitneyu(x_fail, x_pass, axis=axis, method="asymptotic").statistic
    return u / (x_fail.shape[-1] * x_pass.shape[-1])


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
    if 0 < n_failed < n and len(np.unique(x)) >= 2:
        x1, x0 = x[y], x[~y]
        auroc = float(_auroc(x1, x0))
        strength = abs(auroc - 0.5)
        rng = np.random.default_rng(seed)
        boot = np.empty(resamples)
        step = max(1, _CHUNK_CELLS // n)
        for start in range(0, resamples, step):
            m = min(step, resamples - start)
            # Resampling within each class (stratified) keeps both classes in every resample.
            boot[start : start + m] = _auroc(
                x1[rng.integers(0, x1.size, size=(m, x1.size))],
                x0[rng.integers(0, x0.size, size=(m, x0.size))],
            )
        lo, hi = (float(q) for q in np.percentile(boot, [2.5, 97.5]))

    return Predictor(
        signal, n, n_failed, auroc, lo, hi, strength, split, n_high or 0, n_low or 0, rate_high, rate_low
    )


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
    for signal in signals:
        pairs = []
        for row in rows:
            outcome = row.get(outcome_key)
            value = signal_value(row, signal)
            if outcome is not None and value is not None:
                pairs.append((value, bool(outcome)))
        out.append(_one(signal, pairs, resamples, seed))
    out.sort(key=lambda p: (p.strength is None, -(p.strength or 0.0), p.signal))
    return out
