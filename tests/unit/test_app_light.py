"""The app process must never import torch or a backend runtime."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("app/main.py", default_timeout=60).run()
assert not at.exception, at.exception
text = " ".join(str(t.value) for t in at.title) + " ".join(str(s.value) for s in at.subheader)
assert "Models" in text, text
heavy = sorted(m for m in ("torch", "transformers", "openai", "vllm") if m in sys.modules)
print("HEAVY", heavy)
"""


def test_app_renders_without_importing_torch():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout


def test_import_evalrx_is_light():
    code = "import evalrx, sys; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
