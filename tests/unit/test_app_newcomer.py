"""Defects a new user met in the browser (issue 22), each driven with Streamlit's AppTest.

The label queue's Accept follows W and a label needs an annotator name; the Trajectory page shows
the system prompt and "-" for unknown timings and tokens; the Runs table shows "-" for an ungraded
run's success rate; the New run page renders the model note's code spans.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app"))  # components
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # appdata

from appdata import XSS, call_trajectory, fill_attempts, fill_run, make_case  # noqa: E402
from apppages import open_page, pre_texts, store_url, texts  # noqa: E402,F401  (store_url: a fixture)

import evalrx.store as S  # noqa: E402
from evalrx.core import Diagnosis  # noqa: E402


def _current(url: str, tid: int):
    return next((lab for lab in S.current_labels(tid, store=url) if lab.step_idx is None), None)


def _diagnosed(url: str) -> tuple[int, int]:
    """A failed trajectory with model turns at steps 1, 3 and 5, diagnosed as a misread at step 1."""
    cases = [make_case(0)]
    run_id, ids = fill_attempts(
        url,
        cases,
        lambda pos, a: call_trajectory(
            cases[pos], [("lookup", {"query": "a"}), ("calculator", {"expression": "1+1"})], outcome="fail", answer=9
        ),
        diagnose=lambda pos, a: [Diagnosis("misread_observation", 1, {"text": "misread"}, 0.9, "heuristic")],
    )
    return run_id, ids[(cases[0].id, 1)]


# ------------------------------------------------------------------ Label queue


def test_enter_accepts_the_step_w_moved_to(store_url):
    run_id, tid = _diagnosed(store_url)
    at = open_page("label", run=run_id, annotator="ana")
    assert at.button(key="lq-accept").label == "Accept: misread\\_observation at step 1"
    at.button(key="lq-cycle").click().run()  # W: the next model turn
    assert at.selectbox(key=f"lq-fws-{tid}").value == 3
    assert at.button(key="lq-accept").label == "Accept: misread\\_observation at step 3"
    at.button(key="lq-accept").click().run()  # Enter
    lab = _current(store_url, tid)
    assert (lab.outcome, lab.first_wrong_step, lab.annotator) == ("fail", 3, "ana")


def test_a_label_needs_an_annotator_name(store_url):
    run_id, tid = _diagnosed(store_url)
    at = open_page("label", run=run_id)
    assert any("Type your name in Annotator" in c.value for c in at.caption)  # asked before any key
    at.button(key="lq-accept").click().run()  # Enter with no name
    assert _current(store_url, tid) is None
    assert any("Type your name in Annotator" in w.value for w in at.warning)
    assert f"Trajectory {tid}" in texts(at)  # the queue stays on it
    at.text_input(key="annotator").set_value("  ana ").run()
    assert not any("Type your name" in c.value for c in at.caption) and not at.warning
    at.button(key="lq-accept").click().run()  # Enter again: saved with the name
    lab = _current(store_url, tid)
    assert (lab.outcome, lab.first_wrong_step, lab.annotator) == ("fail", 1, "ana")
    assert any("Nothing left to label" in s.value for s in at.success)


def test_the_trajectory_page_needs_an_annotator_name_too(store_url):
    _, tid = _diagnosed(store_url)
    at = open_page("trajectory", id=tid)
    at.button(key="tl-pass").click().run()
    assert _current(store_url, tid) is None and at.warning
    at.text_input(key="annotator").set_value("bo").run()
    at.button(key="tl-pass").click().run()
    assert (_current(store_url, tid).outcome, _current(store_url, tid).annotator) == ("pass", "bo")


# ------------------------------------------------------------------ Trajectory page


POLICY = "# Airline policy\n\nYou are an airline agent. Never rebook without consent.\n" + "Rule. " * 900


def _imported(url: str, tmp_path: Path, system: str) -> int:
    """One OpenAI chat JSONL record with a system prompt and no timings or token counts, imported."""
    import evalrx.interop as X

    row = {
        "id": "t-1",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Change my flight"},
            {"role": "assistant", "content": "Done."},
        ],
        "outcome": "fail",
    }
    f = tmp_path / "tau.jsonl"
    f.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (run_id,) = X.import_file(f, store=url).run_ids
    return S.list_trajectories(run_id=run_id, store=url).rows[0].id


def test_the_system_prompt_is_shown_collapsed(store_url, tmp_path):
    tid = _imported(store_url, tmp_path, POLICY)
    at = open_page("trajectory", id=tid)
    (box,) = [e for e in at.expander if e.label.startswith("System prompt")]
    assert box.label == f"System prompt ({len(POLICY):,} characters)"
    assert box.proto.expanded is False
    assert pre_texts(box) == [POLICY]  # whole, as a code block: text, never Markdown


def test_a_hostile_system_prompt_is_inert(store_url, tmp_path):
    tid = _imported(store_url, tmp_path, f"Policy {XSS}")
    at = open_page("trajectory", id=tid)
    (box,) = [e for e in at.expander if e.label.startswith("System prompt")]
    assert pre_texts(box) == [f"Policy {XSS}"]
    for m in list(at.markdown) + list(at.caption):
        assert not re.search(r"(?<!\\)<", str(m.value)), m.value


def test_a_run_config_system_prompt_is_shown(store_url):
    from evalrx.store import schema as t

    run_id, ids = fill_run(store_url, 1, name="configured")
    with S.connect(store_url).write() as s:
        run = s.get(t.Run, run_id)
        run.config = {**run.config, "system": "Answer in French."}
    at = open_page("trajectory", id=ids[0])
    (box,) = [e for e in at.expander if e.label.startswith("System prompt")]
    assert pre_texts(box) == ["Answer in French."]


def test_unknown_timings_and_tokens_show_a_dash(store_url, tmp_path):
    tid = _imported(store_url, tmp_path, "Be brief.")
    at = open_page("trajectory", id=tid)
    facts = next(m.value for m in at.markdown if "steps ·" in m.value)
    assert "0 ms" not in facts and "0 + 0 tokens" not in facts
    assert facts.endswith("· - ms · - tokens"), facts


# ------------------------------------------------------------------ Runs and New run


def test_an_ungraded_run_shows_a_dash_for_its_success_rate(store_url):
    from evalrx.store import runs

    with S.connect(store_url).write() as s:  # finished with no graded case (none ran)
        runs.create_run(
            s, name="ungraded", config={"model": {"name": "evalrx-tiny"}}, cases=[make_case(0)], status="done"
        )
    at = open_page("runs")
    table = at.dataframe[0]
    assert table.value["success"].isna().all()  # numeric column: missing, not the text "None"
    assert table.proto.placeholder == "-"  # what the grid shows for a missing value


def test_the_model_note_renders_code_spans(store_url):
    at = open_page("new_run")
    note = next(c.value for c in at.caption if "bundled demo" in c.value)
    assert "`python -m evalrx.demo.train`" in note and "\\`" not in note
    assert "python \\-m" not in note  # the code span's text is left as it is


def test_md_with_code_keeps_untrusted_text_inert():
    from components.safe import md_with_code

    out = md_with_code(f"run `a <b>` then {XSS} and `[x](javascript:alert(1))`")
    code = re.findall(r"`([^`]*)`", out)
    assert code == ["a <b>", "[x](javascript:alert(1))"]
    rest = re.sub(r"`[^`]*`", "", out)
    assert not re.search(r"(?<!\\)[<\[\]():$*_]", rest), rest
    assert md_with_code("an `unclosed code") == "an \\`unclosed code"
    assert md_with_code("two\nlines ``") == "two lines \\`\\`"
