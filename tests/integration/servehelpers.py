"""Start `evalrx serve` as a real subprocess on a free loopback port, for the api-backend tests."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120


def _read_lines(stream, out: "queue.Queue[str]") -> None:
    for line in iter(stream.readline, ""):
        out.put(line)
    out.put("")  # EOF marker: the process ended


def get_json(url: str, path: str):
    """GET a path beside the /v1 base URL; (status, parsed JSON)."""
    try:
        with urllib.request.urlopen(url.rsplit("/v1", 1)[0] + path, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@contextlib.contextmanager
def serving(spec: str, log: Path, *, checkpoint: Optional[str] = None, max_new_tokens: int = 64) -> Iterator[str]:
    """Run `python -m evalrx.cli serve` until the block ends; yield its base URL (…/v1).

    Fails (AssertionError) with the server's stderr when it does not come up, and when it
    does not shut down cleanly on SIGTERM.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    cmd = [
        sys.executable,
        "-m",
        "evalrx.cli",
        "serve",
        "--spec",
        spec,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--max-new-tokens",
        str(max_new_tokens),
        "--device",
        "cpu",
        "--quiet",
    ]
    if checkpoint:
        cmd += ["--checkpoint", str(checkpoint)]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        url = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while url is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"evalrx serve printed no ready line in {START_TIMEOUT_S}s:\n{log.read_text()[-3000:]}"
                ) from None
            if line == "":
                raise AssertionError(f"evalrx serve exited with {proc.wait()}:\n{log.read_text()[-3000:]}")
            if line.startswith(f"evalrx serve: {spec} on http://127.0.0.1:"):
                url = line.rsplit(" on ", 1)[1].strip()
        assert url.endswith("/v1")
        assert get_json(url, "/health") == (200, {"status": "ok"})
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"server did not shut down cleanly on SIGTERM ({proc.returncode})"
