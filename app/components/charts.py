"""Altair charts of runs and the dashboard (a trajectory's own two charts are `svg_charts`)."""

from __future__ import annotations

import altair as alt

from components.filters import OUTCOMES
from components.runlevel_view import common_stem
from components.safe import counted

OUTCOME_COLORS = alt.Scale(domain=list(OUTCOMES), range=["#54a24b", "#e45756", "#f58518", "#bab0ac"])
COUNT_AXIS = alt.Axis(tickMinStep=1, format="d")  # counts of trajectories are whole numbers
NAME_AXIS = alt.Axis(labelLimit=260)  # a failure kind's or run's whole name (the default cut them at 180 px)
# Streamlit's default autosize "fit" squeezes axis labels into the chart's height (the plot shrank to a strip);
# fit-x keeps the container's width and puts the labels below the plot.
FIT_WIDTH = {"type": "fit-x", "contains": "padding"}


def latency_boxplot(rows: list[dict], group: str, title: str) -> alt.Chart:
    """Distribution of `latency_ms` per `group` value (rows of dicts)."""
    return (
        alt.Chart(alt.Data(values=rows), title=title)
        .mark_boxplot(extent="min-max")
        .encode(
            x=alt.X("latency_ms:Q", title="latency (ms)", scale=alt.Scale(type="symlog")),
            y=alt.Y(f"{group}:N", title=None),
            color=alt.Color(f"{group}:N", legend=None),
        )
        .properties(height=alt.Step(30))
    )


def counts_chart(rows: list[dict], *, x: str, color: str, title: str) -> alt.Chart:
    """Stacked horizontal counts (`rows`: dicts with `x` category, `color` category, `n`)."""
    return (
        alt.Chart(alt.Data(values=rows), title=title)
        .mark_bar()
        .encode(
            y=alt.Y(f"{x}:N", title=None, axis=NAME_AXIS),
            x=alt.X("n:Q", title="trajectories", axis=COUNT_AXIS),
            color=alt.Color(f"{color}:N", title=None, scale=OUTCOME_COLORS if color == "outcome" else alt.Undefined),
            tooltip=[f"{x}:N", f"{color}:N", "n:Q"],
        )
        .properties(height=alt.Step(26))
    )


KIND_PICK = "pick"


def failure_kind_chart(rows: list[dict]) -> alt.Chart:
    """Failures by diagnosed kind, one bar per kind stacked by run; clicking a bar selects (kind, run_id)."""
    pick = alt.selection_point(name=KIND_PICK, fields=["kind", "run_id"], on="click")
    return (
        alt.Chart(alt.Data(values=rows), title="Why they failed (diagnosis)")
        .mark_bar(cursor="pointer")
        .encode(
            y=alt.Y("kind:N", title=None, sort="-x", axis=NAME_AXIS),
            x=alt.X("n:Q", title="failed trajectories", axis=COUNT_AXIS),
            color=alt.Color("run:N", title=None),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.6)),
            tooltip=[alt.Tooltip("kind:N"), alt.Tooltip("run:N"), alt.Tooltip("n:Q"), alt.Tooltip("definition:N")],
        )
        .add_params(pick)
        .properties(height=alt.Step(26))
    )


def case_rate_strip(rows: list[dict]) -> alt.Chart:
    """Each case's success rate over its attempts, one bar per case, worst first (see `case_rate_rows`)."""
    many = len(rows) > 60  # past this the case names are unreadable: the tooltip names each bar
    stem = common_stem([r["case"] for r in rows])
    return (
        alt.Chart(alt.Data(values=rows), title="Success rate per case (worst first)")
        .mark_bar()
        .encode(
            x=alt.X(
                "tick:N",
                sort=alt.SortField("order"),
                title=counted(len(rows), "case") + (f" ({stem}…)" if stem else ""),
                axis=alt.Axis(labels=not many, ticks=not many, labelAngle=-60, labelLimit=0, labelOverlap=False),
            ),
            y=alt.Y("rate:Q", title="success rate", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
            color=alt.Color("rate:Q", scale=alt.Scale(domain=[0, 1], range=["#e45756", "#54a24b"]), legend=None),
            tooltip=[
                alt.Tooltip("case:N"),
                alt.Tooltip("passes:Q", title="passed"),
                alt.Tooltip("n:Q", title="attempts"),
                alt.Tooltip("rate:Q", format=".0%"),
            ],
        )
        .properties(height=220, autosize=FIT_WIDTH)
    )


def pass_k_chart(rows: list[dict]) -> alt.Chart:
    """pass@k and pass^k against k (see `pass_k_rows`)."""
    return (
        alt.Chart(alt.Data(values=rows), title="pass@k and pass^k")
        .mark_line(point=True)
        .encode(
            x=alt.X("k:Q", title="k (attempts)", axis=alt.Axis(tickMinStep=1, format="d")),
            y=alt.Y("value:Q", title="mean over cases", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
            color=alt.Color(
                "measure:N", title=None, scale=alt.Scale(domain=["pass@k", "pass^k"], range=["#4c78a8", "#f58518"])
            ),
            tooltip=["k:Q", "measure:N", alt.Tooltip("value:Q", format=".1%")],
        )
        .properties(height=220)
    )


def confusion_chart(rows: list[dict], title: str) -> alt.Chart:
    """A confusion matrix as a heatmap with counts (see `confusion_rows`)."""
    base = alt.Chart(alt.Data(values=rows)).encode(
        x=alt.X("diagnosis:N", title="diagnosis"), y=alt.Y("annotator:N", title="annotator")
    )
    cells = base.mark_rect().encode(
        color=alt.Color("n:Q", scale=alt.Scale(scheme="blues"), legend=None),
        tooltip=["annotator:N", "diagnosis:N", "n:Q"],
    )
    text = base.mark_text().encode(text="n:Q")
    return alt.layer(cells, text).properties(title=title, height=alt.Step(30))
