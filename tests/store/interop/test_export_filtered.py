"""Exporting a filtered set of trajectories (any runs) in every format, and the labels alone as CSV."""

from __future__ import annotations

import csv
import json

from storehelpers import fill_run

import evalrx.interop as X
import evalrx.store as S
from evalrx.interop import otel


def test_a_filtered_set_exports_in_every_format_and_labels_as_csv(sqlite_url, tmp_path):
    store = S.connect(sqlite_url)
    a, _, _ = fill_run(store, 4, seed=1, name="A")
    b, _, _ = fill_run(store, 3, seed=2, name="B")
    chosen = [
        S.list_trajectories(run_id=a, store=store, descending=False).rows[1].id,
        S.list_trajectories(run_id=b, store=store, descending=False).rows[0].id,
    ]
    n = X.export_trajectories(chosen, tmp_path / "set.jsonl", store=store)
    rows = [json.loads(line) for line in (tmp_path / "set.jsonl").read_text().splitlines()]
    assert n == 2 and [r["run"]["name"] for r in rows] == ["A", "B"]
    assert X.export_trajectories(chosen, tmp_path / "set.atif.jsonl", store=store) == 2
    assert all(
        json.loads(x)["schema_version"].startswith("ATIF")
        for x in (tmp_path / "set.atif.jsonl").read_text().splitlines()
    )
    assert X.export_trajectories(chosen, tmp_path / "set.otlp.json", store=store) == 2
    requests = [otel.parse_otlp_json(line) for line in (tmp_path / "set.otlp.json").read_text().splitlines()]
    run_ids = {
        next(a.value.int_value for a in sp.attributes if a.key == "evalrx.run.id")
        for req in requests
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for sp in ss.spans
        if any(a.key == "evalrx.run.id" for a in sp.attributes)
    }
    assert run_ids == {a, b}  # each trajectory's spans name its own run
    assert X.export_trajectories(chosen, tmp_path / "set.parquet", store=store) == 2

    S.set_label(
        chosen[0], "fail", failure_kind="bad_arguments", first_wrong_step=1, note="=cmd()", annotator="ann", store=store
    )
    S.set_label(chosen[1], "pass", annotator="bob", store=store)
    assert X.export_labels_csv(tmp_path / "labels.csv", trajectory_ids=chosen, store=store) == 2
    got = list(csv.DictReader((tmp_path / "labels.csv").open()))
    assert [(r["trajectory_id"], r["outcome"], r["failure_kind"], r["annotator"]) for r in got] == [
        (str(chosen[0]), "fail", "bad_arguments", "ann"),
        (str(chosen[1]), "pass", "", "bob"),
    ]
    assert got[0]["note"] == "'=cmd()"  # a spreadsheet would run a leading '=' as a formula
    assert X.export_labels_csv(tmp_path / "a.csv", run_id=a, store=store) == 1
