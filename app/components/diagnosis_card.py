"""The "Why it failed" card: a trajectory's diagnosis (kind, first wrong step, evidence) at the top of its page.

`diagnosis_view` turns a stored `Diagnosis` into plain rows (testable without Streamlit);
`render_diagnosis` draws them. Evidence quotes model and tool output: it is shown as text
or JSON, never as Markdown or HTML.
"""

from __future__ import annotations

from typing import Any, Optional

import streamlit as st

from components.safe import html_table, md_escape, show_json, show_text
from evalrx.core import NOT_AGENT_KINDS

_SOURCE = {
    "reference": "compared with the case's reference calls and answer",
    "heuristic": "model-free rules on the steps (no reference)",
    "whitebox": "the model's own decision margins",
    "judge": "a judge model",
}
# What the source line says for a case that has a reference (`evalrx.diagnosis.reference_of`).
_COMPARED = {
    "turns": "compared with each user turn's expected answer",
    "state": "compared with the state the ground-truth calls leave, turn by turn",
}
_RULES = "model-free rules on the steps"
_RULES_BESIDE = {
    "answer": f"{_RULES}; the case's expected answer grades the run but names no step, and it lists no calls to compare",
    "calls": f"{_RULES}; the case's reference calls were compared and show no divergence",
    "state": f"{_RULES}; the state its ground-truth calls leave was compared and shows no divergence",
    "turns": f"{_RULES}; each user turn's expected answer was compared and shows no failing turn",
}


def source_text(source: str, reference: Optional[str], outcome: Optional[str]) -> str:
    """The card's source line, true to what the case holds: `reference` is what it gives to compare with
    (`evalrx.diagnosis.reference_of`), `outcome` the trajectory's grade (only a failed run is compared)."""
    if source == "reference":
        return _COMPARED.get(reference or "", _SOURCE["reference"])
    if source != "heuristic" or reference is None:
        return _SOURCE.get(source, source)
    if outcome == "error":
        return f"{_RULES}; the run raised before it could be compared with the case's reference"
    if outcome != "fail" and reference != "answer":
        return f"{_RULES}; the run is not graded fail, so it was not compared with the case's reference"
    return _RULES_BESIDE[reference]


def diagnosis_view(
    diagnosis: Any, definitions: dict, *, case: Optional[dict] = None, outcome: Optional[str] = None
) -> dict:
    """What the card shows for one diagnosis: headline fields, and the evidence as pairs to set side by side.
    `case` (the stored case) and `outcome` (the trajectory's grade) make the source line say what it compared."""
    from evalrx.core import FailureCase
    from evalrx.diagnosis import reference_of

    ev = dict(diagnosis.evidence or {})
    turn = f" (turn {int(ev['user_turn']) + 1})" if isinstance(ev.get("user_turn"), int) else ""
    pairs = []
    if "expected" in ev or "actual" in ev:
        pairs.append(("Expected call", ev.get("expected"), "Actual call", ev.get("actual")))
    if "answer" in ev and "observation" in ev:
        pairs.append(("Final answer", ev.get("answer"), "Observation it contradicts", ev.get("observation")))
    elif "observation" in ev:
        pairs.append(("Observation", ev.get("observation"), None, None))
    if "answer" in ev and "expected_answer" in ev:
        pairs.append(
            (
                f"Answer{turn}" if turn else "Final answer",
                ev.get("answer"),
                f"Expected answer{turn}",
                ev.get("expected_answer"),
            )
        )
    if "chosen" in ev and "alternative" in ev:
        pairs.append(("Chosen", ev.get("chosen"), "Strongest alternative", ev.get("alternative")))
    return {
        "kind": diagnosis.kind,
        "definition": definitions.get(diagnosis.kind or "", ""),
        "step": diagnosis.first_wrong_step,
        "agent": getattr(diagnosis, "agent", None),  # in a team: the agent it blames
        "source": diagnosis.source,
        "source_text": source_text(
            diagnosis.source, reference_of(FailureCase.from_dict(case)) if case else None, outcome
        ),
        "confidence": float(diagnosis.confidence),
        "summary": str(ev.get("text") or ""),
        "diff": [d for d in ev.get("diff") or [] if isinstance(d, dict)],
        "pairs": pairs,
    }


def blames_text(agent: Optional[str], step: Optional[int], *, bold: bool = True) -> str:
    """In a team, the agent a diagnosis blames and where, as escaped Markdown ("blames **Analyst** at step
    **3**"); "" for one agent (the card then says the step as it always has)."""
    if not agent:
        return ""
    b = "**" if bold else ""
    return f"blames {b}{md_escape(agent)}{b}" + (f" at step {b}{int(step)}{b}" if step is not None else "")


def _value(v: Any) -> None:
    if isinstance(v, (dict, list)):
        show_json(v)
    else:
        show_text(None if v is None else str(v), empty="(none)")


def best_by_source(diagnoses: list) -> list:
    """Each source's best candidate (the ranked list's first of that source), strongest source first."""
    best: dict = {}
    for d in diagnoses:
        best.setdefault(d.source, d)
    return [best[s] for s in _SOURCE if s in best]


def agreement_text(figures: Optional[dict]) -> str:
    """A source's measured agreement with people, in a few words."""
    if not figures or not figures.get("n"):
        return "no people's labels for this suite yet"
    return (
        f"agrees with people on the kind {figures['kind_agreement']:.0%}, "
        f"on the step {figures['step_exact']:.0%} (n={figures['n']})"
    )


def render_sources(diagnoses: list, agreement: dict) -> None:
    """Each source's proposal side by side, with how often that source agreed with people on this suite."""
    best = best_by_source(diagnoses)
    if len(best) < 2:
        return
    st.markdown("**Each source's proposal**")
    for col, d in zip(st.columns(len(best)), best):
        with col:
            where = f" · step **{d.first_wrong_step}**" if d.first_wrong_step is not None else ""
            blames = blames_text(getattr(d, "agent", None), d.first_wrong_step)
            st.markdown(f"{md_escape(d.source)}: **{md_escape(d.kind)}**" + (f" · {blames}" if blames else where))
            show_text(d.summary)
            st.caption(md_escape(agreement_text(agreement.get(d.source))))


def render_diagnosis(
    detail: Any, definitions: dict, *, on_rediagnose: Optional[Any] = None, agreement: Optional[dict] = None
) -> Optional[int]:
    """Draw the card; returns the first wrong step it names (None when there is no diagnosis). `agreement` is
    each source's measured agreement with people on this run's suite (`evalrx.reports.source_agreement`)."""
    diagnoses = list(detail.diagnoses or [])
    outcome = detail.row.outcome
    with st.container(border=True, key="why-it-failed"):
        st.markdown("#### Why it failed")
        if not diagnoses:
            st.caption(
                "It passed: nothing to diagnose."
                if outcome == "pass"
                else "No diagnosis stored for this trajectory yet."
            )
            if outcome != "pass" and on_rediagnose is not None:
                st.button("Diagnose", key="diagnose-now", on_click=on_rediagnose, icon=":material/troubleshoot:")
            return None
        view = diagnosis_view(diagnoses[0], definitions, case=detail.case, outcome=outcome)
        color = "orange" if view["kind"] in NOT_AGENT_KINDS else "red"
        blames = blames_text(view["agent"], view["step"])
        step = f" · first wrong step **{view['step']}**" if view["step"] is not None else ""
        step = f" · {blames}" if blames else step
        st.markdown(
            f":{color}-badge[{md_escape(view['kind'])}]{step} · "
            f"{md_escape(view['source'])}, confidence {view['confidence']:.2f}"
        )
        if view["definition"]:
            st.caption(md_escape(view["definition"]))
        if view["kind"] == "infra_error":
            st.caption("The server or the harness failed: this is counted apart from the model's failures.")
        elif view["kind"] in NOT_AGENT_KINDS:
            st.caption("The user's part, not the agent's: this is counted apart from the model's failures.")
        if view["summary"]:
            show_text(view["summary"])
        for left_title, left, right_title, right in view["pairs"]:
            a, b = st.columns(2)
            with a:
                st.markdown(f"**{md_escape(left_title)}**")
                _value(left)
            if right_title:
                with b:
                    st.markdown(f"**{md_escape(right_title)}**")
                    _value(right)
        if view["diff"]:
            st.markdown("**Argument differences**")
            st.html(
                html_table(
                    [
                        {
                            "argument": str(d.get("arg")),
                            "expected": _cell(d.get("expected")),
                            "actual": _cell(d.get("actual")),
                        }
                        for d in view["diff"]
                    ]
                )
            )
        st.caption(f"Source: {md_escape(view['source_text'])}.")
        render_sources(diagnoses, agreement or {})
        if len(diagnoses) > 1:
            with st.expander(f"{len(diagnoses) - 1} other candidate(s)"):
                for d in diagnoses[1:]:
                    where = f" at step {d.first_wrong_step}" if d.first_wrong_step is not None else ""
                    blames = blames_text(getattr(d, "agent", None), d.first_wrong_step, bold=False)
                    where = f" {blames}" if blames else where
                    st.markdown(f"**{md_escape(d.kind)}**{where} · {md_escape(d.source)} · {d.confidence:.2f}")
                    show_text(d.summary)
        if on_rediagnose is not None:
            st.button(
                "Diagnose again",
                key="diagnose-again",
                on_click=on_rediagnose,
                icon=":material/refresh:",
                help="recompute from the steps, the case's reference and any stored analysis",
            )
        return view["step"]


def _cell(v: Any) -> str:
    import json

    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)


def highlight_step(idx: Optional[int], *, scroll: bool) -> None:
    """Outline the first wrong step's card in red and, once, scroll it into view (the index is an int)."""
    if idx is None:
        return
    idx = int(idx)
    st.html(f"<style>.st-key-step-{idx} {{ border: 2px solid #d33 !important; }}</style>")
    if scroll:
        # Again once charts above it have drawn (they change the page's height after the first scroll).
        st.html(
            f"<script>[300, 1500].forEach((ms) => setTimeout(() => window.parent.document"
            f".querySelector('.st-key-step-{idx}')?.scrollIntoView({{block: 'center'}}), ms));</script>",
            unsafe_allow_javascript=True,
        )
