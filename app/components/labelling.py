"""The label form: pass / fail / failure kind / first wrong step / note (and, in a team, the agent to
blame), from the keyboard.

One keypress saves a verdict: Enter accepts the diagnosis's proposed kind with its first
wrong step; P pass, F fail (with the kind chosen in the form), U unknown, 1-9 fail with the
kind bound to that key. W moves the "first wrong step" marker to the next model turn. `?`
lists every key. Every save is a new row in the store's label history, with the annotator's
name (a key pressed before a name is typed saves nothing and asks for it); nothing is kept only
in the browser session.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import streamlit as st

from components.safe import html_table, md_escape
from components.viewmodel import actor_steps, team_names

FLASH = "_evalrx_flash"
NEED_NAME = "Type your name in Annotator (above)"


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
    if label.failure_kind:
        bits.append(md_escape(label.failure_kind))
    if label.first_wrong_step is not None:
        bits.append(f"first wrong step {label.first_wrong_step}")
    if getattr(label, "agent", None):
        bits.append(f"blames **{md_escape(label.agent)}**")
    who = md_escape(label.annotator) if label.annotator else "anonymous"
    bits.append(f"by {who}, {label.created_at:%Y-%m-%d %H:%M} UTC")
    return " · ".join(bits)


def current_label(detail: Any) -> Any:
    return next((l for l in detail.labels if l.step_idx is None), None)


SHORTCUTS = (
    ("Enter", "accept the proposed failure kind with its first wrong step"),
    ("P", "pass"),
    ("F", "fail with the kind chosen below"),
    ("U", "unknown"),
    ("1–9", "fail with the kind bound to that key"),
    ("W", "move the first wrong step to the next model turn"),
    ("J / K", "next / previous trajectory (Trajectory page)"),
    ("N / B", "skip / back (Label queue)"),
    ("?", "show or hide this list"),
)


def shortcut_rows() -> list[dict]:
    """Every key the label form and the pages answer to (what `?` shows)."""
    return [{"key": k, "does": d} for k, d in SHORTCUTS]


def proposal_of(detail: Any) -> Any:
    """The diagnosis a reviewer is asked to confirm: the top one, unless it is not a model failure."""
    top = (detail.diagnoses or [None])[0]
    if top is None or top.kind is None or top.kind == "infra_error":
        return None
    return top


def label_panel(
    detail: Any,
    *,
    store: Any,
    kinds: list,
    annotator_key: str,
    key: str,
    on_saved: Optional[Callable[[int], None]] = None,
    blind: bool = False,
) -> None:
    """Render the label form for one trajectory.

    The diagnosis's kind and first wrong step are preselected; Enter accepts the kind with the
    first wrong step as it stands (W moves it), and the Accept button names that step.
    `blind` (a second opinion) shows neither the earlier label nor the diagnosis's proposal and
    preselects nothing, so the verdict is the annotator's own.

    Args:
        detail: the `TrajectoryDetail`.
        store: the store.
        kinds: the taxonomy (`evalrx.store.KindInfo` rows); kinds with a hotkey get a number key.
        annotator_key: the session-state key of the annotator name input (read when saving): without
            a name nothing is saved and the form asks for one.
        key: widget-key prefix, unique on the page.
        on_saved: called with the trajectory id after a save (the queue moves on).
        blind: hide the earlier label, the proposal and the grade (a second opinion).
    """
    from evalrx.store import StoreUnwritable, set_label

    tid = detail.row.id
    cur = None if blind else current_label(detail)
    proposal = None if blind else proposal_of(detail)
    steps = actor_steps(detail.trajectory)
    names = [k.key for k in kinds]
    if cur and cur.failure_kind and cur.failure_kind not in names:
        names.append(cur.failure_kind)
    agents = blame_choices(detail.trajectory, cur)  # empty for one agent: no agent to blame
    fws_key, note_key, kind_key = f"{key}-fws-{tid}", f"{key}-note-{tid}", f"{key}-kind-{tid}"
    agent_key = f"{key}-agent-{tid}"
    need_name_key = f"{key}-need-name"
    refused_key = f"{key}-refused"
    if fws_key not in st.session_state:
        if cur and cur.first_wrong_step in steps:
            st.session_state[fws_key] = cur.first_wrong_step
        else:
            st.session_state[fws_key] = proposal.first_wrong_step if proposal else None
    if kind_key not in st.session_state:
        st.session_state[kind_key] = (
            cur.failure_kind
            if cur and cur.failure_kind
            else proposal.kind
            if proposal and proposal.kind in names
            else None
        )
    if note_key not in st.session_state:
        st.session_state[note_key] = (cur.note if cur else None) or ""
    if agents and agent_key not in st.session_state:
        st.session_state[agent_key] = cur.agent if cur and cur.agent in agents else None

    def annotator() -> Optional[str]:
        return (st.session_state.get(annotator_key) or "").strip() or None

    def save(outcome: str, kind: Optional[str]) -> None:
        who = annotator()
        if who is None:  # a label says who gave it: ask, save nothing, stay on this trajectory
            st.session_state[need_name_key] = True
            return
        st.session_state.pop(need_name_key, None)
        fws = st.session_state.get(fws_key) if outcome == "fail" else None
        blamed = st.session_state.get(agent_key) if outcome == "fail" and agents else None
        note = (st.session_state.get(note_key) or "").strip() or None
        try:
            set_label(
                tid,
                outcome,
                failure_kind=kind,
                first_wrong_step=fws,
                note=note,
                annotator=who,
                agent=blamed,
                store=store,
            )
        except StoreUnwritable as exc:  # a read-only store or a full disk: say so, stay on this trajectory
            st.session_state[refused_key] = str(exc)
            return
        flash(
            f"#{tid} labelled {outcome}"
            + (f" · {md_escape(kind)}" if kind else "")  # a custom kind is the user's text: the toast renders Markdown
            + (f" · first wrong step {fws}" if fws is not None else "")
            + (f" · blames {md_escape(blamed)}" if blamed else "")  # an agent's name comes from the log
        )
        if on_saved:
            on_saved(tid)

    def save_selected_kind() -> None:
        save("fail", st.session_state.get(kind_key))

    def cycle_step() -> None:
        options = [None] + steps
        now = st.session_state.get(fws_key)
        pos = options.index(now) if now in options else 0
        st.session_state[fws_key] = options[(pos + 1) % len(options)]

    if blind:
        st.caption("Blind: earlier labels and the diagnosis are hidden until you give yours.")
    else:
        st.markdown(describe_label(cur))
    refused = st.session_state.pop(refused_key, None)
    if refused:
        st.error(f"Not saved: {md_escape(refused)}", icon=":material/error:")
    if annotator() is None:
        if st.session_state.pop(need_name_key, False):
            st.warning(NEED_NAME + " first: nothing was saved.", icon=":material/badge:")
        else:
            st.caption(NEED_NAME + " to save labels.")
    if proposal is not None:
        # The proposal's kind at the first wrong step as it stands now (W moves it; Enter saves what it shows).
        step = st.session_state.get(fws_key)
        where = f" at step {step}" if step is not None else ""
        st.button(
            f"Accept: {md_escape(proposal.kind)}{where}",
            key=f"{key}-accept",
            shortcut="Enter",
            type="primary",
            icon=":material/done_all:",
            on_click=save,
            args=("fail", proposal.kind),
            width="stretch",
            help="label it a failure of the proposed kind, with the first wrong step chosen below "
            "(the proposal's unless you moved it)",
        )
    elif detail.row.outcome == "error" and not blind:
        st.caption("This case errored (server or harness): not a model failure, so nothing is proposed.")
    graded_fail = detail.row.outcome == "fail" and not blind  # the primary button would give the grade away
    verdicts = st.container(horizontal=True, wrap=True, gap="small", key=f"{key}-verdicts")  # whole words
    verdicts.button(
        "Pass",
        key=f"{key}-pass",
        shortcut="P",
        icon=":material/check:",
        type="secondary" if graded_fail or proposal is not None or blind else "primary",
        on_click=save,
        args=("pass", None),
    )
    verdicts.button(
        "Fail",
        key=f"{key}-fail",
        shortcut="F",
        icon=":material/close:",
        on_click=save_selected_kind,
        type="primary" if graded_fail and proposal is None else "secondary",
        help="fail, with the failure kind chosen below",
    )
    verdicts.button("Unknown", key=f"{key}-unknown", shortcut="U", on_click=save, args=("unknown", None))
    definitions = {k.key: k.definition for k in kinds}
    st.selectbox(
        "Failure kind",
        [None] + names,
        key=kind_key,
        format_func=lambda k: "—" if k is None else k,
        help="saved with F; the diagnosis's proposal is preselected. "
        + " · ".join(f"{k}: {d}" for k, d in definitions.items() if d),
    )
    bound = [k for k in kinds if k.hotkey]
    if bound:
        st.caption("Fail with a kind (one key):")
        # Each button as wide as its kind, wrapping: a fixed grid cut the longer kinds' names.
        with st.container(horizontal=True, wrap=True, gap="small", key=f"{key}-modes"):
            for k in sorted(bound, key=lambda k: k.hotkey):
                st.button(
                    f"{k.hotkey} · {md_escape(k.key)}",
                    key=f"{key}-mode-{k.hotkey}",
                    shortcut=k.hotkey,
                    help=k.definition or None,
                    on_click=save,
                    args=("fail", k.key),
                    width="content",
                )
    s1, s2 = st.columns([3, 2], vertical_alignment="bottom")
    s1.selectbox(
        "First wrong step",
        [None] + steps,
        key=fws_key,
        format_func=lambda i: "—" if i is None else f"step {i}",
        help="Saved with a fail verdict. W moves it to the next model turn.",
    )
    s2.button("Next step", key=f"{key}-cycle", shortcut="W", on_click=cycle_step, width="stretch")
    if agents:
        st.selectbox(
            "Agent to blame",
            [None] + agents,
            key=agent_key,
            format_func=lambda a: "(none)" if a is None else a,
            help="the team's agent whose step went wrong; saved with a fail verdict",
        )
    st.text_input("Note", key=note_key, placeholder="optional; saved with the next verdict")
    shortcuts_help(key)


def blame_choices(trajectory: Any, cur: Any = None) -> list[str]:
    """The agents a person may blame for a team's trajectory (the current label's, if it names another, too);
    empty for a single-agent trajectory."""
    agents = team_names(trajectory)
    if agents and cur is not None and getattr(cur, "agent", None) and cur.agent not in agents:
        agents.append(cur.agent)
    return agents


def shortcuts_help(key: str) -> None:
    """A "Shortcuts" toggle that `?` presses (Streamlit's own shortcuts take letters and digits only)."""
    flag = f"{key}-show-keys"

    def toggle() -> None:
        st.session_state[flag] = not st.session_state.get(flag, False)

    st.button("Shortcuts (?)", key=f"{key}-keys", on_click=toggle, type="tertiary", icon=":material/keyboard:")
    if st.session_state.get(flag):
        st.table(shortcut_rows())
    # A fixed script (no user text): `?` outside a text field presses the toggle above.
    st.html(
        "<script>(() => { const doc = window.parent.document; if (doc.__evalrxHelpKey) return;"
        " doc.__evalrxHelpKey = true; doc.addEventListener('keydown', (e) => {"
        " const t = e.target; if (e.key !== '?' || (t && (t.isContentEditable || /INPUT|TEXTAREA|SELECT/.test(t.tagName))))"
        " return; const b = doc.querySelector('[class*=\"-keys\"] button'); if (b) { e.preventDefault(); b.click(); } }); })();"
        "</script>",
        unsafe_allow_javascript=True,
    )


def history_table(trajectory_id: int, *, store: Any) -> None:
    """Every label ever set on the trajectory, oldest first (edits are kept)."""
    from evalrx.store import label_history

    rows = label_history(trajectory_id, store=store)
    if not rows:
        st.caption("No labels yet.")
        return
    team = any(r.agent for r in rows)  # the column only where a person blamed an agent
    st.html(
        html_table(
            [
                {
                    "when (UTC)": r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                    "step": r.step_idx,
                    "outcome": r.outcome,
                    "failure kind": r.failure_kind,
                    "first wrong step": r.first_wrong_step,
                    **({"agent blamed": r.agent} if team else {}),
                    "note": r.note,
                    "annotator": r.annotator,
                    "current": "yes" if r.is_current else "no",
                }
                for r in rows
            ]
        )
    )
