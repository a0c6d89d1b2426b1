"""Helpers for browser tests: a real Streamlit server and Debian's Chromium driven by Playwright.

Playwright cannot download browsers here, so Chromium comes from Debian (`make test`
installs it). Missing Chromium is a failure, not a skip.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http_ok(url: str, timeout: float = 60.0, proc: "subprocess.Popen | None" = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def stop_server(proc: subprocess.Popen, log) -> None:
    """Stop a server process (killed when it does not exit within 10 s) and close its log."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


class AppServer:
    """A Streamlit server on loopback: the app (`app/main.py`), or another `script` (a benchmark's bare app)."""

    def __init__(self, env: dict, tmp: Path, script: "Path | None" = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / "streamlit.log", "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                str(script or ROOT / "app" / "main.py"),
                "--server.headless",
                "true",
                "--server.fileWatcherType",
                "none",
                "--server.port",
                str(self.port),
                "--server.address",
                "127.0.0.1",
                "--browser.gatherUsageStats",
                "false",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_http_ok(f"{self.url}/_stcore/health", proc=self.proc)
        except BaseException:  # a server that never came up is not left running
            self.proc.kill()
            self.proc.wait()
            raise

    def stop(self) -> None:
        stop_server(self.proc, self.log)


def wait_idle(page, timeout: float = 30_000) -> None:
    """Wait until Streamlit has finished running the script after an interaction."""
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=timeout)


def settle(page, quiet_ms: int = 400, timeout: float = 30_000) -> None:
    """Wait until the script has stayed idle for `quiet_ms` (a follow-up rerun would show as running)."""
    page.wait_for_function(
        """(quiet) => {
            const app = document.querySelector("[data-testid='stApp']");
            const idle = app && app.getAttribute("data-test-script-state") === "notRunning";
            const now = performance.now();
            if (!idle) { window.__evalrxIdleSince = null; return false; }
            if (!window.__evalrxIdleSince) window.__evalrxIdleSince = now;
            return now - window.__evalrxIdleSince >= quiet;
        }""",
        arg=quiet_ms,
        polling=50,
        timeout=timeout,
    )


def goto(page, url: str, timeout: float = 30_000) -> None:
    """Open a URL and wait until the app has rendered it and gone quiet."""
    page.goto(url)
    page.wait_for_selector("[data-testid='stMain'] h1", timeout=timeout)
    settle(page, timeout=timeout)


def poll(check, timeout: float = 30.0, every: float = 0.2, what: str = "condition"):
    """Call `check()` until it returns something truthy; return that (TimeoutError otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met within {timeout} s")
        time.sleep(every)


def click_dataframe_row(page, row: int, frame: int = 0) -> None:
    """Select row `row` (0-based) of a canvas-drawn st.dataframe by clicking its row marker."""
    grid = page.locator("[data-testid='stDataFrame']").nth(frame)
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    header, height = 35, 35  # Streamlit's default header and row heights
    page.mouse.click(box["x"] + 18, box["y"] + header + height * row + height / 2)


def open_listed(page, trajectory_id: "int | None" = None) -> None:
    """Open a trajectory from the Trajectories list by clicking its id (a page link, no rerun of the list);
    the first row's when no id is given."""
    row = page.locator(f".st-key-row-{trajectory_id}" if trajectory_id else "[class*='st-key-row-']").first
    row.scroll_into_view_if_needed()
    row.locator("[data-testid='stPageLink-NavLink']").first.click()


def model_turns(page):
    """The analysis section's expanders, one per model turn."""
    return page.locator("[data-testid='stExpander']").filter(has_text="Model turn at step")


def open_turns(page) -> None:
    """Open every model turn's panels (only the diagnosed turn's open by default)."""
    turns = model_turns(page)
    for i in range(turns.count()):
        details = turns.nth(i).locator("details").first
        if details.get_attribute("open") is None:
            details.locator("summary").click()
            body = details.locator("[data-testid='stExpanderDetails']")
            poll(lambda b=body: b.count() and b.inner_text().strip(), what="the opened turn's panels")
            settle(page)


def main_text(page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def press_until(page, key: str, locator, first_wait_ms: float = 8_000, timeout: float = 30_000) -> None:
    """Press `key` until `locator` shows: headless Chromium now and then drops a key under load.

    Only for keys whose effect is idempotent to check (navigation), never for labelling keys.
    """
    press(page, key)
    try:
        locator.wait_for(timeout=first_wait_ms)
    except Exception:  # the key was dropped: the page never left where it was
        press(page, key)
        locator.wait_for(timeout=timeout)


def press_label(page, key: str, locator, saved, first_wait_ms: float = 8_000, timeout: float = 30_000) -> None:
    """Press a labelling key until `locator` shows; pressed again only while `saved()` says no label was
    written (headless Chromium now and then drops a key under load; a label is never written twice)."""
    press(page, key)
    try:
        locator.wait_for(timeout=first_wait_ms)
    except Exception:
        if not saved():
            press(page, key)
        locator.wait_for(timeout=timeout)


def press(page, key: str) -> None:
    """Press a shortcut key the way a user does after reading the page: nothing focused, page quiet."""
    settle(page)
    page.bring_to_front()  # with several pages in one browser, keys go to the active one
    page.locator("[data-testid='stMain'] h1").first.click()  # focus the document, not a widget
    page.keyboard.press(key)
