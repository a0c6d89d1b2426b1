"""One record contract: `evalrx run --out FILE` writes what `evalrx export` writes for the same trajectories."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import evalrx.store as S
from evalrx.cli import main

RUN = ["run", "--spec", "evalrx-tiny", "--suite", "demo/lookup_easy", "--limit", "3", "--no-progress"]
# The demo VLM zooms on a picture: the picture a tool returned goes with its step in both records.
RUN_VL = ["run", "--spec", "evalrx-tiny-vl", "--suite", "demo/vision_zoom", "--limit", "2", "--no-progress"]


def records(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def timeless(value):
    """The record without its timings (the one thing two runs of a greedy model do not share)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if not k.endswith("latency_ms")}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def test_run_to_a_file_writes_the_records_export_writes_diagnosis_included(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([*RUN, "--out", str(tmp_path / "out.jsonl")]) == 0
    assert [str(w.message) for w in caught] == []  # an ordinary local run warns of nothing
    try:
        for step in (["db", "upgrade"], RUN, ["worker", "--once", "-q"], ["export", "1", str(tmp_path / "exp.jsonl")]):
            assert main([*step, "--url", url]) == 0, step
    finally:
        S.forget(url)

    written, exported = records(tmp_path / "out.jsonl"), records(tmp_path / "exp.jsonl")
    assert (
        [r["case_id"] for r in written]
        == [r["case_id"] for r in exported]
        == [
            "lookup_easy-001",
            "lookup_easy-002",
            "lookup_easy-003",
        ]
    )
    assert any(r["diagnosis"]["kind"] for r in exported)  # a failed case, so a diagnosis worth comparing
    for mine, theirs in zip(written, exported):
        assert sorted(mine) == sorted(theirs)
        assert sorted(mine["case"]) == sorted(theirs["case"])
        assert mine["diagnosis"] == theirs["diagnosis"] and mine["diagnoses"] == theirs["diagnoses"]
        assert mine["run"] == theirs["run"]
        assert timeless(mine) == timeless(theirs)


def test_a_vlm_run_to_a_file_carries_the_pictures_its_tools_returned_as_export_does(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main([*RUN_VL, "--out", str(tmp_path / "out.jsonl")]) == 0
    try:
        for step in (
            ["db", "upgrade"],
            RUN_VL,
            ["worker", "--once", "-q"],
            ["export", "1", str(tmp_path / "exp.jsonl")],
        ):
            assert main([*step, "--url", url]) == 0, step
    finally:
        S.forget(url)
    written, exported = records(tmp_path / "out.jsonl"), records(tmp_path / "exp.jsonl")
    shown = [[s["images"] for s in r["steps"] if s.get("images")] for r in written]
    assert any(shown), "the model zoomed on neither case"
    assert shown == [[s["images"] for s in r["steps"] if s.get("images")] for r in exported]
    assert all(p["mime"] == "image/png" and p["base64"] for pics in shown for step in pics for p in step)
    for mine, theirs in zip(written, exported):
        assert timeless(mine) == timeless(theirs)
