"""Run a snippet in a fresh Python with the network off (sockets refuse, the hub is offline) and
return the JSON object it prints last: a model that loads this way needs nothing from outside."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_NO_NETWORK = r"""
import socket

def _no_network(*args, **kwargs):
    raise RuntimeError("network access attempted")

socket.socket.connect = _no_network
socket.create_connection = _no_network
"""


def run_offline(body: str, timeout: int = 300) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME="/nonexistent-hf-home")
    proc = subprocess.run(
        [sys.executable, "-c", _NO_NETWORK + body], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
