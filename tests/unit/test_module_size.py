"""The size floor: no module of the library or the app passes 700 lines (split it along a seam instead)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 700


def test_no_module_in_evalrx_or_app_passes_the_line_floor():
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for folder in ("evalrx", "app")
        for path in sorted((ROOT / folder).rglob("*.py"))
    }
    assert len(sizes) > 100  # the walk found the packages
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split each along a seam): " + ", ".join(
        f"{name} ({n})" for name, n in sorted(over.items(), key=lambda kv: -kv[1])
    )
