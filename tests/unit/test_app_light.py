"""The app process must never import torch or a backend runtime, on any page."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, sys, tempfile
tmp = tempfile.mkdtemp()
url = f"sqlite:///{tmp}/light.sqlite"
os.environ["EVALRX_DATABASE_URL"] = url
os.environ["EVALRX_NO_LOCAL_WORKER"] = "1"
sys.path.insert(0, "tests/e2e")
import evalrx.store as S
S.upgrade(url)
from appdata import add_xss_run, fill_run
run_id, ids = fill_run(url, 5)
from streamlit.testing.v1 import AppTest
import evalrx.runner  # the app's enqueue/ensure_worker import path
seen = []
for view, query in [("runs", {}), ("new_run", {}), ("trajectories", {"outcome": "fail"}),
                    ("trajectory", {"id": ids[0]}), ("label", {}), ("dashboard", {}), ("models", {})]:
    at = AppTest.from_file("app/main.py", default_timeout=60).run()
    at.switch_page(f"views/{view}.py")
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    assert not at.exception, (view, at.exception)
    seen.append(at.title[0].value)
print("TITLES", seen)
heavy = sorted(m for m in ("torch", "transformers", "openai", "vllm") if m in sys.modules)
print("HEAVY", heavy)
"""


def test_every_page_renders_without_importing_torch():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        "TITLES ['Runs', 'New run', 'Trajectories', 'Trajectory 1', 'Label queue', 'Dashboard', 'Models']" in out.stdout
    )
    assert "HEAVY []" in out.stdout


def test_import_evalrx_is_light():
    code = "import evalrx, sys; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
