"""Helpers for browser tests: a real Streamlit server and Debian's Chromium driven by Playwright.

Playwright cannot download browsers here, so Chromium comes from Debian (`make test`
installs it). Missing Chromium is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil
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


class AppServer:
    def __init__(self, env: dict, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / "streamlit.log", "w")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"),
                "--server.headless", "true", "--server.fileWatcherType", "none",
                "--server.port", str(self.port), "--server.address", "127.0.0.1",
                "--browser.gatherUsageStats", "false",
            ],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_http_ok(f"{self.url}/_stcore/health", proc=self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def wait_idle(page, timeout: float = 30_000) -> None:
    """Wait until Streamlit has finished running the script after an interaction."""
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=timeout)
