"""The app pages' URL query parameters, parsed as the pages parse them (no browser): any value a link or a
person types gives a filter, a sort and a description, never an exception."""

from __future__ import annotations

from components.filters import (
    FILTER_KEYS,
    as_context,
    carry,
    describe,
    from_context,
    sort_args,
    store_filters,
    url_int,
)
from hypothesis import given
from hypothesis import strategies as st
from mutate import AWKWARD, ran

values = st.sampled_from(AWKWARD + ["3", " 7 ", "true", "yes", "fail", "newest", "blamed", "0.5", "inf", "-inf", "1_0"])
values = values | st.text(max_size=12)
keys = st.sampled_from(
    list(FILTER_KEYS) + ["id", "a", "b", "ta", "tb", "case", "in_run", "in_q", "in_margin"]
) | st.text(max_size=6)
params = st.dictionaries(keys, values | st.lists(values, max_size=2), max_size=8)


@given(params=params)
def test_any_url_gives_a_filter_a_sort_and_a_description(params):
    ran("page query params")
    filters = store_filters(params)
    assert isinstance(filters.get("run_id", 0), int)
    column, descending = sort_args(params)
    assert isinstance(column, str) and isinstance(descending, bool)
    assert isinstance(describe(params), str)
    assert carry(from_context(as_context(params))) == carry(params)  # the Trajectory page keeps the list's filter


@given(value=values | st.none() | st.integers())
def test_a_url_id_is_a_whole_number_or_none(value):
    ran("page url ids")
    got = url_int(value)
    assert got is None or (isinstance(got, int) and got >= 0 and str(got) == str(int(value.strip())))
