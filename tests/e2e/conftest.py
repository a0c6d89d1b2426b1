"""Browser fixtures (see apphelpers.py): one Streamlit server per session, a fresh page per test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from apphelpers import CHROMIUM_ARGS, AppServer


@pytest.fixture(scope="session")
def app_env(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("app")
    env = dict(os.environ)
    env["EVALRX_DATABASE_URL"] = f"sqlite:///{tmp / 'evalrx.sqlite'}"
    env["HF_HUB_OFFLINE"] = "1"
    return env


@pytest.fixture(scope="session")
def app_server(app_env, tmp_path_factory):
    server = AppServer(app_env, tmp_path_factory.mktemp("applog"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or "/usr/bin/chromium"
    assert Path(exe).exists(), "Chromium is missing: run `make test` (it installs Debian's chromium)"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    yield pg
    ctx.close()

