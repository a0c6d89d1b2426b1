"""The format registry: one entry per format, and the choices that follow from it (sniffing order,
export names, suffixes, which whole-file arrays are read)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import evalrx.interop as X

ROOT = Path(__file__).resolve().parents[2]
ROW = {"sample_id": "c1", "goal": "2+2?", "steps": [{"idx": 0, "role": "user", "content": "2+2?"}]}
ATIF = {
    "schema_version": "ATIF-v1.4",
    "session_id": "s1",
    "agent": {"name": "a", "version": "1"},
    "steps": [{"step_id": 1, "source": "user", "message": "2+2?"}],
}


def test_every_format_is_registered_once_with_its_exports_in_the_order_offered():
    names = [f.name for f in X.formats()]
    assert sorted(names) == [
        "atif",
        "evalrx",
        "inspect",
        "inspect-eval",
        "openai",
        "otel",
        "parquet",
        "spans",
        "tau_bench",
        "team_chat",
    ]
    assert X.EXPORT_FORMATS == X.export_formats() == ("jsonl", "parquet", "atif", "otel")
    with pytest.raises(ValueError, match="registered twice"):
        X.register(X.Format(name="atif", title="another ATIF"))


def test_the_export_format_is_the_longest_suffix_the_name_ends_with():
    assert X.export_format("run.otlp.jsonl") == "otel" and X.export_format("run.atif.jsonl") == "atif"
    assert X.export_format("RUN.JSONL") == "jsonl" and X.export_format("a/b.parquet") == "parquet"
    with pytest.raises(ValueError, match=r"add --format jsonl\|parquet\|atif\|otel, or name it .jsonl, "):
        X.export_format("run.txt")


def test_a_jsonl_line_of_each_record_format_goes_to_its_reader(tmp_path):
    lines = [ATIF, ROW, {"id": "o1", "messages": [{"role": "user", "content": "hi"}]}]
    f = tmp_path / "mixed.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    fmt, records = X.read_file(f)
    assert fmt == "atif+evalrx+openai" and [r.where for r in records] == [1, 2, 3]


def test_only_atif_documents_may_be_listed_in_one_json_array(tmp_path):
    listed = tmp_path / "docs.json"
    listed.write_text(json.dumps([ATIF, dict(ATIF, session_id="s2")]))
    fmt, records = X.read_file(listed)
    assert fmt == "atif" and [r.where for r in records] == ["document 0", "document 1"]
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([ROW, dict(ROW, sample_id="c2")]))
    with pytest.raises(X.UnknownFormatError, match="not a format evalrx reads"):
        X.read_file(rows)


def test_the_app_offers_the_registry_writers_by_their_export_labels():
    sys.path.insert(0, str(ROOT / "app"))
    try:
        from components.export_panel import FORMATS
    finally:
        sys.path.remove(str(ROOT / "app"))
    assert FORMATS == {
        "JSONL": ("jsonl", ".jsonl", "application/jsonl"),
        "Parquet": ("parquet", ".parquet", "application/vnd.apache.parquet"),
        "ATIF": ("atif", ".atif.jsonl", "application/jsonl"),
        "OpenTelemetry (OTLP JSON)": ("otel", ".otlp.json", "application/json"),
        "Labels (CSV)": ("labels", ".labels.csv", "text/csv"),
    }
