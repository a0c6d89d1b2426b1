"""Driving the app's pages with Streamlit's AppTest over a real SQLite store (shared by the page tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

import evalrx.store as S

ROOT = Path(__file__).resolve().parents[2]
MAIN = str(ROOT / "app" / "main.py")


@pytest.fixture
def store_url(tmp_path, monkeypatch):
    """An upgraded, empty store the app reads (no local worker)."""
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    S.upgrade(url)
    monkeypatch.setenv("EVALRX_DATABASE_URL", url)
    monkeypatch.setenv("EVALRX_NO_LOCAL_WORKER", "1")
    yield url
    S.forget(url)


def open_page(view: str, /, **query):
    """Run one page (`views/<view>.py`) with these query parameters; fails on any exception it shows."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=60)
    if view in ("new_run", "import_data"):  # registered under url_paths "new", "import": found after a first run
        at.run()
    at.switch_page(f"views/{view}.py")
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at) -> str:
    """Everything the page shows as Markdown, captions, code, titles and subheaders, joined."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [c.value for c in at.code] + pre_texts(at)
    parts += [t.value for t in at.title] + [s.value for s in at.subheader]
    return "\n".join(str(p) for p in parts)


def listed(at) -> list[tuple[int, dict]]:
    """The Trajectories list as shown: each row's trajectory id and its link's query parameters."""
    from urllib.parse import parse_qsl

    return [
        (int(link.proto.label), dict(parse_qsl(link.proto.query_string)))
        for link in at.get("page_link")
        if link.proto.page == "trajectory"
    ]


def row_htmls(at) -> list[str]:
    """The Trajectories list's rows as the page sends them: each row's HTML (`components.trajectory_list`)."""
    return [h.proto.body for h in at.get("html") if h.proto.body.startswith('<div class="evx-row">')]


def list_cells(at) -> list[list[str]]:
    """The Trajectories list's rows as a reader sees them: case, grade, diagnosed · labelled, numbers (plain text)."""
    import html
    import re

    return [
        [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<div>(.*?)</div>", body, re.S)]
        for body in row_htmls(at)
    ]


def pre_texts(node) -> list[str]:
    """The untrusted texts a page (or a block of it) shows preformatted (`components.safe.show_pre`), unescaped."""
    import html
    import re

    out = []
    for h in node.get("html"):
        m = re.fullmatch(r'<pre class="evx-text">(.*)</pre>', h.proto.body, re.S)
        if m:
            out.append(html.unescape(m.group(1)))
    return out
