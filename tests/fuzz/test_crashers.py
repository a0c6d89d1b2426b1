"""Inputs the fuzz targets found that broke a parser, kept as fixtures (tests/fixtures/fuzz/) with what
each must give now: one line naming the file and the problem, or the result a good input gives."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evalrx.interop import ImportFormatError, preview_file

CRASHERS = Path(__file__).resolve().parents[1] / "fixtures" / "fuzz"


def copied(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copyfile(CRASHERS / name, tmp_path / name))


def test_an_inspect_log_cut_after_its_first_key_is_one_line(tmp_path):
    path = copied("inspect_cut_after_first_key.json", tmp_path)
    with pytest.raises(ImportFormatError, match=r"line 1: not valid JSON \(parse error: premature EOF") as got:
        preview_file(path)
    assert "\n" not in str(got.value)  # ijson's message points at the spot over three lines


def test_a_superscript_digit_in_a_url_is_no_id():
    from components.filters import store_filters, url_int

    assert "²".isdigit()  # what the pages checked before calling int()
    assert url_int("²") is None and url_int(" 12 ") == 12
    assert store_filters({"run": "²", "outcome": "fail"}) == {"outcome": "fail"}


def test_an_evalrx_row_whose_step_content_is_not_text_is_one_line(tmp_path):
    import evalrx.store as S
    from evalrx.interop import import_file

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    path = copied("run_step_content_true.jsonl", tmp_path)
    with pytest.raises(ImportFormatError, match=r"line 1: step 1: `content` must be text or null, not bool"):
        import_file(path, store=url)
    assert S.list_runs(store=url) == []
    S.forget(url)


def test_a_carriage_return_in_a_labels_csv_is_no_crash(tmp_path):
    from evalrx.interop import labels_format

    path = copied("labels_cr_in_first_line.csv", tmp_path)
    assert labels_format(path) is None
    with pytest.raises(ImportFormatError, match="line 1: not valid JSON"):
        preview_file(path)


def test_a_labels_csv_cell_over_the_csv_field_limit_is_one_line(tmp_path):
    import evalrx.store as S
    from evalrx.interop import import_labels

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    path = tmp_path / "labels.csv"
    path.write_bytes(b"case_id,outcome\n" + b"x" * 140_000 + b",fail\n")  # csv refuses a field over 128 KiB
    with pytest.raises(ImportFormatError, match=r"line \d+: not readable as CSV"):
        import_labels(path, store=url)
    S.forget(url)


def test_a_case_file_that_is_not_utf8_names_the_line():
    from evalrx.suites import CaseFileError, load_cases

    with pytest.raises(CaseFileError, match=r"cases_not_utf8.jsonl:1: not UTF-8 text \(byte 16\)"):
        load_cases(str(CRASHERS / "cases_not_utf8.jsonl"))


def test_an_mcp_config_text_that_is_a_json_list_is_one_line():
    from evalrx.config.mcp import load_mcp_config

    with pytest.raises(ValueError, match='needs a top-level "mcpServers" object'):
        load_mcp_config((CRASHERS / "mcp_config_deep_list.txt").read_text())


def test_a_damaged_parquet_page_header_is_one_line(tmp_path):
    path = copied("run_page_header_damaged.parquet", tmp_path)  # our Parquet export, its 9th byte zeroed
    with pytest.raises(ImportFormatError, match=r"file: not a readable Parquet file \(Couldn't deserialize") as got:
        preview_file(path)
    assert "\n" not in str(got.value)  # pyarrow's message runs over lines


def test_parquet_text_that_is_not_utf8_is_one_line(tmp_path):
    path = copied("run_text_not_utf8.parquet", tmp_path)  # our Parquet export, a case id's first byte 0x80
    with pytest.raises(ImportFormatError, match=r"file: not a readable Parquet file \('utf-8' codec can't decode"):
        preview_file(path)


def test_lone_surrogates_in_an_evalrx_row_are_stored_as_replacement_characters(tmp_path):
    import evalrx.store as S
    from evalrx.interop import import_file

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    path = copied("run_lone_surrogates.jsonl", tmp_path)  # "\ud800" in its case id, a case meta key, a step
    import_file(path, store=url)
    (row,) = S.list_trajectories(store=url).rows
    got = S.get_trajectory(row.id, store=url)
    assert got.case["meta"]["\ufffdkey"] == "lone \ufffd surrogate"
    assert got.case["id"] == got.row.sample_id == "look\ufffd"
    assert got.trajectory.steps[1].content == "Looking \ufffd."
    S.forget(url)


@pytest.mark.parametrize(
    "name, message",
    [
        ("agentrx_root_id_a_list.labels.json", r"root_cause failure_id \[\] is none of the failures' ids \[1, 2\]"),
        ("agentrx_failure_id_an_object.labels.json", r"failure_id must be a number or text, got \{'a': 1\}"),
    ],
)
def test_an_agentrx_failure_id_that_is_not_a_number_or_text_is_one_line(tmp_path, name, message):
    import evalrx.store as S
    from evalrx.interop import import_labels

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    with pytest.raises(ImportFormatError, match=message):
        import_labels(copied(name, tmp_path), store=url)
    S.forget(url)


def test_a_run_whose_model_name_is_not_text_imports_with_the_name_as_json(tmp_path):
    import evalrx.store as S
    from evalrx.interop import import_file

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    import_file(copied("run_model_name_a_list.jsonl", tmp_path), store=url)  # "model": {"name": [null]}
    (run,) = S.list_runs(store=url)
    assert run.spec_key == "[null]"
    S.forget(url)


def test_a_parquet_schema_whose_column_name_is_not_utf8_is_one_line(tmp_path):
    path = copied("run_schema_name_not_utf8.parquet", tmp_path)  # our export, a column name's first byte 0x80
    with pytest.raises(ImportFormatError, match=r"file: not a readable Parquet file \('utf-8' codec can't decode"):
        preview_file(path)


def test_an_evalrx_row_whose_run_config_is_not_an_object_is_one_line(tmp_path):
    path = copied("run_config_true.atif.jsonl", tmp_path)  # an ATIF line carrying an evalrx row: "config": true
    with pytest.raises(ImportFormatError, match=r"line 1: .*`run.config` must be an object, not bool"):
        preview_file(path)


def test_a_lone_surrogate_in_a_tool_name_is_stored_as_a_replacement_character(tmp_path):
    import evalrx.store as S
    from evalrx.interop import import_file

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    import_file(copied("openai_chat_tool_name_lone_surrogate.jsonl", tmp_path), store=url)
    (row,) = S.list_trajectories(store=url).rows
    got = S.get_trajectory(row.id, store=url).trajectory
    assert got.steps[1].tool_calls[0].name == "\ufffdcalculator"
    assert S.list_trajectories(tool="\ufffdcalculator", store=url).rows  # the tools-used row, stored alike
    S.forget(url)


def test_a_labels_file_whose_case_id_holds_a_lone_surrogate_says_it_is_unmatched(tmp_path):
    import os
    import subprocess
    import sys

    import evalrx.store as S
    from evalrx.interop import import_file

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    import_file(CRASHERS / "seeds" / "inspect.eval", store=url)
    S.forget(url)
    path = copied("labels_case_id_lone_surrogate.jsonl", tmp_path)  # the lookup bound "\ud800look" and failed
    root = str(CRASHERS.parents[2])
    out = subprocess.run(
        [sys.executable, "-m", "evalrx", "labels", "import", str(path), "--url", url],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=root),
        cwd=root,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-1500:]
    assert "not matched to a stored trajectory: case \\ud800look attempt 1" in out.stdout  # printed, not a crash


def test_an_evalrx_row_whose_run_name_is_not_text_is_one_line(tmp_path):
    path = copied("run_name_a_list.atif.jsonl", tmp_path)  # "run": {"name": ["a", "list"]}: unhashable
    with pytest.raises(ImportFormatError, match=r"line 1: .*`run.name` must be text, not list"):
        preview_file(path)


def test_a_label_finds_the_case_whose_id_held_a_lone_surrogate(tmp_path):
    import json

    import evalrx.store as S
    from evalrx.interop import import_file, import_labels

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    import_file(copied("run_lone_surrogates.jsonl", tmp_path), store=url)  # stored as "look\ufffd"
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"case_id": "look\ud800", "outcome": "fail", "kind": "wrong_tool"}) + "\n")
    got = import_labels(labels, store=url)
    assert (got.n_labels, got.unmatched) == (1, [])
    S.forget(url)


def test_span_counts_that_are_lists_or_past_int64_import_as_no_count(tmp_path):
    import evalrx.store as S
    from evalrx.core import Step, StepRole
    from evalrx.interop import import_file

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    # ATIF lines whose evalrx spans say "call": [0] (diagnosis: TypeError) and completion_tokens 2**63 (OverflowError)
    import_file(copied("run_span_call_a_list.atif.jsonl", tmp_path), store=url)
    rows = S.list_trajectories(store=url).rows
    assert len(rows) == 2
    steps = S.get_trajectory(rows[0].id, store=url).trajectory.steps
    assert steps[1].span["completion_tokens"] == 2**63  # the span keeps what the file said
    S.forget(url)
    span = {"call": [0], "n_images": "2", "turn": 2.0, "flag": True, "big": 2**70}
    step = Step(idx=1, role=StepRole.TOOL, content="t", span=span)
    assert [step.span_int(k) for k in ("call", "n_images", "turn", "flag", "missing")] == [0, 2, 2, 0, 0]


@pytest.fixture
def store_url(tmp_path):
    """A migrated SQLite store, forgotten after the test."""
    import evalrx.store as S

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    yield url
    S.forget(url)


def imported_rows(path: Path, url: str) -> int:
    """Import `path` as `evalrx import` does; the trajectories the store then holds."""
    import evalrx.store as S
    from evalrx.interop import import_file

    import_file(path, store=url)
    return len(S.list_trajectories(store=url).rows)


def test_a_zip_member_whose_name_starts_with_nul_is_no_crash(tmp_path, store_url):
    """zipfile cuts a member's name at a NUL, and its `is_dir()` fails on the empty name that is left."""
    path = copied("inspect_member_name_starts_with_nul.eval", tmp_path)  # header.json's name starts with NUL
    preview = preview_file(path, store=store_url)
    assert preview.format == "inspect-eval" and preview.n_trajectories == 4  # an unfinished log: its samples
    assert any("no header.json" in note for note in preview.notes)
    assert imported_rows(path, store_url) == 4


def test_an_eval_log_whose_dataset_is_not_an_object_imports(tmp_path, store_url):
    """The dataset's sample ids only order the samples: a header whose `dataset` is a list orders nothing."""
    path = copied("inspect_dataset_a_list.eval", tmp_path)  # header.json's eval.dataset: [{...}]
    assert preview_file(path, store=store_url).n_trajectories == 4
    assert imported_rows(path, store_url) == 4


def test_an_attachment_that_is_not_text_is_left_unresolved(tmp_path, store_url):
    """A picture block naming `attachment://pic` whose attachment is null: no picture, no crash."""
    path = copied("inspect_attachment_null.eval", tmp_path)
    assert imported_rows(path, store_url) == 4


def test_a_model_usage_that_is_not_an_object_counts_no_tokens(tmp_path, store_url):
    path = copied("inspect_model_usage_an_int.eval", tmp_path)  # a sample's model_usage: {"mockllm/model": 7}
    assert imported_rows(path, store_url) == 4


def test_an_epoch_past_what_the_store_keeps_is_one_line(tmp_path, store_url):
    """An epoch of 2**70 overflowed SQLite's INTEGER binding the run's case row."""
    import evalrx.store as S

    path = copied("inspect_epoch_past_64_bits.eval", tmp_path)  # samples/look_epoch_1.json: "epoch": 2**70
    with pytest.raises(ImportFormatError, match=r"look_epoch_1\.json: attempt 1180591620717411303424 is past"):
        preview_file(path, store=store_url)
    with pytest.raises(ImportFormatError, match="largest the store keeps"):
        imported_rows(path, store_url)
    assert S.list_runs(store=store_url) == []  # a refused file stores nothing


@pytest.mark.parametrize("attempt, stored", [(2**31 - 1, True), (2**31, False)])
def test_the_largest_attempt_is_the_largest_postgresql_keeps(tmp_path, store_url, attempt, stored):
    """PostgreSQL's INTEGER is 32 bits: an attempt past it would fail there and not on SQLite, so both refuse it."""
    import json

    row = json.loads((CRASHERS / "seeds" / "run.jsonl").read_text().splitlines()[0])
    row["attempt"] = attempt
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(row) + "\n")
    if stored:
        assert imported_rows(path, store_url) == 1
    else:
        with pytest.raises(ImportFormatError, match=r"run\.jsonl: line 1: attempt 2147483648 is past"):
            imported_rows(path, store_url)
