"""pass@k, pass^k and flakiness over repeated attempts of the same cases."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from math import comb
from typing import Any, Optional

from evalrx.runstats._order import sorted_ids


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k attempts drawn from n (c passing) passes: 1 - C(n-c,k)/C(n,k)."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)  # comb(m, k) is 0 when m < k, so c > n-k gives 1.0


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Chance that all k attempts drawn from n (c passing) pass: C(c,k)/C(n,k)."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


@dataclass(frozen=True)
class CaseRate:
    sample_id: Hashable  # the case's id (a run's `sample_id`)
    n: int
    passes: int
    rate: float


@dataclass(frozen=True)
class Reliability:
    """Run-level reliability; cases with fewer than k attempts are left out of the k-th means."""

    k_max: int
    pass_at_k: dict[int, float]
    pass_hat_k: dict[int, float]
    case_rates: list[CaseRate]
    flaky_cases: list[Hashable]
    flaky_kinds: dict[Hashable, list[Optional[str]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "k_max": self.k_max,
            "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
            "pass_hat_k": {str(k): v for k, v in self.pass_hat_k.items()},
            "flaky_cases": list(self.flaky_cases),
            "case_rates": [
                {"case_id": r.sample_id, "n": r.n, "passes": r.passes, "rate": r.rate} for r in self.case_rates
            ],
            "flaky_kinds": {str(cid): list(kinds) for cid, kinds in self.flaky_kinds.items()},
        }


def reliability(
    attempts: Mapping[Hashable, Sequence[bool]],
    kinds: Optional[Mapping[Hashable, Sequence[Optional[str]]]] = None,
    *,
    k_max: Optional[int] = None,
) -> Reliability:
    """pass@k / pass^k means for k = 1..k_max (default: fewest attempts of any case), rates and flaky cases.

    `kinds[case_id][i]` is the failure kind of attempt i (None when unknown); cases with no attempts are ignored.
    """
    counted = {cid: [bool(x) for x in runs] for cid, runs in attempts.items() if len(runs) > 0}
    if k_max is None:
        k_max = min((len(r) for r in counted.values()), default=0)
    elif k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")

    at_k: dict[int, float] = {}
    hat_k: dict[int, float] = {}
    for k in range(1, k_max + 1):
        eligible = [(len(r), sum(r)) for r in counted.values() if len(r) >= k]
        if not eligible:
            continue  # no case has k attempts: a mean over nothing would be made up
        at_k[k] = sum(pass_at_k(n, c, k) for n, c in eligible) / len(eligible)
        hat_k[k] = sum(pass_hat_k(n, c, k) for n, c in eligible) / len(eligible)

    rates = [CaseRate(cid, len(r), sum(r), sum(r) / len(r)) for cid, r in counted.items()]
    order = {cid: i for i, cid in enumerate(sorted_ids(counted))}
    rates.sort(key=lambda r: (r.rate, order[r.sample_id]))  # worst cases first

    flaky = sorted_ids(cid for cid, r in counted.items() if any(r) and not all(r))
    flaky_kinds: dict[Hashable, list[Optional[str]]] = {}
    if kinds is not None:
        for cid in flaky:
            case_kinds = kinds.get(cid)
            if case_kinds is None:
                continue
            if len(case_kinds) != len(counted[cid]):
                raise ValueError(f"case {cid!r}: {len(case_kinds)} kinds for {len(counted[cid])} attempts")
            flaky_kinds[cid] = [kd for ok, kd in zip(counted[cid], case_kinds) if not ok]

    return Reliability(k_max, at_k, hat_k, rates, flaky, flaky_kinds)
