"""Browser fixtures (see apphelpers.py): one Streamlit server per session, a fresh page per test.

`app_server` serves an upgraded store that tests fill with `seeded` (workers off: the
pages are tested against known data). `fresh_app` (test_app_flow.py) is a second server
on an empty store with the local worker on, for the new-user flow.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from apphelpers import CHROMIUM_ARGS, AppServer


@pytest.fixture(scope="session")
def app_env(tmp_path_factory) -> dict:
    import evalrx.store as S

    tmp = tmp_path_factory.mktemp("app")
    env = dict(os.environ)
    env["EVALRX_DATABASE_URL"] = f"sqlite:///{tmp / 'evalrx.sqlite'}"
    env["EVALRX_NO_LOCAL_WORKER"] = "1"  # these tests drive the pages over known data
    env["HF_HUB_OFFLINE"] = "1"
    S.upgrade(env["EVALRX_DATABASE_URL"])
    return env


@pytest.fixture(scope="session")
def app_server(app_env, tmp_path_factory):
    server = AppServer(app_env, tmp_path_factory.mktemp("applog"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seeded(app_env) -> dict:
    """A finished run of 24 trajectories with known grades, and a run with one hostile trajectory."""
    from appdata import add_xss_run, fill_run

    url = app_env["EVALRX_DATABASE_URL"]
    outcomes = ["fail" if i % 3 else "pass" for i in range(24)]
    run_id, ids = fill_run(url, 24, seed=7, name="seeded run", outcomes=outcomes)
    label_run, label_ids = fill_run(
        url, 6, seed=8, name="label run", prefix="l", outcomes=["fail", "pass", "fail", "fail", "pass", "fail"]
    )
    xss_run, xss_id = add_xss_run(url)
    return {
        "url": url,
        "run": run_id,
        "ids": ids,
        "outcomes": outcomes,
        "label_run": label_run,
        "label_ids": label_ids,
        "xss_run": xss_run,
        "xss": xss_id,
    }


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or "/usr/bin/chromium"
    assert Path(exe).exists(), "Chromium is missing: run `make test` (it installs Debian's chromium)"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.evalrx_failed = report.failed


@pytest.fixture
def page(browser, request, tmp_path):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    yield pg
    if getattr(request.node, "evalrx_failed", False):  # keep what the browser showed, for the report
        shot = tmp_path / "failure.png"
        try:
            pg.screenshot(path=str(shot))
            print(f"\nscreenshot of the failure: {shot} (page {pg.url})")
        except Exception as exc:  # the page may be gone
            print(f"\nno screenshot: {exc}")
    ctx.close()
