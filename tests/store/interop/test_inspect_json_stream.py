"""Inspect `.json` logs (one JSON document, written by inspect_ai with `log_format="json"`) import sample by
sample: the record limit applies to each sample, not to the file, so a log larger than the limit imports,
and a sample larger than it is refused by name with nothing written."""

from __future__ import annotations

import json

import pytest
from inspect_logs import inspect_env, write_eval_log

import evalrx.interop as X
import evalrx.store as S

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """The same eval logged by inspect_ai as `.json` and as `.eval`."""
    root = tmp_path_factory.mktemp("inspect-json")
    with inspect_env(root):
        return {"json": write_eval_log(root / "json", "json"), "eval": write_eval_log(root / "eval")}


def _steps(url: str) -> dict:
    out = {}
    for row in S.list_trajectories(limit=100, store=url).rows:
        t = S.get_trajectory(row.id, store=url).trajectory
        out[(t.sample_id, t.attempt)] = [
            (s.role.value, s.content, [(c.name, c.args) for c in s.tool_calls]) for s in t.steps
        ]
    return out


def test_a_json_log_streams_into_what_the_eval_log_of_the_same_eval_gives(logs, tmp_path, sqlite_url):
    result = X.import_file(logs["json"], store=sqlite_url)
    assert result.n_trajectories == 4 and result.format == "inspect"
    other = f"sqlite:///{tmp_path / 'eval.sqlite'}"
    S.upgrade(other)
    X.import_file(logs["eval"], store=other)
    assert _steps(sqlite_url) == _steps(other) and len(_steps(other)) == 4
    (run,) = S.list_runs(store=sqlite_url)
    assert run.config["inspect"]["task"] == "lookup_task"
    S.forget(other)


def test_a_json_log_larger_than_the_record_limit_imports_sample_by_sample(logs, tmp_path, sqlite_url):
    doc = json.loads(logs["json"].read_text())
    for i, sample in enumerate(doc["samples"]):  # each sample ~60 KB: the file ~240 KB
        sample["metadata"] = {"note": f"{i}" * 60_000}
    log = tmp_path / "padded.json"
    log.write_text(json.dumps(doc, indent=2))
    size = log.stat().st_size
    assert size > 240_000
    with pytest.raises(X.RecordTooLargeError, match="the file .* is|the sample is"):  # the limit still bites
        X.import_file(log, store=sqlite_url, limits=X.ImportLimits(max_record_bytes=50_000))
    assert S.list_runs(store=sqlite_url) == []
    result = X.import_file(log, store=sqlite_url, limits=X.ImportLimits(max_record_bytes=120_000))
    assert result.n_trajectories == 4  # a file twice the limit: each sample is a record, not the file


def test_a_sample_over_the_limit_is_named_and_nothing_is_written(logs, tmp_path, sqlite_url):
    doc = json.loads(logs["json"].read_text())
    doc["samples"][2]["metadata"] = {"blob": "y" * 600_000}
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc, indent=2))
    with pytest.raises(X.RecordTooLargeError, match=r"big\.json: sample 2: the sample is 0\.[5-7] MB"):
        X.import_file(big, store=sqlite_url, limits=X.ImportLimits(max_record_bytes=400_000))
    assert S.list_runs(store=sqlite_url) == []
    assert X.import_file(big, store=sqlite_url, limits=X.ImportLimits(max_record_bytes=800_000)).n_trajectories == 4


def test_a_broken_json_log_is_one_line(logs, tmp_path, sqlite_url):
    text = logs["json"].read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) * 3 // 4])  # a log cut off inside its samples
    with pytest.raises(
        X.ImportFormatError, match=r"cut\.json: sample \d+: the file ends here: was it cut off while it was written\?"
    ):
        X.import_file(cut, store=sqlite_url)
    assert S.list_runs(store=sqlite_url) == []
