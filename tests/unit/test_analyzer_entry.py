"""The one parser of analyzer entries (`evalrx.core.analyzer_entry`), shared by the runner and `analyze`."""

from __future__ import annotations

import pytest

from evalrx.analyzers._pass_analyzer import _resolve
from evalrx.core.analyzer_entry import parse_analyzer_entry


def test_names_and_objects_parse_to_name_and_kwargs():
    assert parse_analyzer_entry(" Logit_Lens ") == ("logit_lens", {})
    assert parse_analyzer_entry({"name": "Uncertainty", "top_k": 3}) == ("uncertainty", {"top_k": 3})
    for bad in (3, {"top_k": 3}, {"name": 3}, None):
        with pytest.raises(ValueError, match="analyzer entry must be a name"):
            parse_analyzer_entry(bad)


def test_analyze_names_analyzer_instances_in_its_message():
    with pytest.raises(ValueError, match="or an Analyzer"):
        _resolve([3])
