"""The label form: pass / fail / failure mode / first wrong step / note, from the keyboard.

One keypress saves a verdict: P pass, F fail, U unknown, 1-9 fail with that failure
mode. W moves the "first wrong step" marker to the next model turn before saving
(so fail + mode + step is two keys). Every save is a new row in the store's label
history; nothing is kept only in the browser session.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import streamlit as st

from components.safe import md_escape
from components.viewmodel import actor_steps

FLASH = "_evalrx_flash"


def flash(message: str) -> None:
    """Queue a toast for the next run (a callback cannot show one itself)."""
    st.session_state[FLASH] = message


def show_flash() -> None:
    msg = st.session_state.pop(FLASH, None)
    if msg:
        st.toast(msg, icon=":material/check_circle:")


def describe_label(label: Any) -> str:
    """A one-line Markdown summary of a LabelInfo (escaped)."""
    if label is None:
        return "Not labelled yet"
    bits = [f"**{md_escape(label.outcome or 'cleared')}**"]
    if label.failure_mode:
        bits.append(md_escape(label.failure_mode))
    if label.first_wrong_step is not None:
        bits.append(f"first wrong step {label.first_wrong_step}")
    who = md_escape(label.annotator) if label.annotator else "anonymous"
    bits.append(f"by {who}, {label.created_at:%Y-%m-%d %H:%M} UTC")
    return " · ".join(bits)


def current_label(detail: Any) -> Any:
    return next((l for l in detail.labels if l.step_idx is None), None)


def label_panel(
    detail: Any,
    *,
    store: Any,
    taxonomy: list,
    annotator_key: str,
    key: str,
    on_saved: Optional[Callable[[int], None]] = None,
) -> None:
    """Render the label form for one trajectory.

    Args:
        detail: the `TrajectoryDetail`.
        store: the store.
        taxonomy: [(failure mode, description)], at most 9 (keys 1-9).
        annotator_key: the session-state key of the annotator name input (read when saving).
        key: widget-key prefix, unique on the page.
        on_saved: called with the trajectory id after a save (the queue moves on).
    """
    from evalrx.store import set_label

    tid = detail.row.id
    cur = current_label(detail)
    steps = actor_steps(detail.trajectory)
    fws_key, note_key = f"{key}-fws-{tid}", f"{key}-note-{tid}"
    if fws_key not in st.session_state:
        st.session_state[fws_key] = cur.first_wrong_step if cur and cur.first_wrong_step in steps else None
    if note_key not in st.session_state:
        st.session_state[note_key] = (cur.note if cur else None) or ""

    def save(outcome: str, mode: Optional[str]) -> None:
        fws = st.session_state.get(fws_key) if outcome == "fail" else None
        note = (st.session_state.get(note_key) or "").strip() or None
        set_label(tid, outcome, failure_mode=mode, first_wrong_step=fws, note=note,
                  annotator=(st.session_state.get(annotator_key) or "").strip() or None, store=store)
        flash(f"#{tid} labelled {outcome}" + (f" · {mode}" if mode else "") +
              (f" · first wrong step {fws}" if fws is not None else ""))
        if on_saved:
            on_saved(tid)

    def cycle_step() -> None:
        options = [None] + steps
        now = st.session_state.get(fws_key)
        pos = options.index(now) if now in options else 0
        st.session_state[fws_key] = options[(pos + 1) % len(options)]

    st.markdown(describe_label(cur))
    c1, c2, c3 = st.columns(3)
    c1.button("Pass", key=f"{key}-pass", shortcut="P", type="primary", icon=":material/check:",
              on_click=save, args=("pass", None), width="stretch")
    c2.button("Fail", key=f"{key}-fail", shortcut="F", icon=":material/close:",
              on_click=save, args=("fail", None), width="stretch")
    c3.button("Unknown", key=f"{key}-unknown", shortcut="U", on_click=save, args=("unknown", None),
              width="stretch")
    st.caption("Fail with a failure mode (one key):")
    grid = st.columns(2)
    for i, (name, desc) in enumerate(taxonomy[:9], start=1):
        grid[(i - 1) % 2].button(f"{md_escape(name)}", key=f"{key}-mode-{i}", shortcut=str(i), help=desc or None,
                                 on_click=save, args=("fail", name), width="stretch")
    s1, s2 = st.columns([3, 2], vertical_alignment="bottom")
    s1.selectbox(
        "First wrong step", [None] + steps, key=fws_key,
        format_func=lambda i: "—" if i is None else f"step {i}",
        help="Saved with a fail verdict. W moves it to the next model turn.",
    )
    s2.button("Next step", key=f"{key}-cycle", shortcut="W", on_click=cycle_step, width="stretch")
    st.text_input("Note", key=note_key, placeholder="optional; saved with the next verdict")


def history_table(trajectory_id: int, *, store: Any) -> None:
    """Every label ever set on the trajectory, oldest first (edits are kept)."""
    from evalrx.store import label_history

    rows = label_history(trajectory_id, store=store)
    if not rows:
        st.caption("No labels yet.")
        return
    st.dataframe(
        [
            {
                "when (UTC)": r.created_at.strftime("%Y-%m-%d %H:%M:%S"), "step": r.step_idx, "outcome": r.outcome,
                "failure mode": r.failure_mode, "first wrong step": r.first_wrong_step, "note": r.note,
                "annotator": r.annotator, "current": r.is_current,
            }
            for r in rows
        ],
        hide_index=True, width="stretch",
    )
