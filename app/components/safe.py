"""Rendering untrusted text (model output, tool observations, case content) safely.

Model and tool output is data, never markup: it is `html.escape`d into a `<pre>` block
(`show_pre`, drawn by `st.html`, styled by `TEXT_STYLE`), and the few places that take Markdown (labels,
captions) get `md_escape`d text, and the small tables `st.html` draws get `html.escape`d cells.
Nothing here uses `unsafe_allow_html` or lets script run.
"""

from __future__ import annotations

import html
import json
import re
import string
from typing import Any, Optional

import streamlit as st

from evalrx.core import counted  # noqa: F401  (the pages say counts through this module)

# Shown inline up to this many characters / lines; longer content is collapsed.
INLINE_CHARS = 1500
INLINE_LINES = 25
# Beyond this the browser gets a truncated copy (the export has the full text).
MAX_CHARS = 200_000

_PUNCT = set(string.punctuation)


def md_escape(text: Any) -> str:
    """Escape every ASCII punctuation character so Markdown shows `text` literally.

    CommonMark allows a backslash before any ASCII punctuation; this also neutralises
    HTML tags, links, emphasis, Streamlit's `:color[...]`/`:icon:` directives and `$` math.
    Newlines become spaces (labels and captions are one line).
    """
    s = str(text)
    out = []
    for ch in s:
        if ch in _PUNCT:
            out.append("\\" + ch)
        elif ch in "\r\n\t":
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out)


_CODE_SPAN = re.compile(r"`([^`\r\n]+)`")


def md_with_code(text: Any) -> str:
    """Like `md_escape`, but a `code span` stays one: shown as code, the rest shown literally.

    For text written with backticks (a model spec's note). Inside a code span Markdown, HTML and
    Streamlit's directives are inert already; the text around it is `md_escape`d, and a backtick
    without its pair is shown as a backtick.
    """
    s, out, at = str(text), [], 0
    for m in _CODE_SPAN.finditer(s):
        out.append(md_escape(s[at : m.start()]))
        out.append(f"`{m.group(1)}`")
        at = m.end()
    out.append(md_escape(s[at:]))
    return "".join(out)


def short(text: Any, n: int = 80) -> str:
    """One line of at most `n` characters (for table cells and titles; not escaped)."""
    s = " ".join(str(text if text is not None else "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


def collapse(text: str, *, chars: int = INLINE_CHARS, lines: int = INLINE_LINES) -> tuple[str, bool]:
    """The inline part of `text` and whether the rest was cut off."""
    cut = text
    parts = text.split("\n")
    if len(parts) > lines:
        cut = "\n".join(parts[:lines])
    if len(cut) > chars:
        cut = cut[:chars]
    return cut, cut != text


def show_pre(text: str) -> None:
    """Untrusted text exactly as it is (every space and newline), escaped, in a preformatted block."""
    st.html(f'<pre class="evx-text">{html.escape(text)}</pre>')


def show_text(text: Optional[str], *, empty: str = "(empty)") -> None:
    """Show untrusted text preformatted; long text shows its head and collapses the rest.

    Not `st.code`: a code block makes the page fetch and start Streamlit's syntax highlighter first
    (about 0.2 s of a trajectory's first open), and `st.text` dedents and strips what it shows.
    """
    if text is None or text == "":
        st.caption(empty)
        return
    text = str(text)
    head, cut = collapse(text)
    if not cut:
        show_pre(text)
        return
    show_pre(head + "\n…")
    total = len(text)
    with st.expander(f"Show all {total:,} characters"):
        if total > MAX_CHARS:
            st.caption(f"First {MAX_CHARS:,} characters shown; export the run for the full text.")
            text = text[:MAX_CHARS]
        show_pre(text)


def show_json(value: Any) -> None:
    """Show a JSON-able value (tool arguments, expected answers) as escaped, indented JSON."""
    try:
        body = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        body = repr(value)
    show_text(body)


# Preformatted untrusted text (model turns, observations, arguments), styled like a code block.
TEXT_STYLE = (
    "<style>pre.evx-text{font-family:'Source Code Pro',monospace;font-size:0.85rem;margin:0;"
    "background:rgba(128,128,128,.08);padding:.6rem .8rem;border-radius:.5rem;white-space:pre-wrap;"
    "overflow-wrap:anywhere}</style>"
)

TABLE_STYLE = (
    "<style>.evx-table{border-collapse:collapse;width:100%;font-size:0.9rem}"
    ".evx-table th,.evx-table td{border-bottom:1px solid rgba(128,128,128,.25);padding:4px 8px;text-align:left;"
    "vertical-align:top}.evx-table th{font-weight:600}</style>"
)


def html_table(rows: list[dict], *, empty: str = "-") -> str:
    """A small table of untrusted values as inert HTML for `st.html` (every header and cell escaped).

    For the few-row tables of the pages every trajectory opens: `st.dataframe` and `st.table`
    ship data as Arrow, which loads pandas and pyarrow into the server.
    """
    cols = list(rows[0]) if rows else []
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(empty if r.get(c) is None else str(r.get(c)))}</td>" for c in cols)
        + "</tr>"
        for r in rows
    )
    return f'{TABLE_STYLE}<table class="evx-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
