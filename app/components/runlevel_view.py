"""Rows for the run-level views: reliability over attempts, two runs compared, what predicts failure,
annotator agreement, and two trajectories aligned step by step. Pure Python over what `evalrx.store`
returns (no Streamlit): the pages draw these rows, the tests check them.

Links are relative page URLs with query parameters (`compare?a=1&b=2&case=q0003`), the same form the
other pages use, so every comparison and case is shareable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import urlencode


def compare_link(a: int, b: int, case: Optional[str] = None, **extra: Any) -> str:
    """The Compare page for runs `a` and `b` (the same run twice compares attempts), opened at `case`."""
    params: dict = {"a": a, "b": b}
    if case is not None:
        params["case"] = case
    params.update({k: v for k, v in extra.items() if v is not None})
    return "compare?" + urlencode(params)


# ------------------------------------------------------------------ reliability


def case_rate_rows(rel: Any) -> list[dict]:
    """One row per case, worst first (the order `run_reliability` gives): success rate, attempts, and the case's
    axis label (`tick`: what tells it from the others, see `case_ticks`)."""
    names = [str(r.sample_id) for r in rel.case_rates]
    ticks = case_ticks(names)
    return [
        {"case": name, "tick": tick, "rate": r.rate, "passes": r.passes, "n": r.n, "order": i}
        for i, (name, tick, r) in enumerate(zip(names, ticks, rel.case_rates))
    ]


TICK_CHARS = 18  # an axis label of a case; the tooltip names it whole


def common_stem(names: "list[str]") -> str:
    """The start every name shares, up to its last separator ("-", "_", "/", ".", ":" or a space): "" for one name."""
    if len(names) < 2:
        return ""
    stem = os.path.commonprefix(names)
    cut = max(stem.rfind(c) for c in "-_/.: ")
    return stem[: cut + 1] if cut >= 0 else ""


def case_ticks(names: "list[str]") -> "list[str]":
    """Short distinct axis labels for case ids: the shared start dropped, a long rest kept at both ends
    (ids that differ only at their end, cut at their end, all read alike)."""
    stem = common_stem(names)
    rest = [n[len(stem) :] or n for n in names]
    half = (TICK_CHARS - 1) // 2
    ticks = [r if len(r) <= TICK_CHARS else f"{r[:half]}…{r[-half:]}" for r in rest]
    return ticks if len(set(ticks)) == len(ticks) else rest  # never two bars under one label


def pass_k_rows(rel: Any) -> list[dict]:
    """pass@k (at least one of k passes) and pass^k (all k pass), long form for one line each."""
    rows = [{"k": int(k), "value": v, "measure": "pass@k"} for k, v in sorted(rel.pass_at_k.items())]
    rows += [{"k": int(k), "value": v, "measure": "pass^k"} for k, v in sorted(rel.pass_hat_k.items())]
    return rows


def flaky_rows(rel: Any, attempts: Mapping, run_id: int) -> list[dict]:
    """The flaky cases (some attempts pass, some fail), each linking to its attempts side by side."""
    rows = []
    for cid in rel.flaky_cases:
        att = attempts.get(cid, [])
        kinds = [k or "undiagnosed" for k in rel.flaky_kinds.get(cid, [])]
        rows.append(
            {
                "open": compare_link(run_id, run_id, str(cid)),
                "case": str(cid),
                "attempts": len(att),
                "passes": sum(o == "pass" for _, o, _, _ in att),
                "failing attempts' kinds": ", ".join(sorted(set(kinds))),
            }
        )
    return rows


# ------------------------------------------------------------------ two runs


def change_of(a: float, b: float) -> str:
    """How a case's success rate moved from A to B, in the comparison's words."""
    if a == b:
        return "same"
    if a == 1.0 and b == 0.0:
        return "regression"
    if a == 0.0 and b == 1.0:
        return "fix"
    return "worse" if b < a else "better"


_CHANGE_ORDER = {"regression": 0, "worse": 1, "fix": 2, "better": 3}


def change_rows(cmp: Mapping, run_a: int, run_b: int) -> list[dict]:
    """Cases whose success rate differs between the runs: regressions first, then worse, fixes, better."""
    rows = []
    for c in cmp["cases"]:
        change = change_of(c["a"], c["b"])
        if change != "same":
            rows.append(
                {
                    "open": compare_link(run_a, run_b, str(c["case_id"])),
                    "case": str(c["case_id"]),
                    "change": change,
                    "A success %": round(100 * c["a"], 1),
                    "B success %": round(100 * c["b"], 1),
                }
            )
    rows.sort(key=lambda r: (_CHANGE_ORDER[r["change"]], r["case"]))
    return rows


def only_cases(attempts_a: Mapping, attempts_b: Mapping) -> tuple[list[str], list[str]]:
    """Case ids graded in A only and in B only (never paired, so never in the counts)."""
    return sorted(map(str, set(attempts_a) - set(attempts_b))), sorted(map(str, set(attempts_b) - set(attempts_a)))


def kind_shift_rows(cmp: Mapping) -> list[dict]:
    """Failed attempts per diagnosed kind in A and B on the paired cases, biggest change first."""
    return [{"kind": k, "A": v["a"], "B": v["b"], "change": v["change"]} for k, v in cmp.get("kind_shift", {}).items()]


def default_attempts(rows_a: list, rows_b: list, *, same_run: bool) -> tuple[Optional[int], Optional[int]]:
    """The attempts to set side by side first: ones whose outcomes differ when there are such.

    Rows are `attempts_of` tuples (attempt, outcome, kind, trajectory id). For one run (attempts of a
    case) A is the first passing attempt and B the first failing one.
    """
    if not rows_a or not rows_b:
        return (rows_a[0][0] if rows_a else None), (rows_b[0][0] if rows_b else None)
    if same_run:
        passing = [r for r in rows_a if r[1] == "pass"]
        failing = [r for r in rows_a if r[1] != "pass"]
        if passing and failing:
            return passing[0][0], failing[0][0]
        return rows_a[0][0], rows_a[min(1, len(rows_a) - 1)][0]
    first_a = rows_a[0]
    other = next((r for r in rows_b if r[1] != first_a[1]), rows_b[0])
    return first_a[0], other[0]


# ------------------------------------------------------------------ predictors

# Where the Trajectories page can list what a signal points at (its filters and sorts, see filters.py).
_SORT_OF_SIGNAL = {"turns": "steps", "tool_calls": "calls", "prompt_tokens": "prompt", "latency_ms": "latency"}


def predictor_link(signal: str, run_id: int, split: Optional[float], auroc: Optional[float]) -> Optional[str]:
    """The filtered trajectory list for a signal: its failure kind, trajectories with a tool margin
    below the split, or the list sorted by the signal; None where the list has no such filter."""
    if signal.startswith("kind="):
        return "trajectories?" + urlencode({"run": run_id, "kind": signal.split("=", 1)[1]})
    if signal == "tool_margin" and split is not None:
        return "trajectories?" + urlencode({"run": run_id, "margin": f"{split:g}"})
    sort = _SORT_OF_SIGNAL.get(signal)
    if sort is not None:
        params = {"run": run_id, "sort": sort}
        if auroc is not None and auroc < 0.5:
            params["asc"] = "true"  # low values go with failure: list the lowest first
        return "trajectories?" + urlencode(params)
    return None


def _pct(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(100 * x, 1)


def predictor_rows(table: list[dict], run_id: int) -> list[dict]:
    """The predictor table (strongest first, as `predictor_table` orders it) with a link per row."""
    rows = []
    for p in table:
        auroc = p["auroc"]
        direction = (
            None if auroc is None or auroc == 0.5 else ("higher → fails more" if auroc > 0.5 else "lower → fails more")
        )
        rows.append(
            {
                "list": predictor_link(p["signal"], run_id, p["split"], auroc),
                "signal": p["signal"],
                "AUROC": None if auroc is None else round(auroc, 3),
                "95% CI": None if p["ci_low"] is None else f"{p['ci_low']:.2f}–{p['ci_high']:.2f}",
                "strength": None if p["strength"] is None else round(p["strength"], 3),
                "direction": direction,
                "split at": p["split"],
                "fail % high": _pct(p["fail_rate_high"]),
                "fail % low": _pct(p["fail_rate_low"]),
                "n": p["n"],
                "failed": p["n_failed"],
                "n minority": p.get("n_minority"),
                "warning": p.get("warning"),
            }
        )
    return rows


# ------------------------------------------------------------------ agreement


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 3)


def pair_rows(agree: Mapping) -> list[dict]:
    """One row per annotator pair: Cohen's kappa on outcome and on kind, first-wrong-step agreement."""
    rows: dict = {}
    for field in ("outcome", "kind"):
        for p in agree[field]["pairs"]:
            row = rows.setdefault((p["a"], p["b"]), {"annotators": f"{p['a']} · {p['b']}"})
            row[f"{field} n"], row[f"{field} κ"] = p["n"], _r(p["kappa"])
    for p in agree["steps"]:
        row = rows.setdefault((p["a"], p["b"]), {"annotators": f"{p['a']} · {p['b']}"})
        row["steps n"], row["step exact"], row["step ±1"] = p["n"], _r(p["exact"]), _r(p["within_one"])
    return [rows[k] for k in sorted(rows)]


def _ci(share: Mapping) -> Optional[str]:
    return None if share["low"] is None else f"{share['low']:.2f}–{share['high']:.2f}"


def auto_rows(agree: Mapping) -> list[dict]:
    """The automatic diagnosis against each annotator on the trajectories they labelled failed; on a run
    whose labels name a team's agent (`agree["teams"]`), beside kind and step: how often it blames the agent
    the annotator named and names their first wrong step (counts of the labels naming an agent, Wilson 95%)."""
    rows = []
    for r in agree["auto"]:
        row = {
            "annotator": r["annotator"],
            "diagnosis": r.get("diagnosis", "top"),
            "n": r["n"],
            "kind κ": _r(r["kind_kappa"]),
            "step exact": _r(r.get("step_exact")),
            "step ±1": _r(r.get("step_within_one")),
        }
        if agree.get("teams"):
            att = r.get("attribution") or {}
            for what, name in (("agent", "same agent"), ("step", "same step")):
                share = att.get(what)
                row[name] = f"{share['k']}/{share['n']}" if share and share["n"] else None
                row[f"{name} %"] = None if not share or share["share"] is None else round(100 * share["share"], 1)
                row[f"{what} 95% CI"] = _ci(share) if share and share["n"] else None
        rows.append(row)
    return rows


def confusion_rows(confusion: Optional[Mapping]) -> list[dict]:
    """A confusion matrix ({labels, matrix}: rows the annotator, columns the diagnosis) in long form."""
    if not confusion:
        return []
    labels = confusion["labels"]
    return [
        {"annotator": str(labels[r]), "diagnosis": str(labels[c]), "n": n}
        for r, row in enumerate(confusion["matrix"])
        for c, n in enumerate(row)
    ]


# ------------------------------------------------------------------ side by side


def _cell(action: Optional[tuple], step: Optional[int]) -> Optional[dict]:
    if action is None:
        return None
    kind, name, args = action
    return {"kind": kind, "name": name, "args": args, "step": step}


def aligned_rows(trajectory_a: Any, trajectory_b: Any) -> dict:
    """Two trajectories' actions aligned (`evalrx.runstats.alignment`): one row per aligned pair with each
    side's action (kind, tool, arguments, step index), the status, the argument keys that differ,
    and which row is the first divergence."""
    from evalrx.runstats import action_steps, actions_of, align

    acts_a, acts_b = actions_of(trajectory_a), actions_of(trajectory_b)
    steps_a, steps_b = action_steps(trajectory_a), action_steps(trajectory_b)
    al = align(acts_a, acts_b)
    rows = []
    for r, (i, j, status) in enumerate(al.rows):
        rows.append(
            {
                "row": r,
                "status": status,
                "first": r == al.first_divergence,
                "a": _cell(acts_a[i], steps_a[i]) if i is not None else None,
                "b": _cell(acts_b[j], steps_b[j]) if j is not None else None,
                "changed": list(al.changed_keys.get(r, [])),
            }
        )
    for side, trajectory in (("a", trajectory_a), ("b", trajectory_b)):
        _add_malformed(rows, side, trajectory)
    return {"rows": rows, "first_divergence": al.first_divergence}


def _add_malformed(rows: list, side: str, trajectory: Any) -> None:
    """Put each malformed model turn of one side (a call that did not parse: no action, so not aligned) in the
    rows where its step falls, so that a first wrong step there is shown too."""
    shown = {row[side]["step"] for row in rows if row[side] is not None}
    for step in trajectory.steps:
        if getattr(step.role, "value", step.role) != "actor" or not step.parse_error or step.idx in shown:
            continue
        cell = {"kind": "malformed", "name": None, "args": step.content, "step": step.idx, "error": step.parse_error}
        later = (  # an answer without a step of its own comes last
            n
            for n, row in enumerate(rows)
            if row[side] is not None and (row[side]["step"] is None or row[side]["step"] > step.idx)
        )
        row = {"row": f"{side}-{step.idx}", "status": "malformed", "first": False, "a": None, "b": None, "changed": []}
        rows.insert(next(later, len(rows)), {**row, side: cell})


def arg_lines(args: Any, changed: list[str]) -> Optional[list[tuple[str, str, bool]]]:
    """(key, value as JSON, changed?) per top-level argument; None when the arguments are not a mapping."""
    if not isinstance(args, Mapping):
        return None
    changed_set = set(changed)
    return [
        (str(k), json.dumps(v, ensure_ascii=False, default=str), str(k) in changed_set)
        for k, v in sorted(args.items(), key=lambda kv: str(kv[0]))
    ]
