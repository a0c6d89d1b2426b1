"""The pages in a real Chromium over a store with known data: URLs, row clicks, keyboard
labelling, reloads, and hostile model output staying inert."""

from __future__ import annotations

import re

import pytest
from apphelpers import goto, main_text, open_listed, poll, press, press_label, press_until, settle

import evalrx.store as S

pytestmark = pytest.mark.browser


def current(url: str, tid: int):
    return next((l for l in S.current_labels(tid, store=url) if l.step_idx is None), None)


def test_trajectory_opens_by_url_with_steps_and_charts(app_server, seeded, page):
    tid = seeded["ids"][1]
    detail = S.get_trajectory(tid, store=seeded["url"])
    goto(page, f"{app_server.url}/trajectory?id={tid}")
    page.get_by_role("heading", name=f"Trajectory {tid}").wait_for()
    steps = page.locator("[class*='st-key-step-']")
    poll(
        lambda: steps.count() == len(detail.trajectory.steps),
        timeout=15,
        what="a card for each step",
    )
    # Both charts are drawn: SVG pictures the browser decoded.
    for name in ("latency waterfall", "tokens per model turn"):
        chart = page.get_by_role("img", name=name)
        chart.wait_for()
        poll(lambda c=chart: c.evaluate("i => i.complete && i.naturalWidth > 100"), what=f"{name} drawn")
    text = main_text(page)
    assert detail.row.goal in text
    # A private research tool: Streamlit's "Deploy" is not offered (.streamlit/config.toml's toolbarMode).
    assert page.get_by_role("button", name="Deploy").count() == 0
    # The label panel's buttons are shown whole, the longest failure kind too (a fixed grid cut "misread_obs…").
    poll(
        lambda: page.locator("[class*='st-key-tl-mode-'] button").count() >= 9,
        timeout=15,
        what="the step-view buttons",
    )
    cut = page.locator("[class*='st-key-tl-'] button").evaluate_all(
        "bs => bs.filter(b => [b, ...b.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1))"
        ".map(b => b.innerText)"
    )
    assert cut == []


def test_row_click_opens_the_trajectory_and_keys_walk_the_filter(app_server, seeded, page):
    url = seeded["url"]
    fails = S.list_trajectories(run_id=seeded["run"], outcome="fail", store=url).rows
    goto(page, f"{app_server.url}/trajectories?run={seeded['run']}&outcome=fail")
    assert f"{len(fails)} trajectories" in main_text(page).replace("**", "")
    open_listed(page, fails[1].id)
    page.wait_for_url(re.compile(rf"/trajectory\?id={fails[1].id}\b"))
    page.get_by_role("heading", name=f"Trajectory {fails[1].id}").wait_for()
    press_until(page, "j", page.get_by_role("heading", name=f"Trajectory {fails[2].id}"))  # next in the filter
    assert "in_outcome=fail" in page.url
    press_until(page, "k", page.get_by_role("heading", name=f"Trajectory {fails[1].id}"))


def test_filter_lives_in_the_url_and_survives_reload(app_server, seeded, page):
    goto(page, f"{app_server.url}/trajectories?run={seeded['run']}")
    page.get_by_text("24 trajectories").wait_for()
    page.get_by_label("Grade").click()
    page.get_by_role("option", name="pass", exact=True).click()
    page.wait_for_url(re.compile(r"outcome=pass"))
    page.get_by_text("8 trajectories").wait_for()
    page.reload()
    settle(page)
    page.get_by_text("8 trajectories").wait_for()


def test_the_page_size_is_the_users_and_lives_in_the_url(app_server, seeded, page):
    total = S.list_trajectories(with_total=True, limit=1, store=seeded["url"]).total
    assert 25 < total <= 50
    goto(page, f"{app_server.url}/trajectories?per=25")
    page.get_by_text(f"{total} trajectories · page 1 of 2").wait_for()
    page.get_by_label("Rows a page").click()
    page.get_by_role("option", name="200", exact=True).click()
    page.wait_for_url(re.compile(r"per=200"))
    page.get_by_text(f"{total} trajectories · page 1 of 1").wait_for()
    # A page past the end (an old link) opens the last page, the page field saying so.
    goto(page, f"{app_server.url}/trajectories?per=25&page=99")
    page.get_by_text(f"{total} trajectories · page 2 of 2").wait_for()
    assert page.get_by_role("spinbutton", name="Page").input_value() == "2"


def test_label_queue_takes_one_or_two_keys_and_labels_survive_reload(app_server, seeded, page):
    url, ids = seeded["url"], seeded["label_ids"]
    goto(page, f"{app_server.url}/label?run={seeded['label_run']}&annotator=ana")
    page.get_by_role("heading", name=f"Trajectory {ids[0]}").wait_for()
    # One key: fail with the kind bound to 3.
    press_label(page, "3", page.get_by_role("heading", name=f"Trajectory {ids[1]}"), lambda: current(url, ids[0]))
    lab = poll(lambda: current(url, ids[0]), what="label saved")
    assert (lab.outcome, lab.failure_kind, lab.annotator) == ("fail", "wrong_tool", "ana")
    # One key: pass.
    press_label(page, "p", page.get_by_role("heading", name=f"Trajectory {ids[2]}"), lambda: current(url, ids[1]))
    assert poll(lambda: current(url, ids[1])).outcome == "pass"
    # Two keys: mark the first wrong step (W), then fail with the kind bound to 1.
    first_actor = next(s.idx for s in S.get_trajectory(ids[2], store=url).trajectory.steps if s.role.value == "actor")
    press(page, "w")
    page.locator(f".st-key-step-{first_actor}", has_text="first wrong step").wait_for()  # the timeline marks it
    press_label(page, "1", page.get_by_role("heading", name=f"Trajectory {ids[3]}"), lambda: current(url, ids[2]))
    lab = poll(lambda: current(url, ids[2]))
    assert (lab.outcome, lab.failure_kind, lab.first_wrong_step) == ("fail", "bad_arguments", first_actor)
    # Reload: the session is gone, the labels are in the store and the queue moves past them.
    page.reload()
    settle(page)
    page.get_by_role("heading", name=f"Trajectory {ids[3]}").wait_for()
    goto(page, f"{app_server.url}/trajectory?id={ids[0]}")
    page.get_by_text("fail · wrong_tool").first.wait_for()
    assert "by ana" in main_text(page)


def test_hostile_model_output_is_inert(app_server, seeded, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    for path in (
        f"/trajectory?id={seeded['xss']}",
        f"/trajectories?run={seeded['xss_run']}",
        f"/?run={seeded['xss_run']}",
        f"/label?run={seeded['xss_run']}",
    ):
        goto(page, app_server.url + path)
        page.wait_for_timeout(500)  # time for any injected handler to fire
        assert dialogs == [], (path, dialogs)
        assert page.evaluate("typeof window.__evalrx_xss") == "undefined", path
        # No element came from the model's markup: no injected <img src=x>, no script with our marker.
        assert page.locator("img[src='x']").count() == 0, path
        assert page.evaluate("[...document.scripts].some(s => s.textContent.includes('__evalrx_xss'))") is False, path
        assert page.locator("a[href^='javascript']").count() == 0, path
    # The text is shown literally on the trajectory page.
    goto(page, f"{app_server.url}/trajectory?id={seeded['xss']}")
    text = main_text(page)
    assert "<script>window.__evalrx_xss = 1; alert('xss')</script>" in text
    assert "<img src=x onerror=" in text and ":red[red]" in text


def test_uploaded_case_file_is_validated_inline(app_server, page, tmp_path):
    bad = tmp_path / "mine.jsonl"
    bad.write_text('{"prompt": "2+2?", "expected": 4}\n{"prompt": "no closing brace"\n')
    good = tmp_path / "good.jsonl"
    good.write_text(
        '{"prompt": "2+2?", "expected": 4}\n{"prompt": "3*3?", "expected": 9, "grader": {"kind": "numeric"}}\n'
    )
    goto(page, f"{app_server.url}/new")
    page.get_by_text("Upload a case file").click()
    settle(page)
    page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(str(bad))
    page.get_by_text("mine.jsonl:2: bad JSON").wait_for()
    assert "/tmp" not in page.locator("[data-testid='stAlert']").inner_text()  # names the user's file, not our copy
    page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(str(good))
    page.get_by_text("2 cases, all valid.").wait_for()


def test_a_hub_model_without_its_weights_is_said_before_launch_with_the_local_weights_field(
    app_server, app_env, page, monkeypatch
):
    """The server runs with HF_HUB_OFFLINE: a hub model not in the cache is said at once, in one line that
    points at the form's Local weights directory; Launch queues nothing; a directory there clears it."""
    from evalrx.models.checkpoints import locate_checkpoint
    from evalrx.specs import DEMO_MODEL_DIR, REGISTRY

    def lacking(repo) -> bool:
        try:
            locate_checkpoint(repo)
        except FileNotFoundError:
            return True
        return False

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as the server has it, so this process sees what it sees
    key = next(k for k, s in sorted(REGISTRY.items()) if s.hf_repo and not s.weights_package and lacking(s.hf_repo))
    repo = REGISTRY[key].hf_repo
    url = app_env["EVALRX_DATABASE_URL"]
    before = len(S.list_runs(store=url))
    goto(page, f"{app_server.url}/new")
    box = page.get_by_role("combobox", name="Model")
    box.click()
    box.press_sequentially(key)
    page.get_by_role("option", name=key, exact=True).click()
    alert = page.locator("[data-testid='stAlert']", has_text=repo)
    alert.wait_for()
    said = alert.inner_text().strip()
    assert "\n" not in said and "Local weights directory, under Advanced" in said and "evalrx.load" not in said
    page.get_by_role("button", name="Launch run").click()
    settle(page)
    assert page.get_by_role("heading", name="New run").is_visible()  # not sent on to Runs
    assert len(S.list_runs(store=url)) == before
    page.get_by_text("Advanced", exact=True).click()
    field = page.get_by_label("Local weights directory", exact=True)
    field.fill(DEMO_MODEL_DIR)
    field.press("Tab")
    poll(lambda: page.locator("[data-testid='stAlert']", has_text=repo).count() == 0, what="the line to clear")


def test_the_trajectory_page_queues_a_judge_for_that_trajectory_with_its_budget(app_server, seeded, page):
    tid, run = seeded["ids"][2], seeded["run"]
    goto(page, f"{app_server.url}/trajectory?id={tid}")
    page.get_by_text("Ask a judge about this trajectory").click()
    page.get_by_label("Judge model spec").fill("gpt-4o-mini")
    page.get_by_label("Base URL (api)").fill("http://127.0.0.1:9/v1")
    page.get_by_role("spinbutton", name="Answer tokens at most").fill("64")
    page.get_by_role("spinbutton", name="Answer tokens at most").press("Enter")
    settle(page)
    page.get_by_role("button", name="Estimate the cost").click()
    page.get_by_role("button", name="Queue the judge for 1 trajectory").click()
    settle(page)
    job = poll(
        lambda: next(
            (j for j in S.list_judge_jobs(run_id=run, store=seeded["url"]) if j.trajectory_ids == [tid]), None
        ),
        what="a judge job for this one trajectory",
    )
    assert job.spec == "gpt-4o-mini" and job.options.get("max_new_tokens") == 64
    page.get_by_text(f"Judge job {job.id}", exact=True).wait_for()  # the page follows the job it queued
