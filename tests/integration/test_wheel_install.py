"""An installed wheel (not the editable checkout) migrates a new store: the migrations ship in the package."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_wheel_installed_in_a_fresh_venv_upgrades_a_new_store(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    (wheel,) = dist.glob("evalrx-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True, timeout=300)
    # The dependencies come from this venv's site-packages, put on the path without its .pth files,
    # so the editable checkout is not importable: only the wheel's copy of evalrx is.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
    }
    where = subprocess.run(
        [str(py), "-c", "import evalrx; print(evalrx.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(venv)), where.stdout
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    up = subprocess.run(
        [str(py), "-m", "evalrx", "db", "upgrade", "--url", url],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert up.returncode == 0, up.stderr[-2000:]
    from evalrx.store import SCHEMA_VERSION

    assert f"schema {SCHEMA_VERSION}" in up.stdout
    current = subprocess.run(
        [str(py), "-m", "evalrx", "db", "current", "--url", url],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert current.returncode == 0 and "(current)" in current.stdout
