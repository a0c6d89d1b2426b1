"""Two trajectories of one case side by side, aligned action by action: two runs, or two attempts.

Each aligned row holds A's and B's tool call (or final answer); the first row where they part is
outlined and labelled "first divergence", and argument values that differ are highlighted. Above the
rows each side shows its grade, its diagnosis (kind, first wrong step) and every annotator's label.
Tool names, arguments and answers are model output: escaped Markdown or code blocks only.
"""

from __future__ import annotations

from typing import Any, Optional

import streamlit as st

from components.runlevel_view import aligned_rows, arg_lines
from components.safe import md_escape, short, show_json, show_text

_STATUS = {  # alignment status -> badge
    "same": ":gray-badge[same]",
    "changed": ":orange-badge[changed]",
    "inserted": ":blue-badge[only in B]",
    "deleted": ":violet-badge[only in A]",
    "malformed": ":red-badge[malformed call]",
}
# Fixed CSS, no user text: the first divergence and the changed arguments stand out.
_STYLE = (
    "<style>.st-key-cmp-first-divergence { border: 2px solid #d33 !important; }"
    " [class*='st-key-cmp-argdiff-'] { background: #fdebd3; border-left: 3px solid #f58518;"
    " padding: 0 0.4rem; border-radius: 0.25rem; }</style>"
)
_GRADE = {"pass": "green", "fail": "red"}


def _side_header(title: str, detail: Any, words: dict) -> None:
    row = detail.row
    st.markdown(f"**{md_escape(title)}** · :{_GRADE.get(row.outcome, 'gray')}-badge[graded {md_escape(row.outcome)}]")
    st.page_link(
        "views/trajectory.py",
        label=f"Trajectory {row.id}",
        icon=":material/open_in_new:",
        query_params={"id": str(row.id)},
    )
    top = (detail.diagnoses or [None])[0]
    if top is not None and top.kind:
        where = f" · first wrong step **{top.first_wrong_step}**" if top.first_wrong_step is not None else ""
        st.markdown(f"diagnosis :red-badge[{md_escape(top.kind)}]{where}")
    else:
        st.caption("no diagnosis" if row.outcome != "pass" else "passed: nothing to diagnose")
    humans = {a: w for a, w in words.items() if a != "auto"}
    if not humans:
        st.caption("not labelled")
    for who, (outcome, kind, step) in sorted(humans.items()):
        bits = [md_escape(outcome or "cleared")] + ([md_escape(kind)] if kind else [])
        if step is not None:
            bits.append(f"first wrong step {step}")
        st.markdown(f":material/label: {md_escape(who)}: " + " · ".join(bits))


def _cell(cell: Optional[dict], changed: list[str], status: str, side: str, r: int, wrong: Optional[int]) -> None:
    if cell is None:
        st.caption("—")
        return
    where = f"step {cell['step']}" if cell["step"] is not None else "no step"
    flag = " :red-badge[first wrong step]" if wrong is not None and cell["step"] == wrong else ""
    if cell["kind"] == "malformed":  # a call that did not parse: nothing was called
        st.markdown(f"**malformed call** · {where}{flag}")
        st.caption(md_escape(short(cell["error"], 300)))
        show_text(cell["args"])
        return
    if cell["kind"] == "answer":
        mark = " :orange-badge[answer differs]" if status == "changed" else ""
        st.markdown(f"**final answer** · {where}{mark}{flag}")
        show_text(None if cell["args"] is None else str(cell["args"]))
        return
    st.markdown(f"calls **{md_escape(cell['name'])}** · {where}{flag}")
    lines = arg_lines(cell["args"], changed)
    if lines is None:
        show_json(cell["args"])
        return
    if not lines:
        st.caption("no arguments")
    for n, (key, value, differs) in enumerate(lines):
        text = f"**{md_escape(key)}** = {md_escape(short(value, 300))}"
        if differs:
            with st.container(key=f"cmp-argdiff-{side}-{r}-{n}"):
                st.markdown(f":orange-badge[changed] {text}")
        else:
            st.markdown(text)
    if any(len(v) > 300 for _, v, _ in lines):
        with st.expander("All arguments"):
            show_json(cell["args"])


def _wrong_step(detail: Any) -> Optional[int]:
    top = (detail.diagnoses or [None])[0]
    return top.first_wrong_step if top is not None else None


def render_side_by_side(detail_a: Any, detail_b: Any, *, titles: tuple[str, str], words: dict) -> None:
    """Draw A and B aligned. `words` is `annotator_labels` of the two trajectories ({tid: {annotator: word}})."""
    head_a, head_b = st.columns(2, gap="large")
    with head_a, st.container(border=True, key="cmp-side-a"):
        _side_header(titles[0], detail_a, words.get(detail_a.row.id, {}))
    with head_b, st.container(border=True, key="cmp-side-b"):
        _side_header(titles[1], detail_b, words.get(detail_b.row.id, {}))
    st.markdown("**Goal**")
    show_text(detail_a.row.goal)

    view = aligned_rows(detail_a.trajectory, detail_b.trajectory)
    if not view["rows"]:
        st.caption("Neither side made a tool call or gave an answer.")
        return
    first = view["first_divergence"]
    st.markdown(
        "**Steps, aligned** · "
        + (
            "they are the same action for action"
            if first is None
            else f"they part at row {first + 1} of {len(view['rows'])}"
        )
    )
    st.html(_STYLE)
    wrong_a, wrong_b = _wrong_step(detail_a), _wrong_step(detail_b)
    for row in view["rows"]:
        r = row["row"]
        key = "cmp-first-divergence" if row["first"] else f"cmp-row-{r}"
        with st.container(border=True, key=key):
            if row["first"]:
                st.markdown(":red-badge[:material/flag: first divergence]")
            badge, left, right = st.columns([1, 5, 5], vertical_alignment="top")
            badge.markdown(_STATUS.get(row["status"], md_escape(row["status"])))
            with left:
                _cell(row["a"], row["changed"], row["status"], "a", r, wrong_a)
            with right:
                _cell(row["b"], row["changed"], row["status"], "b", r, wrong_b)
