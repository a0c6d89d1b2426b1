"""The white-box source: a step where the model's own decision was weak or reversed by the last layer.

Reads stored tool-decision results (`meta["decisions"]`, `arrays["margin"]` [decisions, layers]:
the chosen candidate's log-prob minus the best alternative's, per lens layer). A decision whose
margin was clearly positive at a middle layer and collapsed by the last, or that the last layer
barely preferred, is proposed as the first wrong step.
"""

from __future__ import annotations

from typing import Any, Optional

from evalrx.core.failures import Diagnosis

# Nats. A lead of 1 nat is ~2.7x the alternative's probability; under 0.1 the model was nearly undecided.
LED_MIDWAY = 1.0
UNDECIDED = 0.1
CONFIDENCE = 0.4


def from_analyses(analyses: "dict[str, dict]") -> "list[Diagnosis]":
    """Diagnoses from white-box results, by analyzer name -> `{"meta", "arrays"}` (as the store returns them)."""
    rec = analyses.get("tool_decision")
    if not rec or (rec.get("meta") or {}).get("error"):
        return []
    meta, arrays = rec.get("meta") or {}, rec.get("arrays") or {}
    margin = arrays.get("margin")
    decisions = meta.get("decisions") or []
    if margin is None or not decisions:
        return []
    best: Optional[tuple] = None
    for i, d in enumerate(decisions):
        if i >= len(margin) or not len(margin[i]):
            continue
        row = [float(x) for x in margin[i]]
        final = row[-1]
        peak = max(row[:-1], default=final)
        collapsed = peak >= LED_MIDWAY and final < UNDECIDED
        if not (collapsed or final < UNDECIDED):
            continue
        key = (d.get("step", 0), final)
        if best is None or key < best[0]:
            best = (key, d, final, peak, collapsed)
    if best is None:
        return []
    _, d, final, peak, collapsed = best
    return [_diagnosis(d, final, peak, collapsed)]


def _diagnosis(d: dict, final: float, peak: float, collapsed: bool) -> Diagnosis:
    cands = [str(c) for c in d.get("candidates") or []]
    chosen = str(d.get("chosen") or (cands[0] if cands else "?"))
    alt = next((c for c in cands if c != chosen), "another token")
    what = "tool name" if d.get("kind") == "tool_name" else f"argument {d.get('arg', '')!s}"
    how = (f"led by {peak:.2f} nats at a middle layer, {final:.2f} at the last" if collapsed
           else f"only {final:.2f} nats ahead at the last layer")
    kind = "wrong_tool" if d.get("kind") == "tool_name" else "bad_arguments"
    return Diagnosis(kind=kind, first_wrong_step=d.get("step"), confidence=CONFIDENCE, source="whitebox",
                     evidence={"text": f"{what}: chose {chosen!r} over {alt!r}, {how}",
                               "chosen": chosen, "alternative": alt, "margin_last": round(final, 4),
                               "margin_peak": round(peak, 4)})


__all__ = ["from_analyses"]
