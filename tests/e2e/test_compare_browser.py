"""The Compare page in a real Chromium: two stored runs where case 0 passes in A and fails in B because B
looks up other words; the regression is counted and listed, clicking it sets the two trajectories side
by side with the first divergence outlined and the changed argument highlighted; the view has its own
URL, and hostile arguments stay inert."""

from __future__ import annotations

import re

import pytest
from appdata import XSS, call_trajectory, fill_attempts, make_case
from apphelpers import click_dataframe_row, goto, main_text, poll

from evalrx.core import Diagnosis

pytestmark = pytest.mark.browser

QUERY_A, QUERY_B = "capital of France", "capital of Spain"


@pytest.fixture(scope="module")
def two_runs(app_env):
    """Run A then run B on cases cmp00000-cmp00003: 0 regresses (other lookup words), 1 passes in both,
    2 is fixed (B makes one more call), 3 fails in both with hostile arguments in B."""
    url = app_env["EVALRX_DATABASE_URL"]
    cases = [make_case(i, prefix="cmp") for i in range(4)]
    calc = ("calculator", {"expression": "6 * 7"})
    plan_a = [
        ([("lookup", {"query": QUERY_A, "limit": 1})], "pass"),
        ([calc], "pass"),
        ([calc], "fail"),
        ([("lookup", {"query": "plain words"})], "fail"),
    ]
    plan_b = [
        ([("lookup", {"query": QUERY_B, "limit": 1})], "fail"),
        ([calc], "pass"),
        ([calc, ("lookup", {"query": "check"})], "pass"),
        ([("lookup", {"query": XSS})], "fail"),
    ]

    def build(plan, name):
        def make(pos, attempt):
            calls, outcome = plan[pos]
            return call_trajectory(cases[pos], calls, outcome=outcome)

        def diagnose(pos, attempt):
            if plan[pos][1] != "fail":
                return None
            return [
                Diagnosis(
                    kind="bad_arguments",
                    first_wrong_step=1,
                    evidence={"text": "other arguments"},
                    confidence=0.9,
                    source="reference",
                )
            ]

        return fill_attempts(url, cases, make, name=name, diagnose=diagnose)

    run_a, _ = build(plan_a, "compare A")
    run_b, _ = build(plan_b, "compare B")
    return run_a, run_b


def test_a_regression_opens_aligned_with_the_first_divergence_and_the_changed_argument(app_server, two_runs, page):
    run_a, run_b = two_runs
    goto(page, f"{app_server.url}/compare?a={run_a}&b={run_b}")
    pickers = page.locator("[data-testid='stSelectbox']")
    shown = [
        pickers.nth(i).evaluate("e => e.innerText + ' ' + [...e.querySelectorAll('input')].map(i => i.value).join(' ')")
        for i in (0, 1)
    ]
    assert f"{run_a} · compare A · evalrx-tiny" in shown[0]  # a run by its name, not a bare id
    assert f"{run_b} · compare B · evalrx-tiny" in shown[1]
    regressions = page.locator("[data-testid='stMetric']", has_text="regressions")
    assert regressions.inner_text().split()[-1] == "1"
    assert page.locator("[data-testid='stMetric']", has_text="fixes").inner_text().split()[-1] == "1"
    assert "Cases that changed (2)" in main_text(page)

    click_dataframe_row(page, 0)  # the regression is listed first
    page.wait_for_url(re.compile(r"case=cmp00000"))
    first = page.locator(".st-key-cmp-first-divergence")
    first.wait_for()
    # the keyed container is on the page before the script has filled it
    poll(lambda: "first divergence" in first.inner_text(), timeout=10, what="the first divergence's text")
    # outlined in red (the page's style block may land a moment after the element)
    poll(
        lambda: first.evaluate("e => getComputedStyle(e).borderTopColor") == "rgb(221, 51, 51)",
        timeout=10,
        what="the first divergence's red outline",
    )
    changed = page.locator("[class*='st-key-cmp-argdiff-']")
    # the query on each side (`limit` is the same); drawn after the divergence card, in the same script run
    poll(lambda: changed.count() == 2, timeout=10, what="the changed argument on each side")
    left, right = changed.nth(0).inner_text(), changed.nth(1).inner_text()
    assert "query" in left and QUERY_A in left and QUERY_B in right and "changed" in right
    poll(
        lambda: changed.nth(0).evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(253, 235, 211)",
        timeout=10,
        what="the changed argument's highlight",
    )
    side_b = page.locator(".st-key-cmp-side-b").inner_text()
    assert "graded fail" in side_b and "bad_arguments" in side_b and "first wrong step 1" in side_b
    assert "graded pass" in page.locator(".st-key-cmp-side-a").inner_text()


def test_the_side_by_side_has_its_own_url_and_hostile_arguments_stay_inert(app_server, two_runs, page):
    run_a, run_b = two_runs
    page.on("dialog", lambda d: d.dismiss())
    goto(page, f"{app_server.url}/compare?a={run_a}&b={run_b}&case=cmp00002")
    page.locator(".st-key-cmp-first-divergence").wait_for()
    assert "only in B" in page.locator(".st-key-cmp-first-divergence").inner_text()  # B's one more call
    assert "they part at row 2 of 3" in main_text(page)

    goto(page, f"{app_server.url}/compare?a={run_a}&b={run_b}&case=cmp00003")
    changed = page.locator("[class*='st-key-cmp-argdiff-b-']")
    changed.wait_for()
    assert "<script>" in changed.inner_text()  # shown as text ...
    assert page.evaluate("() => window.__evalrx_xss") is None  # ... never run
    assert page.locator("[data-testid='stMain'] a[href^='javascript']").count() == 0


@pytest.fixture(scope="module")
def demo_runs(app_env):
    """Two real runs of the bundled demo model on six two-step cases: 4 model turns (A) and 2 (B)."""
    import evalrx.store as S
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import Worker, enqueue_run
    from evalrx.suites import load_cases

    store = S.connect(app_env["EVALRX_DATABASE_URL"])
    cases = load_cases("demo/two_step")[:6]
    ids = [
        enqueue_run(
            RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"], max_turns=turns),
            cases,
            name=f"demo, {turns} turns",
            store=store,
        )
        for turns in (4, 2)
    ]
    Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    return ids


def test_two_demo_runs_a_regression_from_fewer_turns(app_server, demo_runs, page):
    run_a, run_b = demo_runs
    goto(page, f"{app_server.url}/compare?a={run_a}&b={run_b}")
    assert page.locator("[data-testid='stMetric']", has_text="regressions").inner_text().split()[-1] == "3"
    assert page.locator("[data-testid='stMetric']", has_text="fixes").inner_text().split()[-1] == "0"
    click_dataframe_row(page, 0)
    page.wait_for_url(re.compile(r"case=two_step-00"))
    first = page.locator(".st-key-cmp-first-divergence")
    first.wait_for()
    # With two turns B looks the value up and calls the calculator, then runs out of turns: A's answer is
    # the first step it lacks.
    assert "first divergence" in first.inner_text() and "only in A" in first.inner_text()
    assert "graded fail" in page.locator(".st-key-cmp-side-b").inner_text()
    assert "graded pass" in page.locator(".st-key-cmp-side-a").inner_text()
