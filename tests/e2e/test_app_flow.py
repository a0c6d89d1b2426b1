"""What a new user does, in a real Chromium against a real worker the app starts itself:
fresh store -> create schema -> New run -> watch it finish -> open a failure -> label it
from the keyboard -> reload; and cancel a running run.

The bundled demo model is used when its weights are there; until then a tiny random
Qwen2 checkpoint stands in through the New run page's "Local weights directory".
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from apphelpers import AppServer, main_text, open_listed, poll, press, settle

import evalrx.store as S
from evalrx.specs import DEMO_MODEL_DIR

pytestmark = [pytest.mark.browser, pytest.mark.slow]
RUN_TIMEOUT_S = 300  # model load on a busy 2-core machine plus the cases


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> "str | None":
    """None for the bundled demo model, else a tiny random checkpoint directory."""
    if (Path(DEMO_MODEL_DIR) / "config.json").exists():
        return None
    from tiny_models import save_tiny_checkpoint

    return str(save_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt"))


@pytest.fixture(scope="module")
def fresh_app(tmp_path_factory):
    """A server on an empty SQLite file (no schema) with the local worker on."""
    tmp = tmp_path_factory.mktemp("fresh")
    url = f"sqlite:///{tmp / 'fresh.sqlite'}"
    env = dict(os.environ, EVALRX_DATABASE_URL=url, HF_HUB_OFFLINE="1")
    env.pop("EVALRX_NO_LOCAL_WORKER", None)
    server = AppServer(env, tmp)
    yield server, url
    server.stop()
    _stop_workers(url)


def _stop_workers(url: str) -> None:
    """Stop every worker the app started on this store (each leads its own process group)."""
    from sqlalchemy import select

    from evalrx.store import schema as t

    try:
        with S.connect(url).read() as s:
            pids = [p for (p,) in s.execute(select(t.Worker.pid))]
    except Exception:
        return
    for pid in pids:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(2)
    S.forget(url)


def _launch(page, base: str, *, suite: str, limit: int, max_turns: int, checkpoint: "str | None", name: str) -> None:
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="New run").click()
    page.get_by_role("heading", name="New run").wait_for()
    settle(page)
    assert page.get_by_role("combobox", name="Model").input_value() == "evalrx-tiny"  # the demo is preselected
    box = page.get_by_role("combobox", name="Suite")
    box.click()
    box.press_sequentially(suite)  # the list is long (BFCL's categories too) and drawn lazily: filter it
    page.get_by_role("option", name=suite, exact=True).click()
    settle(page)
    for label, value in (
        ("Run only the first N cases (0 = all)", limit),
        ("Max model turns per case", max_turns),
        ("Run name", name),
    ):
        box = page.get_by_label(label, exact=True)
        box.fill(str(value))
        box.press("Tab")
        settle(page)
    if checkpoint:
        page.get_by_text("Advanced").click()
        for label, value in (("Local weights directory", checkpoint), ("Max new tokens per model turn", 24)):
            box = page.get_by_label(label, exact=True)
            box.fill(str(value))
            box.press("Tab")
            settle(page)
    page.get_by_role("button", name="Launch run").click()
    page.get_by_role("heading", name="Runs", exact=True).wait_for()


def _run_status(page) -> str:
    """The status metric of the run shown in the details section."""
    label = page.locator("[data-testid='stMetricLabel']", has_text=re.compile(r"^\s*status\s*$"))
    metric = page.locator("[data-testid='stMetric']", has=label)
    return metric.first.locator("[data-testid='stMetricValue']").inner_text() if metric.count() else ""


def test_new_user_launches_watches_opens_a_failure_and_labels_it(fresh_app, checkpoint, page):
    server, url = fresh_app
    page.goto(server.url)
    page.get_by_role("button", name="Create the schema now").click()
    page.get_by_text("No runs yet").wait_for()
    settle(page)
    # The app started one local worker; it shows in the sidebar.
    poll(lambda: S.alive_workers(store=url), timeout=30, what="a local worker")

    _launch(page, server.url, suite="demo/two_step", limit=3, max_turns=2, checkpoint=checkpoint, name="first run")
    (run,) = S.list_runs(store=url)
    assert (run.n_cases, run.spec_key, run.backend) == (3, "evalrx-tiny", "hf_local")
    # Live progress: no reload; the page polls while the run is active and settles when done.
    seen = set()

    def finished():
        seen.add(_run_status(page))
        return _run_status(page) == "done"

    poll(finished, timeout=RUN_TIMEOUT_S, every=0.5, what="the run to finish on the Runs page")
    assert seen & {"queued", "running"}, seen  # it was shown while still going
    assert "3/3" in main_text(page)

    settle(page)  # the fragment's last rerun can leave a stale copy of the run's links for a moment
    page.get_by_role("link", name="Failures").first.click()
    page.get_by_role("heading", name="Trajectories").wait_for()
    settle(page)
    fails = S.list_trajectories(run_id=run.id, outcome="fail", store=url).rows
    assert fails, "two-step questions in two turns should fail at least once"
    open_listed(page, fails[0].id)
    page.get_by_role("heading", name=f"Trajectory {fails[0].id}").wait_for()
    settle(page)
    detail = S.get_trajectory(fails[0].id, store=url)
    poll(
        lambda: page.locator("[class*='st-key-step-']").count() == len(detail.trajectory.steps),
        timeout=15,
        what="a card for each step",
    )
    page.get_by_role("img", name="latency waterfall").wait_for()

    top = S.get_diagnoses(fails[0].id, store=url)[0]  # the worker diagnosed it
    assert "Why it failed" in main_text(page) and top.kind in main_text(page)
    # A label says who gave it: the form asks for a name before it saves one.
    ask = page.get_by_text("Type your name in Annotator")
    ask.first.wait_for()
    name = page.get_by_label("Annotator")
    name.fill("newcomer")
    name.evaluate("e => e.blur()")  # a text field commits on blur
    ask.first.wait_for(state="detached")
    press(page, "Enter")  # accept the proposed kind and first wrong step
    page.get_by_text(f"fail · {top.kind}").first.wait_for()
    page.reload()
    page.get_by_role("heading", name=f"Trajectory {fails[0].id}").wait_for()
    page.get_by_text(f"fail · {top.kind}").first.wait_for()
    (lab,) = S.label_history(fails[0].id, store=url)
    assert (lab.outcome, lab.failure_kind, lab.first_wrong_step, lab.annotator) == (
        "fail",
        top.kind,
        top.first_wrong_step,
        "newcomer",
    )


def test_cancel_a_running_run(fresh_app, checkpoint, page):
    server, url = fresh_app
    page.goto(server.url)  # Runs is the default page, served at /
    page.get_by_role("heading", name="Runs", exact=True).wait_for()
    settle(page)
    _launch(page, server.url, suite="demo", limit=0, max_turns=2, checkpoint=checkpoint, name="long run")
    run = S.list_runs(store=url)[0]
    assert run.name == "long run" and run.n_cases > 100
    card = page.locator(f".st-key-live-{run.id}")
    poll(lambda: S.get_run(run.id, store=url).n_done >= 1, timeout=RUN_TIMEOUT_S, what="the first case to finish")
    card.get_by_role("button", name="Cancel").click()
    poll(lambda: _run_status(page) == "cancelled", timeout=120, every=0.5, what="the run to show cancelled")
    after = S.get_run(run.id, store=url)
    assert after.status == "cancelled" and after.n_done < after.n_cases
    assert card.count() == 0  # no longer in progress
