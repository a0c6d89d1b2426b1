"""Run-level pages with Streamlit's AppTest on a real SQLite store built with the store API: the Compare
page's numbers and its side-by-side view, the Runs page's Reliability, Predictors and Agreement tabs,
the label queue's blind second opinion, adjudication by one key, and the Trajectory page's link to the
same case in another run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # appdata
sys.path.insert(0, str(ROOT / "app"))  # components

from appdata import call_trajectory, fill_attempts, make_case  # noqa: E402
from apppages import open_page, pre_texts, store_url, texts  # noqa: E402,F401  (store_url: a fixture)

import evalrx.store as S  # noqa: E402
from evalrx import reports  # noqa: E402
from evalrx.core import Diagnosis  # noqa: E402


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def frame_with(at, column: str):
    """The first table (interactive or static) on the page with `column`."""
    return next(d.value for d in [*at.dataframe, *at.table] if column in d.value.columns)


def chart_rows(proto):
    """The data a chart was drawn from (Streamlit sends it as Arrow next to the spec)."""
    import pyarrow as pa

    return pa.ipc.open_stream(proto.data.data).read_pandas()


def diag(kind: str, step: int) -> list:
    return [Diagnosis(kind=kind, first_wrong_step=step, evidence={"text": kind}, confidence=0.9, source="reference")]


LOOKUP_A, LOOKUP_B = {"query": "fact 0", "limit": 3}, {"query": "fact zero", "limit": 3}
CALC = ("calculator", {"expression": "2 * 7"})


@pytest.fixture
def two_runs(store_url):
    """A (before) and B (after): case 0 regresses (B looks up other words), case 2 regresses (B makes one
    more call), case 3 is fixed, case 1 passes and case 4 fails in both; case 5 is in A only, case 6 in B only."""
    cases = [make_case(i) for i in range(7)]
    a_plan = {
        0: ([("lookup", LOOKUP_A)], "pass", None),
        1: ([CALC], "pass", None),
        2: ([CALC], "pass", None),
        3: ([("lookup", LOOKUP_A)], "fail", ("wrong_tool", 1)),
        4: ([CALC], "fail", ("bad_arguments", 1)),
        5: ([CALC], "pass", None),
    }
    b_plan = {
        0: ([("lookup", LOOKUP_B)], "fail", ("bad_arguments", 1)),
        1: ([CALC], "pass", None),
        2: ([CALC, ("lookup", {"query": "again"})], "fail", ("repeated_calls", 3)),
        3: ([CALC], "pass", None),
        4: ([CALC], "fail", ("bad_arguments", 1)),
        6: ([CALC], "pass", None),
    }

    def build(plan: dict, name: str):
        chosen = [cases[i] for i in sorted(plan)]
        order = sorted(plan)

        def make(pos, attempt):
            calls, outcome, _ = plan[order[pos]]
            return call_trajectory(chosen[pos], calls, outcome=outcome)

        def diagnose(pos, attempt):
            d = plan[order[pos]][2]
            return diag(*d) if d else None

        return fill_attempts(store_url, chosen, make, name=name, diagnose=diagnose)

    ra, ids_a = build(a_plan, "before")
    rb, ids_b = build(b_plan, "after")
    return {"url": store_url, "a": ra, "b": rb, "ids_a": ids_a, "ids_b": ids_b}


@pytest.fixture
def repeated(store_url):
    """Three attempts at four cases: q00000 always passes, q00001 and q00003 are flaky, q00002 always fails."""
    cases = [make_case(i) for i in range(4)]
    plan = [["pass"] * 3, ["pass", "fail", "pass"], ["fail"] * 3, ["fail", "pass", "fail"]]

    def make(pos, attempt):
        outcome = plan[pos][attempt - 1]
        args = {"expression": f"{pos} * 7"} if outcome == "pass" else {"expression": f"{pos} + 7"}
        return call_trajectory(cases[pos], [("calculator", args)], outcome=outcome)

    def diagnose(pos, attempt):
        return diag("bad_arguments", 1) if plan[pos][attempt - 1] == "fail" else None

    rid, ids = fill_attempts(store_url, cases, make, repeats=3, name="repeated", diagnose=diagnose)
    return {"url": store_url, "run": rid, "ids": ids}


# ------------------------------------------------------------------ pure helpers


def test_actions_of_a_stored_trajectory_and_their_alignment():
    from components.runlevel_view import aligned_rows

    from evalrx.runstats import action_steps, actions_of

    case = make_case(0)
    a = call_trajectory(case, [("lookup", LOOKUP_A)], outcome="pass")
    b = call_trajectory(case, [("lookup", LOOKUP_B), ("calculator", {"expression": "1"})], outcome="fail")
    assert actions_of(a) == [("call", "lookup", LOOKUP_A), ("answer", None, "The answer is 0.")]
    assert action_steps(a) == [1, 3] and action_steps(b) == [1, 3, 5]
    view = aligned_rows(a, b)
    statuses = [r["status"] for r in view["rows"]]
    assert statuses == ["changed", "inserted", "same"] and view["first_divergence"] == 0
    first = view["rows"][0]
    assert first["first"] and first["changed"] == ["query"]  # `limit` is equal on both sides
    assert first["a"]["step"] == 1 and first["b"]["args"] == LOOKUP_B
    assert view["rows"][1]["a"] is None and view["rows"][1]["b"]["name"] == "calculator"


def test_predictor_rows_link_to_the_list_that_filters_on_the_signal():
    from components.runlevel_view import predictor_link

    assert predictor_link("kind=bad_arguments", 3, 0.0, 0.9) == "trajectories?run=3&kind=bad_arguments"
    assert predictor_link("tool_margin", 3, 1.25, 0.2) == "trajectories?run=3&margin=1.25"
    assert predictor_link("turns", 3, 2.0, 0.8) == "trajectories?run=3&sort=steps"
    assert predictor_link("prompt_tokens", 3, 2.0, 0.3) == "trajectories?run=3&sort=prompt&asc=true"
    assert predictor_link("parse_errors", 3, 0.0, 0.6) is None


# ------------------------------------------------------------------ Compare


def test_compare_page_counts_pairs_and_never_drops_unpaired_cases(two_runs):
    a, b = two_runs["a"], two_runs["b"]
    at = open_page("compare", a=a, b=b)
    m = metrics(at)
    assert (m["paired cases"], m["both pass"], m["both fail"], m["regressions"], m["fixes"], m["mixed"]) == (
        "5",
        "1",
        "1",
        "2",
        "1",
        "0",
    )
    assert m["success rate B − A"] == "-20.0 pp"  # (-1 + 0 - 1 + 1 + 0) / 5
    cmp = reports.compare_runs(a, b, store=two_runs["url"])
    assert m["McNemar p"] == f"{cmp['mcnemar_p']:.3g}" == "1"  # 2 regressions against 1 fix
    assert m["95% interval"] == f"{100 * cmp['diff_ci_low']:+.1f} to {100 * cmp['diff_ci_high']:+.1f} pp"
    assert any("1 case(s) only in A and 1 only in B" in w.value for w in at.warning)
    assert {e.label for e in at.expander} >= {"Cases only in A (1)", "Cases only in B (1)"}
    assert "q00005" in pre_texts(at) and "q00006" in pre_texts(at)
    changes = frame_with(at, "change")
    assert list(changes["case"]) == ["q00000", "q00002", "q00003"]
    assert list(changes["change"]) == ["regression", "regression", "fix"]
    assert changes["open"][0] == f"compare?a={a}&b={b}&case=q00000"
    shift = frame_with(at, "kind")
    assert dict(zip(shift["kind"], shift["change"])) == {"bad_arguments": 1, "repeated_calls": 1, "wrong_tool": -1}


def test_compare_run_pickers_name_each_run_by_name_model_suite_and_date(two_runs):
    url, a = two_runs["url"], two_runs["a"]
    _set_config(url, a, suite="demo/x")
    run = S.get_run(a, store=url)
    at = open_page("compare", a=a, b=two_runs["b"])
    want = f"{a} · before · {run.spec_key} · demo/x · {run.created_at:%Y-%m-%d}"
    assert run.spec_key and want in at.selectbox(key="a").options and want in at.selectbox(key="b").options


def test_side_by_side_shows_a_first_wrong_step_that_is_a_malformed_call(store_url):
    """A call that did not parse is no action to align, yet it is where B went wrong: it is shown in its place."""
    import dataclasses

    from evalrx.core import Step, StepRole

    case = make_case(0)

    def make_a(pos, attempt):
        return call_trajectory(case, [CALC], outcome="pass")

    def make_b(pos, attempt):
        t = call_trajectory(case, [CALC], outcome="fail")
        bad = Step(1, StepRole.ACTOR, '<tool_call>{"name": "calculator", <b>oops</b>', parse_error="not JSON at 31")
        later = [dataclasses.replace(x, idx=x.idx + 1) for x in t.steps[1:]]
        return dataclasses.replace(t, steps=[t.steps[0], bad, *later])

    ra, _ = fill_attempts(store_url, [case], make_a, name="clean")
    rb, _ = fill_attempts(store_url, [case], make_b, name="malformed", diagnose=lambda p, a: diag("malformed_call", 1))
    at = open_page("compare", a=ra, b=rb, case=case.id)
    shown = texts(at)
    assert "**malformed call** · step 1 :red-badge[first wrong step]" in shown
    assert ":red-badge[malformed call]" in shown and "not JSON at 31" in shown
    assert '<tool_call>{"name": "calculator", <b>oops</b>' in pre_texts(at)  # its raw text, inert
    # It sits before B's calculator call (now step 2), which still pairs with A's.
    rows = [m.value for m in at.markdown if m.value.startswith(("**malformed call**", "calls **calculator**"))]
    assert rows[:3] == ["**malformed call** · step 1 :red-badge[first wrong step]", "calls **calculator** · step 1"] + [
        "calls **calculator** · step 2"
    ]


def test_compare_defaults_to_the_two_most_recent_runs(two_runs):
    at = open_page("compare")
    assert (at.selectbox(key="a").value, at.selectbox(key="b").value) == (two_runs["a"], two_runs["b"])
    assert metrics(at)["regressions"] == "2"


def test_opening_a_case_keeps_both_runs_in_the_url(two_runs):
    """A shared link names both runs: with B the newest (the default) it still says b=, so it keeps its meaning."""
    a, b = two_runs["a"], two_runs["b"]
    at = open_page("compare")
    at.selectbox(key="case").set_value("q00000").run()
    assert not at.exception
    url = at.query_params  # (`case` is a bound widget's: the browser writes it, AppTest does not see it)
    assert (url.get("a"), url.get("b")) == (str(a), str(b)), url
    at.selectbox(key="a").set_value(b).run()  # a change of run goes to the URL too
    assert at.query_params.get("a") == str(b) and at.query_params.get("b") == str(b)


def _set_config(url: str, run_id: int, **config) -> None:
    from evalrx.store import schema as t

    with S.connect(url).write() as s:
        run = s.get(t.Run, run_id)
        run.config = dict(run.config or {}, **config)


def test_compare_pairs_a_run_with_the_latest_run_of_its_suite_and_shows_their_config_differences(store_url):
    """The default A is the newest other run of B's suite (run config `suite`, else the same case set), not
    the run before it; the two configs' differing keys are shown, a secret never."""
    import streamlit as st
    from appdata import fill_run

    r1, _ = fill_run(store_url, 2, name="x-first")
    r2, _ = fill_run(store_url, 2, name="y")
    r3, _ = fill_run(store_url, 2, name="x-again")
    _set_config(store_url, r1, suite="demo/x", temperature=0.0, api_key="sk-never-shown")
    _set_config(store_url, r2, suite="demo/y", temperature=0.0)
    _set_config(store_url, r3, suite="demo/x", temperature=0.8, api_key="sk-other")
    at = open_page("compare")
    assert (at.selectbox(key="a").value, at.selectbox(key="b").value) == (r1, r3)
    diff = frame_with(at, "key")
    assert list(diff["key"]) == ["temperature"]  # suite and model agree; the api key is never a row
    assert (diff["A"][0], diff["B"][0]) == ("0\\.0", "0\\.8")  # Markdown-escaped: st.table renders Markdown
    assert "sk-" not in texts(at) and not any("sk-" in str(d.value) for d in [*at.dataframe, *at.table])
    # The Runs page suggests comparing a run with the run of its suite before it, not the run before it.
    at = open_page("runs", run=r3)
    assert {link.proto.label for link in at.get("page_link") if link.proto.page == "compare"} == {
        f"Compare with run {r1}"
    }
    at = open_page("compare", a=r2)  # no other run of demo/y: B falls back to the newest run
    assert at.selectbox(key="b").value == r3
    # No suite in the configs (imports): the same case set decides.
    r4, _ = fill_run(store_url, 2, name="other cases", prefix="z")
    r5, _ = fill_run(store_url, 2, name="same cases")
    st.cache_data.clear()  # the page's run list is cached for seconds
    at = open_page("compare")
    assert (at.selectbox(key="a").value, at.selectbox(key="b").value) == (r3, r5)
    assert r4 not in (at.selectbox(key="a").value, at.selectbox(key="b").value)


def test_compare_config_differences_are_inert_and_keep_settings_that_merely_say_tokens(store_url):
    """An imported config is anyone's text (st.table renders Markdown); `max_new_tokens` is a setting, not a secret."""
    from appdata import fill_run

    r1, _ = fill_run(store_url, 2, name="one")
    r2, _ = fill_run(store_url, 2, name="two")
    _set_config(store_url, r1, note="[click](javascript:alert(1)) ![x](http://t.example/p.png)", max_new_tokens=64)
    _set_config(store_url, r2, note="plain", max_new_tokens=128)
    at = open_page("compare", a=r1, b=r2)
    diff = frame_with(at, "key")
    assert {"note", "max\\_new\\_tokens"} <= set(diff["key"])
    hostile = diff["A"][list(diff["key"]).index("note")]
    assert "](" not in hostile.replace("\\]\\(", "") and hostile.startswith("\\[click\\]")


def test_side_by_side_marks_the_first_divergence_and_the_changed_argument(two_runs):
    a, b = two_runs["a"], two_runs["b"]
    at = open_page("compare", a=a, b=b, case="q00000")
    shown = texts(at)
    assert "**A · run %d · attempt 1**" % a in shown.replace("\\", "")
    assert "first divergence" in shown and "they part at row 1 of 2" in shown
    changed = [m.value for m in at.markdown if m.value.startswith(":orange-badge[changed] **")]
    assert changed == [
        ':orange-badge[changed] **query** = \\"fact 0\\"',
        ':orange-badge[changed] **query** = \\"fact zero\\"',
    ]
    assert "**limit** = 3" in shown  # equal arguments are shown, not highlighted
    assert "diagnosis :red-badge[bad\\_arguments] · first wrong step **1**" in shown  # B's diagnosis
    assert "passed: nothing to diagnose" in shown  # A passed


def test_side_by_side_shows_an_extra_call_as_only_in_b(two_runs):
    at = open_page("compare", a=two_runs["a"], b=two_runs["b"], case="q00002")
    shown = texts(at)
    assert ":blue-badge[only in B]" in shown and "calls **lookup**" in shown
    assert "they part at row 2 of 3" in shown  # the calculator call is the same on both sides


def test_side_by_side_shows_each_annotators_label(two_runs):
    tid = two_runs["ids_b"][("q00000", 1)]
    S.set_label(tid, "fail", failure_kind="bad_arguments", first_wrong_step=1, annotator="ann", store=two_runs["url"])
    at = open_page("compare", a=two_runs["a"], b=two_runs["b"], case="q00000")
    assert ":material/label: ann: fail · bad\\_arguments · first wrong step 1" in texts(at)


def test_same_run_sets_a_passing_and_a_failing_attempt_side_by_side(repeated):
    rid = repeated["run"]
    at = open_page("compare", a=rid, b=rid, case="q00001")
    assert not at.metric or "regressions" not in metrics(at)  # no paired counts for one run
    shown = texts(at).replace("\\", "")
    assert f"A · run {rid} · attempt 1" in shown and f"B · run {rid} · attempt 2" in shown
    assert ":orange-badge[changed] **expression**" in shown.replace("\\", "")
    at.selectbox(key=f"att-B-{rid}-{rid}-q00001").set_value(3).run()
    assert "they are the same action for action" in texts(at)  # attempts 1 and 3 both pass the same way


# ------------------------------------------------------------------ Runs tabs


def test_reliability_tab_shows_rates_pass_at_k_and_flaky_cases(repeated):
    rid = repeated["run"]
    at = open_page("runs", run=rid, view="Reliability")
    m = metrics(at)
    assert m["pass@1"] == "50.0%" and m["flaky cases"] == "2" and m["graded attempts"] == "12"
    charts = {json.loads(c.proto.spec).get("title"): c.proto for c in at.get("vega_lite_chart")}
    assert {"Success rate per case (worst first)", "pass@k and pass^k"} <= set(charts)
    strip = chart_rows(charts["Success rate per case (worst first)"])
    assert list(strip["case"]) == ["q00002", "q00003", "q00001", "q00000"]  # worst first
    assert list(strip["rate"].round(3)) == [0.0, 0.333, 0.667, 1.0]
    spec = json.loads(next(c.spec for c in charts.values() if "worst first" in json.loads(c.spec).get("title", "")))
    assert spec["encoding"]["x"]["title"] == "4 cases"  # the shared "q0000" start is no separator's: kept
    assert spec["autosize"]["type"] == "fit-x"  # the case labels go below the plot, not into its 220 px
    curve = chart_rows(charts["pass@k and pass^k"])
    at_k = dict(zip(curve[curve["measure"] == "pass@k"]["k"], curve[curve["measure"] == "pass@k"]["value"]))
    assert at_k[1] == pytest.approx(0.5) and at_k[3] == pytest.approx(0.75)  # three of four cases pass once
    flaky = frame_with(at, "failing attempts' kinds")
    assert list(flaky["case"]) == ["q00001", "q00003"]
    assert list(flaky["open"]) == [f"compare?a={rid}&b={rid}&case=q00001", f"compare?a={rid}&b={rid}&case=q00003"]


def test_predictors_tab_ranks_signals_with_links(two_runs):
    at = open_page("runs", run=two_runs["b"], view="Predictors")
    table = frame_with(at, "signal")
    strengths = [s for s in table["strength"] if s == s and s is not None]
    assert strengths == sorted(strengths, reverse=True)
    row = table[table["signal"] == "tool_calls"].iloc[0]
    assert row["list"] == f"trajectories?run={two_runs['b']}&sort=calls" and row["AUROC"] == 0.667
    # B's failures make 1, 2 and 1 calls, its passes 1 each: (0.5 + 1 + 0.5) / 3.


def test_predictors_tab_offers_no_diagnosed_kind_and_warns_on_a_small_class(two_runs):
    """The diagnosis runs on failures only (a kind predicts failure by construction); 3 passes and
    3 failures are too few for an AUROC to mean much, and the page says so."""
    at = open_page("runs", run=two_runs["b"], view="Predictors")
    table = frame_with(at, "signal")
    assert not [s for s in table["signal"] if s.startswith("kind=")]
    assert set(table["n minority"]) == {3} and all("only 3" in w for w in table["warning"])
    warned = [w.value for w in at.warning]
    assert any("fewer than 10" in w and "3 passed" in w for w in warned), warned
    # A cell without a value (no interval, no split) is a dash, not the word "None".
    (grid,) = [d for d in at.dataframe if "signal" in d.value.columns]
    assert grid.proto.placeholder == "—"


def test_agreement_tab_shows_kappa_steps_and_the_diagnosis_confusion(two_runs):
    url, rid = two_runs["url"], two_runs["b"]
    fails = [two_runs["ids_b"][(c, 1)] for c in ("q00000", "q00002", "q00004")]
    for tid in fails:
        S.set_label(tid, "fail", failure_kind="bad_arguments", first_wrong_step=1, annotator="ann", store=url)
    S.set_label(fails[0], "fail", failure_kind="bad_arguments", first_wrong_step=1, annotator="bob", store=url)
    S.set_label(fails[1], "fail", failure_kind="repeated_calls", first_wrong_step=3, annotator="bob", store=url)
    at = open_page("runs", run=rid, view="Agreement")
    pairs = frame_with(at, "annotators")
    assert list(pairs["annotators"]) == ["ann · bob"]
    assert pairs["outcome n"][0] == 2 and pairs["kind n"][0] == 2 and pairs["step exact"][0] == 0.5
    auto = frame_with(at, "annotator")
    ann = auto[auto["annotator"] == "ann"].iloc[0]
    assert ann["n"] == 3 and ann["step exact"] == 0.667  # q00002's diagnosis says step 3
    cm = next(
        c.proto
        for c in at.get("vega_lite_chart")
        if json.loads(c.proto.spec).get("title") == ("Failure kind: ann (rows) vs the diagnosis")
    )
    cells = {(r.annotator, r.diagnosis): r.n for r in chart_rows(cm).itertuples()}
    assert cells == {
        ("bad_arguments", "bad_arguments"): 2,
        ("bad_arguments", "repeated_calls"): 1,
        ("repeated_calls", "bad_arguments"): 0,
        ("repeated_calls", "repeated_calls"): 0,
    }
    assert "Adjudicate (1 open)" in [p.proto.label for p in at.get("page_link")]


# ------------------------------------------------------------------ second opinion and adjudication


def test_second_opinion_is_blind_and_saves_under_my_name(two_runs):
    url, rid = two_runs["url"], two_runs["b"]
    tid = two_runs["ids_b"][("q00000", 1)]
    S.set_label(tid, "fail", failure_kind="bad_arguments", first_wrong_step=1, annotator="ann", store=url)
    assert S.second_opinion_queue(rid, "cy", store=url) == [tid]
    at = open_page("label", run=rid, second="true", annotator="cy")
    shown = texts(at)
    assert f"Trajectory {tid}" in shown and "1 trajectory waits for your second opinion" in shown
    assert "graded" not in shown and "by ann" not in shown and "bad\\_arguments" not in shown.split("Failure kind")[0]
    assert not [b for b in at.button if b.key == "lq-accept"]  # no proposal to accept
    assert at.selectbox(key=f"lq-kind-{tid}").value is None  # nothing preselected
    assert {at.button(key=k).proto.type for k in ("lq-pass", "lq-fail")} == {"secondary"}  # no hint either way
    at.button(key="lq-mode-3").click().run()
    words = S.annotator_labels([tid], store=url)[tid]
    assert words["cy"] == ("fail", "wrong_tool", None) and words["ann"][1] == "bad_arguments"
    assert any("No second opinion left" in s.value for s in at.success)


def test_adjudication_keeps_one_annotators_label_with_one_key(two_runs):
    url, rid = two_runs["url"], two_runs["b"]
    tid = two_runs["ids_b"][("q00002", 1)]
    S.set_label(tid, "fail", failure_kind="bad_arguments", first_wrong_step=1, annotator="ann", store=url)
    S.set_label(tid, "fail", failure_kind="repeated_calls", first_wrong_step=3, annotator="bob", store=url)
    at = open_page("adjudicate", run=rid)
    assert f"Trajectory {tid}" in texts(at)
    keep = {b.key: b for b in at.button if b.key and b.key.startswith("adj-keep-")}
    assert keep["adj-keep-2"].proto.shortcut == "2" and "bob" in keep["adj-keep-2"].label
    keep["adj-keep-2"].click().run()
    cur = next(lab for lab in S.current_labels(tid, store=url) if lab.step_idx is None)
    assert (cur.annotator, cur.outcome, cur.failure_kind, cur.first_wrong_step) == (
        "adjudicator",
        "fail",
        "repeated_calls",
        3,
    )
    assert any("No open disagreement" in s.value for s in at.success)


def test_annotator_names_and_arguments_are_shown_inert(two_runs):
    import re

    from appdata import XSS_IMG

    url, rid = two_runs["url"], two_runs["b"]
    tid = two_runs["ids_b"][("q00000", 1)]
    S.set_label(tid, "fail", failure_kind="bad_arguments", annotator="ann", store=url)
    S.set_label(tid, "fail", failure_kind=f"kind {XSS_IMG}", annotator=XSS_IMG, store=url)
    for at in (
        open_page("adjudicate", run=rid),
        open_page("compare", a=two_runs["a"], b=rid, case="q00000"),
        open_page("runs", run=rid, view="Agreement"),
    ):
        shown = [str(m.value) for m in list(at.markdown) + list(at.caption)]
        shown += [b.label for b in at.button] + [p.proto.label for p in at.get("page_link")]
        assert any("img src" in v for v in shown)  # the name is shown ...
        for v in shown:
            assert not re.search(r"(?<!\\)<", v), v  # ... with every < backslash-escaped


# ------------------------------------------------------------------ Trajectory


def test_trajectory_links_the_same_case_in_another_run_and_the_comparison(two_runs):
    a, b = two_runs["a"], two_runs["b"]
    tid_b, tid_a = two_runs["ids_b"][("q00000", 1)], two_runs["ids_a"][("q00000", 1)]
    at = open_page("trajectory", id=tid_b)
    links = {p.proto.label: p.proto for p in at.get("page_link")}
    same = links[f"Same case in run {a} (attempt 1, pass)"]
    assert same.page.endswith("trajectory") and f"id={tid_a}" in same.query_string
    comp = links["Compare the two side by side"]
    assert comp.page.endswith("compare") and f"a={a}&b={b}&case=q00000" in comp.query_string


LIGHT = """
import os, sys, tempfile
url = f"sqlite:///{tempfile.mkdtemp()}/light.sqlite"
os.environ["EVALRX_DATABASE_URL"], os.environ["EVALRX_NO_LOCAL_WORKER"] = url, "1"
sys.path.insert(0, "tests/e2e")
import evalrx.store as S
S.upgrade(url)
from appdata import fill_run
a, ids = fill_run(url, 4, seed=1, outcomes=["pass", "fail", "fail", "pass"])
b, _ = fill_run(url, 4, seed=2, outcomes=["fail", "pass", "fail", "pass"])
S.set_label(ids[1], "fail", failure_kind="wrong_tool", annotator="ann", store=url)
S.set_label(ids[1], "fail", failure_kind="bad_arguments", annotator="bob", store=url)
from streamlit.testing.v1 import AppTest
for view, query in [("compare", {"a": a, "b": b, "case": "q00000"}), ("runs", {"run": a, "view": "Reliability"}),
                    ("runs", {"run": a, "view": "Predictors"}), ("runs", {"run": a, "view": "Agreement"}),
                    ("adjudicate", {"run": a}), ("label", {"run": a, "second": "true", "annotator": "cy"})]:
    at = AppTest.from_file("app/main.py", default_timeout=60)
    at.switch_page(f"views/{view}.py")
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    assert not at.exception, (view, at.exception)
print("HEAVY", sorted(m for m in ("torch", "transformers", "openai", "vllm") if m in sys.modules))
"""


def test_run_level_pages_never_import_torch():
    import subprocess

    out = subprocess.run([sys.executable, "-c", LIGHT], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "HEAVY []" in out.stdout


def test_compare_does_not_count_a_config_version_or_a_default_runtime_setting_as_a_difference(store_url):
    """A row stored before configs were versioned kept the settings it was given (max_new_tokens 256, the
    default); one stored now keeps only those that differ and says its version: the same run, no difference."""
    from appdata import fill_run

    from evalrx.config import ModelConfig, RunConfig

    new = RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator"]).to_dict()
    assert "version" in new and not new["runtime"]
    old = {k: v for k, v in new.items() if k != "version"} | {"runtime": {"max_new_tokens": 256}}
    r1, _ = fill_run(store_url, 2, name="old row")
    r2, _ = fill_run(store_url, 2, name="new row")
    r3, _ = fill_run(store_url, 2, name="fewer tokens")
    for run_id, config in ((r1, old), (r2, new), (r3, old | {"runtime": {"max_new_tokens": 64}})):
        _set_config(store_url, run_id, **config)
    at = open_page("compare", a=r1, b=r2)
    assert "The two runs' configs are the same." in texts(at)
    at = open_page("compare", a=r3, b=r2)
    assert list(frame_with(at, "key")["key"]) == ["runtime\\.max\\_new\\_tokens"]  # Markdown-escaped
