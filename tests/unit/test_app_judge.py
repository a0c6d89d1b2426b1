"""The app's judge pages with AppTest on a real SQLite store: the "sources disagree" filter from the URL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # appdata

from appdata import fill_run  # noqa: E402
from apppages import open_page, store_url, texts  # noqa: E402,F401  (store_url: a fixture)

import evalrx.store as S  # noqa: E402
from evalrx.core.failures import Diagnosis  # noqa: E402

OUTCOMES = ["fail", "fail", "pass", "fail", "pass", "fail"]


@pytest.fixture
def run(store_url):
    run_id, ids = fill_run(store_url, len(OUTCOMES), seed=2, name="judged", outcomes=OUTCOMES)
    return {"url": store_url, "run": run_id, "ids": ids}


def _d(kind, step, source) -> Diagnosis:
    return Diagnosis(kind, step, {"text": "x"}, 0.5, source)


def test_the_sources_disagree_url_parameter_filters_the_list(run):
    url, ids = run["url"], run["ids"]
    with S.connect(url).write() as s:
        S.save_diagnoses(s, ids[0], [_d("bad_arguments", 1, "reference"), _d("bad_arguments", 1, "heuristic")])
        S.save_diagnoses(s, ids[1], [_d("bad_arguments", 1, "reference"), _d("wrong_tool", 1, "judge")])
        S.save_diagnoses(s, ids[3], [_d("wrong_tool", 2, "heuristic"), _d("wrong_tool", 3, "judge")])
    at = open_page("trajectories", run=run["run"], disagree="true")
    df = at.dataframe[0].value
    assert sorted(int(link.split("id=")[1].split("&")[0]) for link in df["open"]) == [ids[1], ids[3]]
    assert at.toggle(key="disagree").value is True
    assert "sources disagree" in texts(at)
    assert all("in_disagree=true" in link for link in df["open"])  # previous/next keep the filter
    at.toggle(key="disagree").set_value(False).run()
    assert len(at.dataframe[0].value) == len(OUTCOMES)
