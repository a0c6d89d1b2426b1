"""Browser test of the analysis panels: a failed demo-model trajectory, analysed by the worker,
shows its lens, tool-decision and attention panels in Chromium; an analysis requested from
the page is run by a worker and reaches "done"; the list filters by tool margin."""

from __future__ import annotations

import io

import numpy as np
import pytest
from apphelpers import goto, main_text, model_turns, open_turns, poll, settle, wait_idle

import evalrx.store as S


@pytest.fixture(scope="module")
def analysed(app_env):
    """One failed case of the demo model, run through the worker with the white-box analyzers."""
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import Worker, enqueue_run
    from evalrx.suites import load_cases

    store = S.connect(app_env["EVALRX_DATABASE_URL"])
    # The model finds the home city but garbles its name when copying the observation (misread).
    case = next(c for c in load_cases("demo/lookup_easy") if c.id == "lookup_easy-015")
    cfg = RunConfig(
        model=ModelConfig("evalrx-tiny"),
        tools=["calculator", "lookup"],
        analyzers=["logit_lens", "tool_decision", "attention", "token_uncertainty"],
    )
    run_id = enqueue_run(cfg, [case], name="analysed demo", store=store)
    Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    row = S.list_trajectories(run_id=run_id, store=store).rows[0]
    assert row.outcome == "fail"  # the demo model gets this case wrong (a stored failed trajectory)
    return store, run_id, row.id


DRAWN = "[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg"


def test_failed_trajectory_shows_lens_tool_decision_and_attention(app_server, analysed, page):
    store, run_id, tid = analysed
    goto(page, f"{app_server.url}/trajectory?id={tid}")
    open_turns(page)
    main = page.locator("[data-testid='stMain']")
    for heading in ("Logit lens", "Tool decision", "Attention by segment", "Generated tokens"):
        main.get_by_text(heading, exact=False).first.wait_for()  # panels draw after the steps (a fragment)
    charts = page.locator("[data-testid='stVegaLiteChart']")
    poll(lambda: charts.count() >= 3, what="lens, tool-decision and attention charts")
    # Vega draws each chart into a canvas or svg once its data is in.
    poll(lambda: page.locator(DRAWN).count() >= 3, what="charts drawn")
    text = main_text(page)
    assert "margin" in text and "calculator" in text
    assert page.locator(".evalrx-uncertainty span").count() > 5  # generated tokens, one span each
    # An argument's caption names the token of the value its margin was measured at, not the whole value.
    (rec,) = S.load_analyses(tid, "tool_decision", store=store)
    arg = next(d for d in rec["meta"]["decisions"] if d["kind"] == "arg_value")
    token = arg["token"].replace(" ", "·")
    assert f"at token {arg['piece'] + 1} “{token}” of" in text and f"chosen “{token}” vs" in text


def _heatmap_rows(png: bytes) -> int:
    """Pixel rows of a chart screenshot's left half that hold colour: the heatmap's drawn height (axes are grey)."""
    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int16)
    left = rgb[:, : rgb.shape[1] // 2]  # the colour legend sits on the right
    return int(((left.max(axis=2) - left.min(axis=2)) > 60).any(axis=1).sum())


def test_lens_heatmap_is_drawn_tall_enough_to_read(app_server, analysed, page):
    store, run_id, tid = analysed
    goto(page, f"{app_server.url}/trajectory?id={tid}")
    main = page.locator("[data-testid='stMain']")
    heading = main.get_by_text("Logit lens", exact=False).first
    chart = heading.locator("xpath=following::*[@data-testid='stVegaLiteChart'][1]")
    drawn = chart.locator("canvas.marks, svg.marks").first
    poll(lambda: drawn.count() and drawn.bounding_box(), what="lens heatmap drawn")
    chart.scroll_into_view_if_needed()
    assert drawn.bounding_box()["height"] >= 100
    # The plot itself, not only its canvas: rotated labels once squeezed the cells to one pixel row.
    assert poll(lambda: _heatmap_rows(chart.screenshot()) >= 100, what="heatmap cells 100 px tall")
    open_turns(page)
    text = main_text(page)
    assert "bright at the top only" in text and "a bright column is what the model was reading" in text
    assert "vs alternative" in text  # the tool decision names what it was chosen over


def test_requesting_an_analysis_from_the_page_reaches_done(app_server, analysed, page):
    from evalrx.runner import Worker
    from evalrx.store import analyses as A

    store, run_id, tid = analysed
    goto(page, f"{app_server.url}/trajectory?id={tid}")
    page.get_by_role("button", name="Request analysis").click()
    wait_idle(page)
    poll(lambda: "queued" in main_text(page), what="request shown as queued")
    req = A.requests_for(tid, store=store)[0]
    assert req["status"] == "queued"
    # The app's tests run with the local worker off: serve the queue here, as `evalrx worker` would.
    Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    assert A.get_request(req["id"], store=store)["status"] == "done"
    poll(
        lambda: f"Analysis request {req['id']}: done" in main_text(page),
        timeout=30,
        what="the page shows the request done",
    )
    settle(page)
    open_turns(page)
    poll(
        lambda: page.locator("[data-testid='stVegaLiteChart']").count() >= 3,
        timeout=15,
        what="three charts drawn",
    )


def test_a_model_turn_builds_its_panels_only_when_opened(app_server, analysed, page):
    """The steps come first; of the panels only the diagnosed turn's are built with the page, the others
    when their turn is opened (a page never waits on charts it does not show)."""
    store, run_id, tid = analysed
    goto(page, f"{app_server.url}/trajectory?id={tid}")
    poll(lambda: page.locator("[class*='st-key-step-']").count() >= 3, timeout=15, what="the steps are on the page")
    turns = model_turns(page)
    is_open = [turns.nth(i).locator("details").first.get_attribute("open") is not None for i in range(turns.count())]
    assert len(is_open) >= 2 and is_open.count(True) == 1, is_open
    closed = turns.nth(is_open.index(False))
    assert closed.locator("[data-testid='stVegaLiteChart']").count() == 0  # nothing built for it
    closed.locator("summary").first.click()
    poll(lambda: closed.locator(DRAWN).count() >= 1, what="the opened turn's charts drawn")


def test_trajectories_filter_by_tool_margin(app_server, analysed, page):
    store, run_id, tid = analysed
    goto(page, f"{app_server.url}/trajectories?run={run_id}&margin=1000.0")
    assert f"1 trajectory · page 1 of 1 · run {run_id}, tool margin < 1000" in main_text(page).replace("**", "")
    goto(page, f"{app_server.url}/trajectories?run={run_id}&margin=0.0")  # the greedy choice has margin >= 0
    assert "No trajectory matches" in main_text(page)
