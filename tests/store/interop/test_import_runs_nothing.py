"""An imported file is data: a run config in it that names an MCP server command and a Python tool
(`--tools pkg.mod:fn`) is stored as written, but importing it (as `evalrx import` and the Import page do),
previewing it and reading the run back never starts that command nor imports that module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import evalrx.interop as X
import evalrx.store as S

REPO = Path(__file__).resolve().parents[3]
MODULE = "evalrx_import_marker_tool"


def _booby_trapped(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(an export whose run config names a marker-writing MCP server and tool module, the two marker paths)."""
    server_marker, module_marker = tmp_path / "mcp-server-started", tmp_path / "module-imported"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / f"{MODULE}.py").write_text(
        f"open({str(module_marker)!r}, 'w').close()\n\ndef fn(x: str) -> str:\n    return x\n"
    )
    start = f"open({str(server_marker)!r}, 'w').close()"
    config = {
        "model": {"name": "evalrx-tiny"},
        "tools": [f"{MODULE}:fn"],
        "mcp_servers": [{"name": "trap", "command": sys.executable, "args": ["-c", start]}],
    }
    row = {
        "sample_id": "s1",
        "goal": "2+2?",
        "steps": [
            {"idx": 0, "role": "user", "content": "2+2?"},
            {"idx": 1, "role": "tool", "content": "fn", "observation": "4", "span": {"tool_origin": "trap"}},
        ],
        "final_answer": "4",
        "outcome": "pass",
        "run": {"name": "trapped", "config": config},
    }
    path = tmp_path / "trapped.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path, server_marker, module_marker


def test_an_imported_run_config_never_starts_its_mcp_server_or_imports_its_tool_module(
    store_url, tmp_path, monkeypatch
):
    path, server_marker, module_marker = _booby_trapped(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))  # the module is importable: only not importing it saves us
    X.preview_file(path, store=store_url)
    res = X.import_file(path, store=store_url)
    info = S.get_run(res.run_ids[0], store=store_url)
    assert info.config["tools"] == [f"{MODULE}:fn"] and info.config["mcp_servers"][0]["name"] == "trap"
    for row in S.list_trajectories(run_id=info.id, store=store_url).rows:
        S.get_trajectory(row.id, store=store_url)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path / "mods")]))
    out = subprocess.run(
        [sys.executable, "-m", "evalrx", "import", str(path), "--again", "--url", store_url],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert MODULE not in sys.modules
    assert not module_marker.exists() and not server_marker.exists()
    from evalrx.tools.python_fn import python_tool

    python_tool(f"{MODULE}:fn")  # the trap is armed: building the tool the config names imports the module
    sys.modules.pop(MODULE)
    assert module_marker.exists()
