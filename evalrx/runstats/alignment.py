"""Step alignment of two trajectories' action sequences (LCS on normalised actions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

SAME, CHANGED, INSERTED, DELETED = "same", "changed", "inserted", "deleted"

Row = tuple[Optional[int], Optional[int], str]

_MISSING = object()  # a key absent on one side must differ even from an explicit None


def normalize_args(value: Any) -> Any:
    """Hashable canonical form: keys sorted, strings stripped and case-folded, numbers as floats."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), normalize_args(v)) for k, v in value.items()))
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, bool):
        return ("__bool__", value)  # tagged because True == 1.0 in Python, and a flag is not a count
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return ("__seq__",) + tuple(normalize_args(v) for v in value)  # tagged so [] differs from {}
    return repr(value)


def _action(a: Any) -> tuple[str, Optional[str], Any]:
    kind, name, args = (a["kind"], a.get("name"), a.get("args")) if isinstance(a, Mapping) else a
    if kind not in ("call", "answer"):
        raise ValueError(f"action kind must be 'call' or 'answer', got {kind!r}")
    return kind, name, args


def changed_keys(args_a: Any, args_b: Any) -> list[str]:
    """Top-level argument keys whose normalised values differ (or exist on one side only)."""
    if not (isinstance(args_a, Mapping) and isinstance(args_b, Mapping)):
        return []
    na = {str(k): normalize_args(v) for k, v in args_a.items()}
    nb = {str(k): normalize_args(v) for k, v in args_b.items()}
    return sorted(k for k in na.keys() | nb.keys() if na.get(k, _MISSING) != nb.get(k, _MISSING))


def _lcs_pairs(xa: list, xb: list) -> list[tuple[int, int]]:
    n, m = len(xa), len(xb)
    # dp[i][j] = LCS length of xa[i:] and xb[j:]; suffix form lets the walk below go forwards.
    dp = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            dp[i][j] = dp[i + 1][j + 1] + 1 if xa[i] == xb[j] else max(dp[i + 1][j], dp[i][j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if xa[i] == xb[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif dp[i + 1][j] >= dp[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


@dataclass(frozen=True)
class Alignment:
    """Rows (index in A or None, index in B or None, status), in trajectory order."""

    rows: list[Row]
    first_divergence: Optional[int]
    changed_keys: dict[int, list[str]] = field(default_factory=dict)  # row index -> differing arg keys

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [{"i": i, "j": j, "status": s} for i, j, s in self.rows],
            "first_divergence": self.first_divergence,
            "changed_keys": {str(r): keys for r, keys in self.changed_keys.items()},
        }


def align(actions_a: Sequence[Any], actions_b: Sequence[Any]) -> Alignment:
    """Align A and B; between LCS anchors, actions with the same kind and name pair up as 'changed'."""
    aa = [_action(x) for x in actions_a]
    bb = [_action(x) for x in actions_b]
    keys_a = [(k, n, normalize_args(v)) for k, n, v in aa]
    keys_b = [(k, n, normalize_args(v)) for k, n, v in bb]

    rows: list[Row] = []
    diffs: dict[int, list[str]] = {}

    def gap(i0: int, i1: int, j0: int, j1: int) -> None:
        j = j0
        for i in range(i0, i1):
            # Greedy: the first unused B action with the same kind and name, keeping B's order.
            match = next((t for t in range(j, j1) if aa[i][:2] == bb[t][:2]), None)
            if match is None:
                rows.append((i, None, DELETED))
                continue
            rows.extend((None, t, INSERTED) for t in range(j, match))
            diffs[len(rows)] = changed_keys(aa[i][2], bb[match][2])
            rows.append((i, match, CHANGED))
            j = match + 1
        rows.extend((None, t, INSERTED) for t in range(j, j1))

    pi = pj = 0
    for i, j in _lcs_pairs(keys_a, keys_b):
        gap(pi, i, pj, j)
        rows.append((i, j, SAME))
        pi, pj = i + 1, j + 1
    gap(pi, len(aa), pj, len(bb))

    first = next((r for r, row in enumerate(rows) if row[2] != SAME), None)
    return Alignment(rows, first, diffs)


def _role_of(step: Any) -> str:
    role = getattr(step, "role", "")
    return str(getattr(role, "value", role))


def _walk(trajectory: Any) -> list[tuple[Optional[int], tuple[str, Optional[str], Any]]]:
    """(step index, action) of a stored trajectory: each tool call of a model turn, then the final answer."""
    out: list = []
    answer_step = None
    for s in trajectory.steps:
        if _role_of(s) != "actor":
            continue
        calls = s.tool_calls
        for c in calls:
            out.append((int(s.idx), ("call", c.name or "?", c.args)))
        if not calls and not s.parse_error:
            answer_step = int(s.idx)  # the last model turn without calls gave the answer
    if trajectory.final_answer is not None:
        out.append((answer_step, ("answer", None, trajectory.final_answer)))
    return out


def actions_of(trajectory: Any) -> list[tuple[str, Optional[str], Any]]:
    """The actions `align` compares, from a core `Trajectory`: ("call", tool, args) per tool call of a
    model turn, in order, then ("answer", None, final answer) when there is one. Malformed calls
    (parse errors) are no action: nothing was called."""
    return [a for _, a in _walk(trajectory)]


def action_steps(trajectory: Any) -> list[Optional[int]]:
    """The step index each of `actions_of(trajectory)` comes from (None: an answer with no plain model turn)."""
    return [i for i, _ in _walk(trajectory)]
