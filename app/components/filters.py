"""The trajectory filter as URL query parameters, shared by the list, the Trajectory page
(previous/next) and the Label queue. Pure Python: testable without Streamlit.

Parameters: run, outcome, label, mode (the label's failure kind), term, tool, q (free text),
kind (the diagnosed failure kind), agent (a team's agent that took a step), blamed (the agent a team's
diagnosis blames),
margin (keep trajectories whose smallest tool-decision margin is below this), disagree ("true": the
diagnosis sources' best candidates differ in kind or first wrong step), sort, asc ("true" for
ascending; newest/largest first otherwise). The values are the words the widgets show
(Streamlit writes a bound widget's displayed option into the URL), so links built here
and the filter widgets read the same URL.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from evalrx.core import Label, Termination

FILTER_KEYS = (
    "run",
    "outcome",
    "label",
    "mode",
    "term",
    "tool",
    "agent",
    "blamed",
    "q",
    "kind",
    "margin",
    "disagree",
    "sort",
    "asc",
)
# The grader's outcomes in the order the pages show them.
OUTCOMES = tuple(o.value for o in (Label.PASS, Label.FAIL, Label.ERROR, Label.UNKNOWN))
# How a trajectory ended, as the "Ended by" filter offers it.
TERMINATIONS = tuple(e.value for e in Termination)
# URL word -> `list_trajectories(label=...)`: a human label's outcome (no one labels an error), or none / any.
LABEL_CHOICES = {
    "unlabelled": "none",
    "labelled": "any",
    **{o.value: o.value for o in (Label.PASS, Label.FAIL, Label.UNKNOWN)},
}
# URL word -> sort column.
SORT_CHOICES = {
    "newest": "id",
    "latency": "latency_ms",
    "steps": "n_steps",
    "calls": "n_tool_calls",
    "completion": "completion_tokens",
    "prompt": "prompt_tokens",
    "blamed": "diagnosis_agent",  # the agent a team's diagnosis blames (offered for teams' runs)
}
_TRUE = ("1", "true", "yes", "on")


def url_int(value: Any) -> Optional[int]:
    """A URL parameter's whole number (a run or trajectory id), or None: `str.isdigit` also takes "²", which `int` refuses."""
    text = value.strip() if isinstance(value, str) else ""
    return int(text) if text.isascii() and text.isdigit() else None


def _get(params: Mapping, key: str) -> str:
    v = params.get(key)
    if isinstance(v, (list, tuple)):
        v = v[0] if v else ""
    if isinstance(v, bool):
        return "true" if v else ""
    return str(v).strip() if v is not None else ""


_DEFAULTS = {"sort": "newest", "disagree": "false"}


def carry(params: Mapping) -> dict:
    """The filter parameters set in `params` (to put on links that keep the filter); defaults left out."""
    return {k: _get(params, k) for k in FILTER_KEYS if _get(params, k) and _get(params, k) != _DEFAULTS.get(k)}


CONTEXT = "in_"  # prefix of the filter a Trajectory page URL carries (?id=5&in_run=3&in_outcome=fail)


def as_context(params: Mapping) -> dict:
    """The filter as the Trajectory page's URL parameters.

    Prefixed because Streamlit refuses to switch pages with query parameters that are
    bound to widgets on the current page (the list's filter widgets own `run`, `outcome`...).
    """
    return {CONTEXT + k: v for k, v in carry(params).items()}


def from_context(params: Mapping) -> dict:
    """The filter carried in a Trajectory page's URL (see `as_context`)."""
    return carry({k[len(CONTEXT) :]: v for k, v in params.items() if k.startswith(CONTEXT)})


def store_filters(params: Mapping) -> dict:
    """`list_trajectories` filter keyword arguments for the URL's filter."""
    out: dict[str, Any] = {}
    run = url_int(_get(params, "run"))
    if run is not None:
        out["run_id"] = run
    if _get(params, "outcome") in OUTCOMES:
        out["outcome"] = _get(params, "outcome")
    if _get(params, "label") in LABEL_CHOICES:
        out["label"] = LABEL_CHOICES[_get(params, "label")]
    for key, arg in (
        ("mode", "label_kind"),
        ("term", "terminated"),
        ("tool", "tool"),
        ("agent", "agent"),
        ("blamed", "diagnosis_agent"),
        ("q", "text"),
        ("kind", "diagnosis_kind"),
    ):
        if _get(params, key):
            out[arg] = _get(params, key)
    try:
        margin = float(_get(params, "margin"))
    except ValueError:
        margin = None
    if margin is not None and margin == margin:  # NaN is no threshold
        out["max_margin"] = margin
    if _get(params, "disagree").lower() in _TRUE:
        out["sources_disagree"] = True
    return out


def sort_args(params: Mapping) -> tuple[str, bool]:
    """(sort column, descending) for the URL's filter."""
    sort = SORT_CHOICES.get(_get(params, "sort"), "id")
    return sort, _get(params, "asc").lower() not in _TRUE


def neighbours(row: Any, params: Mapping, *, store: Any) -> tuple[Optional[int], Optional[int]]:
    """The ids before and after `row` (a `TrajectoryRow`) in the filtered, sorted list.

    Uses the store's keyset pagination from the row's own position, so it costs two
    one-row index lookups however deep the row is.
    """
    from evalrx.store import (
        encode_cursor,  # the cursor format of list_trajectories
        list_trajectories,
    )

    sort, desc = sort_args(params)
    filters = store_filters(params)
    value = row.id if sort == "id" else getattr(row, sort)
    if value is None and sort == "diagnosis_agent":
        value = ""  # the store sorts a trajectory that blames no agent as "" (keyset pages never compare a NULL)
    cursor = encode_cursor(value, row.id)
    nxt = list_trajectories(sort=sort, descending=desc, limit=1, after=cursor, store=store, **filters)
    prev = list_trajectories(sort=sort, descending=not desc, limit=1, after=cursor, store=store, **filters)
    return (prev.rows[0].id if prev.rows else None, nxt.rows[0].id if nxt.rows else None)


def describe(params: Mapping) -> str:
    """A short human description of the active filter (plain text)."""
    parts = []
    f = store_filters(params)
    if "run_id" in f:
        parts.append(f"run {f['run_id']}")
    if "outcome" in f:
        parts.append(f"graded {f['outcome']}")
    if "label" in f:
        parts.append({"none": "not labelled", "any": "labelled"}.get(f["label"], f"labelled {f['label']}"))
    for key, name in (
        ("label_kind", "labelled"),
        ("terminated", "ended"),
        ("tool", "tool"),
        ("agent", "agent"),
        ("diagnosis_agent", "blamed"),
        ("text", "text"),
        ("diagnosis_kind", "diagnosed"),
    ):
        if key in f:
            parts.append(f"{name} “{f[key]}”")
    if "max_margin" in f:
        parts.append(f"tool margin < {f['max_margin']:g}")
    if f.get("sources_disagree"):
        parts.append("sources disagree")
    sort, desc = sort_args(params)
    if sort != "id" or not desc:
        parts.append(f"sorted by {_get(params, 'sort') or 'newest'} {'↓' if desc else '↑'}")
    return ", ".join(parts) or "all trajectories"
