"""ATIF (Harbor's Agent Trajectory Interchange Format): export, import, and the byte-identical round trip."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import random

import pytest
from sqlalchemy import select
from storehelpers import make_case, make_trajectory

import evalrx.interop as X
import evalrx.store as S
from evalrx.core import Label
from evalrx.runner.commands import export_main, import_main
from evalrx.store import runs
from evalrx.store import schema as t

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))
ZOOMED = b"\x89PNG\r\n\x1a\n" + bytes(range(64, 128))  # what a tool returned
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(40))


def _run_with_everything(store) -> int:
    """Two attempts of six cases: an image, reasoning, raw call text, parse errors, labels, tags."""
    cases = [make_case(i, image=PNG if i == 2 else None) for i in range(6)]
    rng = random.Random(11)
    with store.write() as s:
        run_id = runs.create_run(
            s,
            name="atif run",
            config={"model": {"name": "evalrx-tiny", "backend": "hf_local"}, "system": "Use the tools."},
            cases=cases,
            repeats=2,
        )
        work = s.execute(
            select(t.RunCase.position, t.RunCase.case_row_id, t.RunCase.attempt)
            .where(t.RunCase.run_id == run_id)
            .order_by(t.RunCase.attempt, t.RunCase.position)
        ).all()
        for pos, case_row_id, attempt in work:
            traj = make_trajectory(cases[pos], rng, n_turns=3)
            traj.attempt = attempt
            if pos == 1:
                traj.steps[1].content = "<think>check the tool ✓</think>\nI will call it."
                traj.steps[1].tool_calls = (
                    [dataclasses.replace(traj.steps[1].tool_calls[0], raw='{"x": 1}')]
                    if traj.steps[1].tool_calls
                    else []
                )
                traj.steps[0].span = {"has_image": False}
            tid = runs.save_trajectory(s, run_id, case_row_id, traj)
            if pos in (2, 3):  # a tool returned pictures (on the case with a picture too)
                tool = next(st.idx for st in traj.steps if st.role.value == "tool")
                runs.save_step_pictures(s, tid, {tool: [ZOOMED, JPEG] if pos == 3 else [ZOOMED]})
    rows = S.list_trajectories(run_id=run_id, store=store, descending=False).rows
    S.set_label(rows[0].id, "fail", failure_kind="wrong_tool", note="picked lookup", annotator="ana", store=store)
    S.set_label(rows[0].id, "pass", annotator="ben", store=store)
    S.set_label(rows[1].id, "fail", step_idx=1, first_wrong_step=1, store=store)
    S.add_tag(rows[1].id, "regression", store=store)
    return run_id


def test_atif_round_trip_is_byte_identical(store_url, sqlite_url, tmp_path):
    src = S.connect(sqlite_url)
    run_id = _run_with_everything(src)
    first = tmp_path / "first.atif.jsonl"
    assert X.export_run(run_id, first, store=src) == 12  # the suffix says ATIF
    res = X.import_file(first, store=store_url)  # the other backend too
    assert (res.format, res.n_trajectories, len(res.run_ids)) == ("atif", 12, 1)
    second = tmp_path / "second.atif.jsonl"
    assert X.export_run(res.run_ids[0], second, store=store_url) == 12
    assert second.read_bytes() == first.read_bytes()
    # the pictures are files beside the document, one a picture, named by its hash
    names = {f"{hashlib.sha256(b).hexdigest()}{ext}" for b, ext in ((PNG, ".png"), (ZOOMED, ".png"), (JPEG, ".jpg"))}
    assert {f.name for f in (tmp_path / "images").iterdir()} == names
    assert (tmp_path / "images" / f"{hashlib.sha256(JPEG).hexdigest()}.jpg").read_bytes() == JPEG
    # everything evalrx keeps came back, not only what the ATIF file shows
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    X.export_run(run_id, a, store=src)
    X.export_run(res.run_ids[0], b, store=store_url)
    assert a.read_bytes() == b.read_bytes()
    info = S.get_run(res.run_ids[0], store=store_url)
    assert info.name == "atif run" and info.n_cases == 12 and info.source == "import"


def test_atif_documents_follow_the_schema(sqlite_url, tmp_path):
    store = S.connect(sqlite_url)
    run_id = _run_with_everything(store)
    out = tmp_path / "run.jsonl"
    assert X.export_run(run_id, out, fmt="atif", store=store) == 12
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len({d["session_id"] for d in docs}) == 12
    for d in docs:
        pictured = d["extra"]["evalrx"]["case_id"] in ("q0002", "q0003")
        assert d["schema_version"] == ("ATIF-v1.6" if pictured else "ATIF-v1.4") and d["agent"] == {
            "name": "evalrx",
            "version": "0.2.0",
            "model_name": "evalrx-tiny",
        }
        assert [s["step_id"] for s in d["steps"]] == list(range(1, len(d["steps"]) + 1))
        assert d["steps"][0] == {"step_id": 1, "source": "system", "message": "Use the tools."}
        assert d["steps"][1]["source"] == "user" and d["final_metrics"]["total_steps"] == len(d["steps"])
        for st in d["steps"]:
            assert st["source"] in ("system", "user", "agent") and isinstance(st["message"], (str, list))
            ids = {c["tool_call_id"] for c in st.get("tool_calls", [])}
            for c in st.get("tool_calls", []):
                assert isinstance(c["arguments"], dict) and c["function_name"]
            for r in (st.get("observation") or {}).get("results", []):
                assert r.get("source_call_id") is None or r["source_call_id"] in ids  # ATIF's reference rule
        evx = d["extra"]["evalrx"]
        assert {"labels", "outcome", "attempt", "diagnosis", "case", "tags", "run"} <= set(evx)
    by = {(d["extra"]["evalrx"]["case_id"], d["extra"]["evalrx"]["attempt"]): d for d in docs}
    assert sorted(by) == [(f"q{i:04d}", a) for i in range(6) for a in (1, 2)]
    thinking = by[("q0001", 1)]["steps"][2]
    assert thinking["reasoning_content"] == "check the tool ✓" and thinking["message"] == "I will call it."
    labelled = by[("q0000", 1)]["extra"]["evalrx"]["labels"]
    assert [(lab["outcome"], lab["annotator"]) for lab in labelled] == [("fail", "ana"), ("pass", "ben")]
    agent = next(st for st in by[("q0003", 1)]["steps"] if st["source"] == "agent" and "metrics" in st)
    assert set(agent["metrics"]) >= {"prompt_tokens", "completion_tokens"}
    # pictures are ATIF 1.6 image parts naming files beside the document; no bytes inside it
    sha = {b: hashlib.sha256(b).hexdigest() for b in (PNG, ZOOMED, JPEG)}
    user = by[("q0002", 1)]["steps"][1]
    assert user["message"][1] == {
        "type": "image",
        "source": {"media_type": "image/png", "path": f"images/{sha[PNG]}.png"},
    }
    assert user["message"][0]["type"] == "text" and user["message"][0]["text"]
    results = [r for st in by[("q0003", 2)]["steps"] for r in (st.get("observation") or {}).get("results", [])]
    parts = next(r["content"] for r in results if isinstance(r["content"], list))
    assert [p.get("source", {}).get("path") for p in parts if p["type"] == "image"] == [
        f"images/{sha[ZOOMED]}.png",
        f"images/{sha[JPEG]}.jpg",
    ]
    for d in docs:
        for b in (PNG, ZOOMED, JPEG):
            assert base64.b64encode(b).decode() not in json.dumps(d)
        assert all((tmp_path / p["source"]["path"]).is_file() for p in _image_parts(d))
    assert sum(len(_image_parts(d)) for d in docs) == 2 * (2 + 2)


def _image_parts(doc: dict) -> list:
    contents = [st.get("message") for st in doc["steps"]]
    contents += [r.get("content") for st in doc["steps"] for r in (st.get("observation") or {}).get("results", [])]
    return [p for c in contents if isinstance(c, list) for p in c if p.get("type") == "image"]


# The example trajectory of ATIF's RFC (v1.4), as a tool other than evalrx writes it.
FOREIGN = {
    "schema_version": "ATIF-v1.4",
    "session_id": "025B810F-B3A2-4C67-93C0-FE7A142A947A",
    "agent": {"name": "harbor-agent", "version": "1.0.0", "model_name": "gemini-2.5-flash", "extra": {}},
    "notes": "financial data retrieval",
    "extra": {"task": "googl-price"},
    "final_metrics": {"total_prompt_tokens": 1120, "total_completion_tokens": 124, "total_steps": 3},
    "steps": [
        {
            "step_id": 1,
            "timestamp": "2025-10-11T10:30:00Z",
            "source": "user",
            "message": "What is the current trading price of Alphabet (GOOGL)?",
        },
        {
            "step_id": 2,
            "timestamp": "2025-10-11T10:30:02Z",
            "source": "agent",
            "model_name": "gemini-2.5-flash",
            "message": "I will search for the price and the volume.",
            "reasoning_content": "Two data points.",
            "tool_calls": [
                {
                    "tool_call_id": "call_price_1",
                    "function_name": "financial_search",
                    "arguments": {"ticker": "GOOGL", "metric": "price"},
                },
                {
                    "tool_call_id": "call_volume_2",
                    "function_name": "financial_search",
                    "arguments": {"ticker": "GOOGL", "metric": "volume"},
                },
            ],
            "observation": {
                "results": [
                    {"source_call_id": "call_volume_2", "content": "GOOGL volume: 1.5M shares traded."},
                    {"source_call_id": "call_price_1", "content": "GOOGL is currently trading at $185.35"},
                ]
            },
            "metrics": {"prompt_tokens": 520, "completion_tokens": 80, "cached_tokens": 200, "cost_usd": 0.00045},
        },
        {
            "step_id": 3,
            "timestamp": "2025-10-11T10:30:05Z",
            "source": "agent",
            "message": "Alphabet (GOOGL) is trading at $185.35.",
            "metrics": {"prompt_tokens": 600, "completion_tokens": 44, "logprobs": [-0.1, -0.05]},
        },
    ],
}


def test_foreign_atif_document_imports_from_its_standard_fields(sqlite_url, tmp_path, capsys):
    f = tmp_path / "trajectory.json"
    f.write_text(json.dumps(FOREIGN, indent=2))  # a pretty-printed single document, as Harbor writes it
    assert import_main([str(f), "--url", sqlite_url]) == 0
    assert "imported 1 trajectory (atif) as run(s) 1" in capsys.readouterr().out
    row = S.list_trajectories(run_id=1, store=sqlite_url).rows[0]
    detail = S.get_trajectory(row.id, store=sqlite_url)
    tr = detail.trajectory
    assert [s.role.value for s in tr.steps] == ["user", "actor", "tool", "tool", "actor"]
    assert tr.goal == FOREIGN["steps"][0]["message"] and tr.final_answer == "Alphabet (GOOGL) is trading at $185.35."
    assert tr.steps[1].content == "<think>Two data points.</think>\nI will search for the price and the volume."
    assert tr.steps[1].tool_calls[1].to_dict() == {
        "name": "financial_search",
        "args": {"ticker": "GOOGL", "metric": "volume"},
        "id": "call_volume_2",
    }
    # results answered out of order: each tool step says which call it answers
    assert [(s.content, s.observation.value, s.span["call"]) for s in tr.steps[2:4]] == [
        ("financial_search", "GOOGL volume: 1.5M shares traded.", 1),
        ("financial_search", "GOOGL is currently trading at $185.35", 0),
    ]
    assert tr.steps[1].span["prompt_tokens"] == 520 and tr.steps[1].span["started_at"] == "2025-10-11T10:30:02Z"
    assert tr.steps[4].span["logprobs"] == [{"logprob": -0.1}, {"logprob": -0.05}]
    assert row.prompt_tokens == 1120 and row.completion_tokens == 124 and tr.outcome is Label.UNKNOWN
    assert S.get_run(1, store=sqlite_url).name == "harbor-agent (gemini-2.5-flash)"
    assert detail.case["meta"]["atif_extra"] == {"task": "googl-price"}
    # and out again, the standard fields as they came in
    out = tmp_path / "out.atif.jsonl"
    assert export_main(["1", str(out), "--url", sqlite_url]) == 0
    again = json.loads(out.read_text())
    strip = ("extra", "model_name", "notes", "cost_usd")
    for ours, theirs in zip(again["steps"], FOREIGN["steps"]):
        for key in ("source", "message", "reasoning_content", "tool_calls", "timestamp"):
            assert ours.get(key) == theirs.get(key), key
        assert sorted(ours.get("observation", {}).get("results", []), key=json.dumps) == sorted(
            theirs.get("observation", {}).get("results", []), key=json.dumps
        )
        assert {k: v for k, v in (ours.get("metrics") or {}).items() if k not in strip} == {
            k: v for k, v in (theirs.get("metrics") or {}).items() if k not in strip
        }


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda d: d["steps"][1].update(source="robot"), "line 1: ATIF step 2 has source 'robot'"),
        (lambda d: d["steps"][1]["tool_calls"][0].pop("function_name"), "line 1: ATIF step 2: tool call 0 has no"),
        (lambda d: d["steps"][1]["tool_calls"][0].update(arguments=[1]), "`arguments` must be an object"),
        (lambda d: d.pop("session_id"), "line 1: the ATIF document has no `session_id`"),
        (lambda d: d.update(steps={}), "line 1: ATIF `steps` must be a list"),
    ],
)
def test_malformed_atif_is_one_line_and_writes_nothing(sqlite_url, tmp_path, change, problem):
    doc = json.loads(json.dumps(FOREIGN))
    change(doc)
    f = tmp_path / "bad.atif.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    with pytest.raises(X.ImportFormatError) as err:
        X.import_file(f, store=sqlite_url)
    assert problem in str(err.value) and "\n" not in str(err.value)
    assert S.list_runs(store=sqlite_url) == []


def test_export_format_from_the_name_or_asked(sqlite_url, tmp_path, capsys):
    store = S.connect(sqlite_url)
    run_id = _run_with_everything(store)
    assert [X.export_format(n) for n in ("a.parquet", "a.otlp.json", "a.atif.jsonl", "a.atif.json", "a.jsonl")] == [
        "parquet",
        "otel",
        "atif",
        "atif",
        "jsonl",
    ]
    for name in ("run.json", "run.txt", "run"):
        assert export_main([str(run_id), str(tmp_path / name), "--url", sqlite_url]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot tell the export format from the name; add --format" in err
        assert not (tmp_path / name).exists()
    assert export_main([str(run_id), str(tmp_path / "run.txt"), "--format", "atif", "--url", sqlite_url]) == 0
    assert capsys.readouterr().out.strip() == f"wrote 12 trajectories of run {run_id} to {tmp_path / 'run.txt'}"
    assert json.loads((tmp_path / "run.txt").read_text().splitlines()[0])["schema_version"] == "ATIF-v1.4"


def test_an_atif_file_written_before_labels_said_failure_kind_still_imports(sqlite_url, tmp_path):
    """The labels kept in an older ATIF file's `extra.evalrx` name their kind `failure_mode`."""
    src = S.connect(sqlite_url)
    run_id = _run_with_everything(src)
    new = tmp_path / "new.atif.jsonl"
    X.export_run(run_id, new, store=src)
    text = new.read_text()
    assert text.count('"failure_kind": "wrong_tool"') == 1 and '"failure_mode"' not in text
    old = tmp_path / "old.atif.jsonl"
    old.write_text(text.replace('"failure_kind": ', '"failure_mode": '))  # only labels carry the key
    res = X.import_file(old, store=sqlite_url, again=True)
    first = S.list_trajectories(run_id=res.run_ids[0], store=sqlite_url, descending=False).rows[0]
    assert [h.failure_kind for h in S.label_history(first.id, store=sqlite_url)] == ["wrong_tool", None]


def test_foreign_atif_pictures_come_from_beside_the_document_and_nowhere_else(sqlite_url, tmp_path):
    """An ATIF 1.6 document's image parts: files in its folder and data URLs are kept; a link, a path
    out of the folder (by `..`, by a link, through a dot folder), a missing file and bytes that are no
    picture are counted on their step as pictures the import could not keep."""
    (tmp_path / "shots").mkdir()
    (tmp_path / "shots" / "screen.png").write_bytes(PNG)
    (tmp_path / "secret.png").write_bytes(JPEG)  # outside the document's folder
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "shots").mkdir()
    (docs / "shots" / "screen.png").write_bytes(PNG)
    (docs / "shots" / "zoom.png").write_bytes(ZOOMED)
    (docs / "shots" / "notes.png").write_bytes(b"not a picture at all")
    (docs / "shots" / "link.png").symlink_to(tmp_path / "secret.png")
    (docs / ".cache").mkdir()
    (docs / ".cache" / "x.png").write_bytes(PNG)

    def image(path: str) -> dict:
        return {"type": "image", "source": {"media_type": "image/png", "path": path}}

    doc = json.loads(json.dumps(FOREIGN))
    doc["schema_version"] = "ATIF-v1.6"
    doc["steps"][0]["message"] = [{"type": "text", "text": "What does the chart say?"}, image("shots/screen.png")]
    results = doc["steps"][1]["observation"]["results"]
    results[0]["content"] = [
        {"type": "text", "text": "zoomed"},
        image("shots/zoom.png"),
        image("data:image/jpeg;base64," + base64.b64encode(JPEG).decode()),
    ]
    results[1]["content"] = [
        image(where)
        for where in (
            "../secret.png",
            "https://example.com/x.png",
            "shots/gone.png",
            "shots/link.png",
            "shots/../../secret.png",
            ".cache/x.png",
            "shots/notes.png",
            "data:image/png;base64," + base64.b64encode(b"text, not a picture").decode(),
        )
    ]
    f = docs / "trajectory.atif.json"
    f.write_text(json.dumps(doc))
    res = X.import_file(f, store=sqlite_url)
    tid = S.list_trajectories(run_id=res.run_ids[0], store=sqlite_url).rows[0].id
    detail = S.get_trajectory(tid, store=sqlite_url)
    tr = detail.trajectory
    assert tr.goal == "What does the chart say?" and tr.steps[0].span["has_image"] is True
    store = S.connect(sqlite_url)
    pictures = S.shown_pictures(tid, store=store)
    assert pictures[0] == [PNG] and pictures[2] == [ZOOMED, JPEG] and 3 not in pictures
    assert tr.steps[2].observation.value == "zoomed" and tr.steps[3].span["n_images"] == 8


def test_a_document_reads_each_picture_file_once_and_no_more_bytes_than_its_budget(tmp_path):
    """A file named on many steps is read once; files past the document's byte budget are gaps."""
    from evalrx.interop.atif import from_atif

    (tmp_path / "a.png").write_bytes(PNG)
    (tmp_path / "b.png").write_bytes(ZOOMED)

    def image(path: str) -> dict:
        return {"type": "image", "source": {"media_type": "image/png", "path": path}}

    doc = json.loads(json.dumps(FOREIGN))
    doc["schema_version"] = "ATIF-v1.6"
    results = doc["steps"][1]["observation"]["results"]
    results[0]["content"] = [image("a.png"), image("a.png"), image("b.png")]
    results[1]["content"] = [image("a.png")]
    row = from_atif(doc, tmp_path, max_picture_bytes=len(PNG) + len(ZOOMED) - 1)
    first, second = [s for s in row["steps"] if s["role"] == "tool"]
    assert [p["base64"] for p in first["images"]] == [base64.b64encode(PNG).decode()] * 2
    assert first["span"]["n_images"] == 3 and second["images"][0]["sha256"] == hashlib.sha256(PNG).hexdigest()
    whole = from_atif(doc, tmp_path)
    assert len([s for s in whole["steps"] if s["role"] == "tool"][0]["images"]) == 3


def test_a_bundled_atif_export_unpacks_and_imports_with_its_pictures(sqlite_url, store_url, tmp_path):
    """What the app hands over for an ATIF export with pictures: a zip of the document and its images/,
    which, unpacked anywhere, imports with every picture."""
    import zipfile

    store = S.connect(sqlite_url)
    run_id = _run_with_everything(store)
    out = tmp_path / "export" / "run.atif.jsonl"
    X.export_run(run_id, out, store=store)
    packed = X.bundle(out)
    assert packed.name == "run.atif.jsonl.zip"
    with zipfile.ZipFile(packed) as zf:
        assert sorted(n.split("/")[0] for n in zf.namelist()) == ["images", "images", "images", "run.atif.jsonl"]
        zf.extractall(tmp_path / "elsewhere")
    again = S.connect(store_url)
    res = X.import_file(tmp_path / "elsewhere" / "run.atif.jsonl", store=again)
    before = {
        (r.sample_id, r.attempt): S.shown_pictures(r.id, store=store)
        for r in S.list_trajectories(run_id=run_id, store=store).rows
    }
    after = {
        (r.sample_id, r.attempt): S.shown_pictures(r.id, store=again)
        for r in S.list_trajectories(run_id=res.run_ids[0], store=again).rows
    }
    assert after == before and sum(len(v) for p in after.values() for v in p.values()) == 8
    lone = tmp_path / "lone" / "run.jsonl"
    X.export_run(run_id, lone, store=store)
    assert X.bundle(lone) == lone  # no pictures beside it: the file itself
    # a second export into the same folder bundles only the pictures it names
    (out.parent / "images" / ("0" * 64 + ".png")).write_bytes(PNG)
    rows = S.list_trajectories(run_id=run_id, store=store).rows
    pictured = next(r.id for r in rows if S.shown_pictures(r.id, store=store))
    one = out.with_name("one.atif.jsonl")
    assert X.export_trajectories([pictured], one, store=store) == 1
    with zipfile.ZipFile(X.bundle(one)) as zf:
        inside = [n for n in zf.namelist() if n.startswith("images/")]
    assert inside and all(n in one.read_text() for n in inside)
    assert f"images/{'0' * 64}.png" not in inside
