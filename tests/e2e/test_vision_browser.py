"""A run of the demo VLM with its white-box analyses in a real worker, then its trajectories in Chromium: the
case picture, on a zoom case the zoomed picture the tool returned, both drawn from the store, and on a failed
case the pictures tinted by the attention the written value gave their patches."""

from __future__ import annotations

import pytest
from apphelpers import goto, main_text, open_turns, poll

import evalrx.store as S
from evalrx.demo.vision_data import VISION_TOOLS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def vision_run(app_env):
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import Worker, enqueue_run
    from evalrx.suites import load_cases

    url = app_env["EVALRX_DATABASE_URL"]
    store = S.connect(url)
    # Two zoom cases as trained, and one whose code is a digit longer than any in training (it fails).
    cases = load_cases("demo/vision_zoom")[:2] + load_cases("demo/vision_zoom_long")[:1]
    cfg = RunConfig(
        model=ModelConfig("evalrx-tiny-vl"),
        tools=list(VISION_TOOLS),
        max_turns=4,
        analyzers=["logit_lens", "tool_decision", "attention"],
    )
    rid = enqueue_run(cfg, cases, runtime={"max_new_tokens": 64}, store=store)
    Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    assert S.get_run(rid, store=store).n_done == 3
    return url, rid


def test_a_zoom_case_shows_the_case_picture_and_the_zoomed_one(app_server, vision_run, page):
    url, rid = vision_run
    rows = S.list_trajectories(run_id=rid, store=url).rows
    zoomed = [r for r in rows if S.step_pictures(r.id, store=url)]
    assert zoomed, "the model zoomed on neither case"
    tid = zoomed[0].id
    goto(page, f"{app_server.url}/trajectory?id={tid}")
    case_img = page.get_by_text("the case's picture")
    case_img.wait_for()
    shown = page.locator("[data-testid='stImage'] img")
    poll(
        lambda: shown.count() >= 2, timeout=15, what="the case picture and the zoomed one (the charts are pictures too)"
    )
    step = next(iter(S.step_pictures(tid, store=url)))
    page.get_by_text(f"picture 1 returned at step {step}").wait_for()
    for img in shown.all():
        assert img.evaluate("i => i.complete && i.naturalWidth > 0")
    assert "image_zoom" in main_text(page)


def test_a_failed_case_shows_where_its_answer_looked_in_both_pictures(app_server, vision_run, page):
    url, rid = vision_run
    failed = [r for r in S.list_trajectories(run_id=rid, store=url).rows if r.outcome == "fail"]
    assert failed, "the longer code was read right: pick a case the model fails"
    tid = failed[0].id
    stored = {a["analyzer"]: a for a in S.load_analyses(tid, store=url)}
    assert not stored["attention"]["meta"].get("error")
    assert [img["step"] for img in stored["attention"]["meta"]["images"]] == [0, 2]  # the case, then the zoom
    goto(page, f"{app_server.url}/trajectory?id={tid}")
    open_turns(page)  # each model turn's panels: only the diagnosed one opens by default
    page.get_by_text("Where it looked in the pictures").first.wait_for()
    # The answer turn comes after both pictures: each is drawn with its patches tinted, with its share.
    captions = page.get_by_text("of the token's attention")
    captions.first.wait_for()
    poll(
        lambda: captions.count() >= 3, timeout=15, what="the case picture before the zoom call; both before the answer"
    )
    heat = page.locator("[data-testid='stImage'] img")
    for img in heat.all():
        assert img.evaluate("i => i.complete && i.naturalWidth > 0")
    assert "picture of step 2" in main_text(page)
