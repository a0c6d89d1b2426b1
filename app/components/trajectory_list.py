"""The Trajectories list: one line per trajectory whose id is a link to its page.

Built from Streamlit's own elements rather than `st.dataframe`: a page link opens the trajectory
in the browser without rerunning the list first (a table's row selection reruns the whole list
script, then switches page), a middle click opens it in a new tab, and no Arrow table is built, so
pandas and pyarrow stay out of the server. The rest of a row is one `st.html` block of escaped text:
four Markdown elements a row took the browser about a second to draw for 50 rows.
"""

from __future__ import annotations

import html
from typing import Any, Mapping

import streamlit as st

from components.safe import counted, short
from components.viewmodel import grade_text
from evalrx.core import Termination

# Column widths in pixels; the goal takes what is left.
WIDTHS = {"id": 64, "grade": 96, "why": 210, "numbers": 230}
_GRADE = {"pass": "green", "fail": "red"}
# A row's cells on one grid (the id link sits before it), badges in Streamlit's colours.
LIST_STYLE = (
    "<style>.evx-row{display:grid;grid-template-columns:minmax(0,1fr) "
    f"{WIDTHS['grade']}px {WIDTHS['why']}px {WIDTHS['numbers']}px;gap:.5rem;align-items:center;"
    "font-size:1rem;line-height:1.5}.evx-row>div{overflow-wrap:anywhere}.evx-dim{color:rgba(128,128,128,.9)}"
    ".evx-badge{display:inline-block;padding:0 .35rem;margin:0 .2rem .1rem 0;border-radius:.25rem;"
    "font-size:.85rem;line-height:1.4}"
    ".evx-red{background:rgba(255,43,43,.1);color:rgb(189,64,67)}"
    ".evx-green{background:rgba(33,195,84,.1);color:rgb(21,130,55)}"
    ".evx-orange{background:rgba(255,164,33,.1);color:rgb(189,103,0)}"
    ".evx-violet{background:rgba(128,61,245,.1);color:rgb(107,49,216)}"
    ".evx-gray{background:rgba(128,128,128,.12);color:rgb(85,88,103)}</style>"
)


def _badge(text: str, colour: str) -> str:
    return f'<span class="evx-badge evx-{colour}">{html.escape(text)}</span>'


def page_count(total: int, per: int) -> int:
    """Pages of `per` rows that `total` rows fill: at least one (an empty list is one empty page)."""
    return max(1, -(-total // per))


def _why(r: Any) -> str:
    """The diagnosis (in a team, with the agent it blames) and the person's label, as badges (escaped)."""
    bits = []
    if r.diagnosis_kind:
        bits.append(_badge(r.diagnosis_kind, "orange"))
    if getattr(r, "diagnosis_agent", None):
        bits.append(_badge(f"blames {r.diagnosis_agent}", "violet"))
    if r.label:
        kind = f" · {r.label_kind}" if r.label_kind else ""
        bits.append(_badge(f"label: {r.label}{kind}", _GRADE.get(r.label, "gray")))
    if r.terminated and r.terminated != Termination.FINAL.value:  # say only an unusual end
        bits.append(_badge(r.terminated, "gray"))
    return " ".join(bits) or '<span class="evx-dim">-</span>'


def _numbers(r: Any) -> str:
    parts = [counted(r.n_steps, "step"), counted(r.n_tool_calls, "call")]
    if r.n_parse_errors:
        parts.append(f"<b>{r.n_parse_errors} parse err.</b>")
    parts.append(f"{r.latency_ms:,.0f} ms" if r.latency_ms else "- ms")
    tokens = (r.prompt_tokens or 0) + (r.completion_tokens or 0)
    parts.append(f"{tokens:,} tok" if tokens else "- tok")
    return " · ".join(parts)


def _case(r: Any) -> str:
    """Case and run on one line, goal and answer on the next (escaped)."""
    text = (
        f"<b>{html.escape(short(r.sample_id, 40))}</b> <span class='evx-dim'>· run {r.run_id}</span><br>"
        + html.escape(short(r.goal, 120))
    )
    if r.final_answer is not None:
        text += f" <span class='evx-dim'>→ {html.escape(short(r.final_answer, 60))}</span>"
    return text


def row_html(r: Any) -> str:
    """Everything of a row but its id link, as inert HTML (every untrusted text escaped)."""
    grade = _badge(grade_text(r), _GRADE.get(r.outcome, "gray"))
    return f'<div class="evx-row"><div>{_case(r)}</div><div>{grade}</div><div>{_why(r)}</div><div>{_numbers(r)}</div></div>'


def render_list(rows: list, keep: Mapping[str, str]) -> None:
    """One line per trajectory of `rows` (store rows); `keep` is the filter its page walks with J/K."""
    head = "".join(
        f"<div><b>{h}</b></div>"
        for h in ("case · run · goal → answer", "grade", "diagnosed · labelled", "steps · calls · time · tokens")
    )
    with st.container(horizontal=True, wrap=False, gap="small", key="list-head"):
        st.markdown("**id**", width=WIDTHS["id"])
        st.html(f'{LIST_STYLE}<div class="evx-row">{head}</div>', width="stretch")
    for r in rows:
        with st.container(horizontal=True, wrap=False, gap="small", vertical_alignment="center", key=f"row-{r.id}"):
            st.page_link(
                "views/trajectory.py",
                label=str(r.id),
                query_params={"id": str(r.id), **keep},
                width=WIDTHS["id"],
            )
            st.html(row_html(r), width="stretch")
