"""Export and import: the round trip, foreign formats, and malformed files that write nothing."""

from __future__ import annotations

import json
import random

import pytest
from sqlalchemy import text
from storehelpers import fill_run, make_case, make_trajectory

import evalrx.interop as X
import evalrx.store as S
from evalrx import reports
from evalrx.core import Label
from evalrx.store import runs
from evalrx.store.queries import pending_cases


def _labelled_run(store):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    cases = [make_case(i, image=png if i == 2 else None) for i in range(12)]
    rng = random.Random(7)
    trajs = [make_trajectory(c, rng) for c in cases]
    trajs[3].steps[1].content = 'unicode ✓ and "quotes"\nnew line'
    with store.write() as s:
        run_id = runs.create_run(
            s,
            name="labelled",
            config={"model": {"name": "evalrx-tiny", "backend": "hf_local"}, "tools": ["calculator"], "max_turns": 4},
            cases=cases,
        )
        for pos, cid, _ in pending_cases(s, run_id):
            runs.save_trajectory(s, run_id, cid, trajs[pos])
    rows = S.list_trajectories(run_id=run_id, store=store, descending=False).rows
    S.set_label(rows[0].id, "fail", failure_kind="wrong_tool", note="n1", annotator="ana", store=store)
    S.set_label(rows[0].id, "pass", annotator="ben", store=store)
    S.set_label(rows[1].id, "fail", step_idx=1, first_wrong_step=1, store=store)
    S.add_tag(rows[1].id, "regression", store=store)
    return run_id, trajs


def _counts(store):
    with store.read() as s:
        return {
            t: s.execute(text(f"SELECT count(*) FROM {t}")).scalar()
            for t in ("runs", "trajectories", "steps", "labels", "cases", "trajectory_tags")
        }


def test_round_trip_is_identical(store_url, tmp_path, sqlite_url):
    """Export a run, import it into an empty store (the other backend too), export again: same bytes."""
    src = S.connect(sqlite_url)
    run_id, trajs = _labelled_run(src)
    first = tmp_path / "first.jsonl"
    assert X.export_run(run_id, first, store=src) == 12
    result = X.import_file(first, store=store_url)
    assert result.n_trajectories == 12 and result.format == "evalrx" and len(result.run_ids) == 1
    second = tmp_path / "second.jsonl"
    X.export_run(result.run_ids[0], second, store=store_url)
    assert second.read_bytes() == first.read_bytes()
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    assert [r["sample_id"] for r in rows] == [t.sample_id for t in trajs]  # the run's case order
    assert rows[0]["labels"][0]["outcome"] == "fail" and rows[0]["labels"][1]["is_current"]
    assert rows[1]["tags"] == ["regression"] and rows[2]["case"]["image"]["mime"] == "image/png"
    assert rows[0]["run"] == {
        "name": "labelled",
        "config": {"model": {"name": "evalrx-tiny", "backend": "hf_local"}, "tools": ["calculator"], "max_turns": 4},
    }
    # grades and label history survive in the store itself, not only in the file
    imported = S.connect(store_url)
    info = S.get_run(result.run_ids[0], store=imported)
    assert info.source == "import" and info.status == "done" and info.n_done == 12
    assert info.n_pass == sum(t.outcome is Label.PASS for t in trajs)
    tid = S.find_trajectory(info.id, trajs[0].sample_id, store=imported)
    assert [h.outcome for h in S.label_history(tid, store=imported)] == ["fail", "pass"]


def test_import_of_evalrx_run_out_rows(sqlite_url, tmp_path):
    """Bare rows (case_id, meta and the trajectory, as `evalrx run --out` wrote them before it wrote export
    records) import as a run."""
    rng = random.Random(0)
    f = tmp_path / "run.jsonl"
    with f.open("w") as fh:
        for i in range(3):
            c = make_case(i)
            fh.write(json.dumps({"case_id": c.id, "meta": c.meta, **make_trajectory(c, rng).to_dict()}) + "\n")
    res = X.import_file(f, store=sqlite_url)
    info = S.get_run(res.run_ids[0], store=sqlite_url)
    assert info.name == "run" and info.n_cases == 3
    detail = S.get_trajectory(S.list_trajectories(store=sqlite_url).rows[0].id, store=sqlite_url)
    assert detail.case["meta"]["suite"] == "test"


def test_openai_records_that_repeat_a_case_become_its_attempts(sqlite_url, tmp_path):
    def rec(outcome, **extra):
        return {
            "id": "c1",
            "outcome": outcome,
            **extra,
            "messages": [{"role": "user", "content": "What is 3*4?"}, {"role": "assistant", "content": "12"}],
        }

    f = tmp_path / "repeats.jsonl"
    rows = [
        rec("pass"),
        rec("fail"),
        rec("pass"),
        dict(rec("fail"), id="c2", epoch=2),
        dict(rec("pass"), id="c2", epoch=1),
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = X.import_file(f, store=sqlite_url)
    got = S.attempts_of(res.run_ids[0], store=sqlite_url)
    assert [(a, o) for a, o, _, _ in got["c1"]] == [(1, "pass"), (2, "fail"), (3, "pass")]
    assert [(a, o) for a, o, _, _ in got["c2"]] == [(1, "pass"), (2, "fail")]
    assert reports.run_reliability(res.run_ids[0], store=sqlite_url).flaky_cases == ["c1", "c2"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rec("pass", attempt=0)) + "\n")
    with pytest.raises(X.ImportFormatError, match="attempt"):
        X.import_file(bad, store=sqlite_url)


def test_a_huge_imported_message_is_kept_in_part_as_a_run_step_is(sqlite_url, tmp_path):
    """A file is not bounded by max_new_tokens: the prompt, each step and the final answer are cut at the
    store's limit with a marker, and the real sizes are on the step span and the trajectory metrics."""
    from evalrx.store.convert import STORED_TEXT_LIMIT

    question, answer = "q" * (STORED_TEXT_LIMIT * 2), "a" * (STORED_TEXT_LIMIT * 3)
    row = {"id": "big", "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}
    f = tmp_path / "big.jsonl"
    f.write_text(json.dumps(row) + "\n")
    X.import_file(f, store=sqlite_url)
    detail = S.get_trajectory(S.list_trajectories(store=sqlite_url).rows[0].id, store=sqlite_url)
    tr = detail.trajectory
    kept = [tr.goal, tr.final_answer, detail.case["prompt"], *(s.content for s in tr.steps)]
    assert all(len(text) < STORED_TEXT_LIMIT + 100 and "truncated by evalrx" in text for text in kept)
    assert tr.metrics["truncated"] == {"goal": len(question), "final_answer": len(answer)}
    assert [s.span["truncated"]["content"] for s in tr.steps] == [len(question), len(answer)]


def test_import_openai_chat_messages(sqlite_url, tmp_path):
    f = tmp_path / "chats.jsonl"
    rows = [
        {
            "id": "c1",
            "expected": "12",
            "outcome": "pass",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 3*4?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "calculator", "arguments": '{"expression": "3*4"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "12"},
                {"role": "assistant", "content": "It is 12."},
            ],
        },
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": "x", "type": "function", "function": {"name": "lookup", "arguments": "{not json"}}
                    ],
                },
            ]
        },
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = X.import_file(f, store=sqlite_url)
    assert res.format == "openai" and res.n_trajectories == 2
    page = S.list_trajectories(store=sqlite_url, descending=False).rows
    first = S.get_trajectory(page[0].id, store=sqlite_url)
    t = first.trajectory
    assert [s.role.value for s in t.steps] == ["user", "actor", "tool", "actor"]
    assert [c.to_dict() for c in t.steps[1].tool_calls] == [
        {"name": "calculator", "args": {"expression": "3*4"}, "id": "call_1"}
    ]
    assert t.steps[2].content == "calculator" and t.steps[2].observation.value == "12"
    assert t.final_answer == "It is 12." and t.outcome is Label.PASS and t.terminated == "final"
    assert first.case["meta"]["system"] == "Be brief." and first.case["expected"] == "12"
    second = S.get_trajectory(page[1].id, store=sqlite_url).trajectory
    assert second.sample_id == "line-2" and "not valid JSON" in second.steps[1].parse_error
    assert second.terminated == "incomplete" and page[1].n_parse_errors == 1
    assert S.list_trajectories(store=sqlite_url, tool="calculator").rows[0].id == page[0].id


def _inspect_log():
    sample = lambda sid, epoch, value: {  # noqa: E731
        "id": sid,
        "epoch": epoch,
        "input": "How many r in strawberry?",
        "target": "3",
        "messages": [
            {"role": "system", "content": "You are helpful.", "source": "generate"},
            {"role": "user", "content": "How many r in strawberry?", "source": "input"},
            {
                "role": "assistant",
                "content": [{"type": "reasoning", "reasoning": "count"}, {"type": "text", "text": "Let me check."}],
                "tool_calls": [
                    {
                        "id": "t1",
                        "function": "python",
                        "arguments": {"code": "'strawberry'.count('r')"},
                        "type": "function",
                        "parse_error": None,
                    }
                ],
                "model": "gpt-4o-mini",
            },
            {"role": "tool", "content": "3", "tool_call_id": "t1", "function": "python", "error": None},
            {"role": "assistant", "content": "attachment://abc", "model": "gpt-4o-mini"},
        ],
        "output": {"model": "gpt-4o-mini", "choices": [], "completion": "There are 3."},
        "scores": {"match": {"value": value, "answer": "3", "explanation": "ok"}},
        "metadata": {"difficulty": "easy"},
        "model_usage": {"openai/gpt-4o-mini": {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}},
        "total_time": 2.5,
        "working_time": 1.25,
        "attachments": {"abc": "There are 3."},
    }
    return {
        "version": 2,
        "status": "success",
        "eval": {
            "task": "count_letters",
            "task_id": "T1",
            "run_id": "R1",
            "model": "openai/gpt-4o-mini",
            "created": "2025-01-01T00:00:00+00:00",
            "dataset": {"name": "letters"},
        },
        "plan": {},
        "results": {},
        "stats": {},
        "samples": [sample(1, 1, "C"), sample(1, 2, "I"), sample("b", 1, "C")],
    }


def test_import_inspect_eval_log(store_url, tmp_path):
    f = tmp_path / "2025-01-01_count-letters.json"
    f.write_text(json.dumps(_inspect_log(), indent=2))
    res = X.import_file(f, store=store_url)
    assert res.format == "inspect" and res.n_trajectories == 3
    info = S.get_run(res.run_ids[0], store=store_url)
    assert info.name == "count_letters (openai/gpt-4o-mini)" and info.backend == "inspect"
    assert info.n_pass == 2 and info.n_fail == 1
    rows = S.list_trajectories(store=store_url, descending=False).rows
    # Epochs are attempts of one case: pass@k reads them as it reads a run's repeats.
    assert [(r.sample_id, r.attempt) for r in rows] == [("1", 1), ("1", 2), ("b", 1)]
    rel = reports.run_reliability(res.run_ids[0], store=store_url)
    assert rel.flaky_cases == ["1"] and rel.pass_at_k[1] == 0.75
    t = S.get_trajectory(rows[0].id, store=store_url).trajectory
    assert t.final_answer == "There are 3." and t.goal == "How many r in strawberry?"
    assert t.steps[1].content == "<think>count</think>\nLet me check."
    assert [c.to_dict() for c in t.steps[1].tool_calls] == [
        {"name": "python", "args": {"code": "'strawberry'.count('r')"}, "id": "t1"}
    ]
    assert rows[0].prompt_tokens == 120 and rows[0].completion_tokens == 30 and rows[0].latency_ms == 1250.0
    assert rows[0].outcome == "pass" and rows[1].outcome == "fail"


@pytest.mark.parametrize(
    "content, where, problem",
    [
        ('{"sample_id": "a", "goal": "g", "steps": []}\n{"sample_id": "b", "steps": [\n', "line 2", "not valid JSON"),
        ('{"sample_id": "a", "steps": []}\n\n[1, 2]\n', "line 3", "expected a JSON object"),
        ('{"sample_id": "a", "steps": [{"role": "actor"}]}\n', "line 1", "step 0 has no 'idx'"),
        ('{"sample_id": "a", "steps": [{"idx": 0, "role": "robot"}]}\n', "line 1", "step 0"),
        ('{"sample_id": "a", "steps": [], "outcome": "meh"}\n', "line 1", "outcome 'meh'"),
        ('{"hello": 1}\n', "line 1", "neither an evalrx trajectory"),
        ('{"sample_id": "a", "steps": []}\n{"sample_id": "a", "steps": []}\n', "line 2", "appears twice"),
        ('{"messages": [{"role": "wizard", "content": "x"}]}\n', "line 1", "role 'wizard'"),
        ('{"messages": [{"role": "assistant", "content": "x"}]}\n', "line 1", "no user message"),
        (
            '{"sample_id": "a", "steps": [{"idx": 0, "role": "user"}], "labels": [{"first_wrong_step": 5}]}\n',
            "line 1",
            "first_wrong_step=5",
        ),
        ("", "line 1", "no trajectories"),
    ],
)
def test_malformed_files_name_file_line_and_problem_and_write_nothing(store_url, tmp_path, content, where, problem):
    store = S.connect(store_url)
    fill_run(store, 1, seed=9)  # something already there must stay as it is
    before = _counts(store)
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(X.ImportFormatError) as err:
        X.import_file(f, store=store)
    msg = str(err.value)
    assert str(f) in msg and where in msg and problem in msg, msg
    assert _counts(store) == before


def test_malformed_inspect_log_names_the_sample(sqlite_url, tmp_path):
    log = _inspect_log()
    log["samples"][1]["messages"][2]["tool_calls"][0]["function"] = None
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(log))
    with pytest.raises(X.ImportFormatError, match=r"bad.json: sample 1 \(id 1\): message 2: tool call 0 has no"):
        X.import_file(f, store=sqlite_url)
    f.write_text('{"eval": {},\n "samples": [}')
    with pytest.raises(X.ImportFormatError, match="line 2: not valid JSON"):
        X.import_file(f, store=sqlite_url)
    assert S.list_runs(store=sqlite_url) == []


def test_missing_file(sqlite_url, tmp_path):
    with pytest.raises(FileNotFoundError):
        X.import_file(tmp_path / "nope.jsonl", store=sqlite_url)


def test_parquet_export(sqlite_url, tmp_path):
    import pyarrow.parquet as pq  # the export extra is part of `make test`

    store = S.connect(sqlite_url)
    run_id, trajs = _labelled_run(store)
    assert X.export_run(run_id, tmp_path / "out.parquet", store=store) == 12
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["sample_id"] for r in table] == [t.sample_id for t in trajs]
    assert table[0]["label"] == "pass" and table[1]["tags"] == ["regression"]
    assert json.loads(table[5]["steps_json"]) == [s.to_dict() for s in trajs[5].steps]


def test_parquet_holds_pictures_as_bytes_named_by_hash(sqlite_url, tmp_path):
    """The case picture and a tool's: bytes in the `images` column, named by hash in the JSON columns."""
    import hashlib

    import pyarrow.parquet as pq

    card = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    zoomed = b"\xff\xd8\xff\xe0" + bytes(range(20))
    store = S.connect(sqlite_url)
    cases = [make_case(i, image=card if i == 0 else None) for i in range(2)]
    with store.write() as s:
        run_id = runs.create_run(s, name="pictures", config={}, cases=cases)
        for pos in range(2):
            traj = make_trajectory(cases[pos], random.Random(pos), n_turns=2)
            tid = runs.save_trajectory(s, run_id, pos + 1, traj)
            if pos == 0:
                tool = next(st.idx for st in traj.steps if st.role.value == "tool")
                runs.save_step_pictures(s, tid, {tool: [zoomed, card]})
    X.export_run(run_id, tmp_path / "out.parquet", store=store)
    first, second = pq.read_table(tmp_path / "out.parquet").to_pylist()
    sha = {b: hashlib.sha256(b).hexdigest() for b in (card, zoomed)}
    assert [(p["step_idx"], p["sha256"], p["mime"], p["data"]) for p in first["images"]] == [
        (None, sha[card], "image/png", card),
        (tool, sha[zoomed], "image/jpeg", zoomed),
        (tool, sha[card], "image/png", card),
    ]
    assert json.loads(first["case_json"])["image"] == {"sha256": sha[card], "mime": "image/png"}
    step = json.loads(first["steps_json"])[tool]
    assert [p["sha256"] for p in step["images"]] == [sha[zoomed], sha[card]] and "base64" not in first["steps_json"]
    assert second["images"] == [] and "image" not in json.loads(second["case_json"])


def test_a_parquet_export_of_no_trajectories_is_an_empty_table(sqlite_url, tmp_path):
    import pyarrow.parquet as pq

    store = S.connect(sqlite_url)
    with store.write() as s:
        run_id = runs.create_run(s, name="empty", config={}, cases=[make_case(0)])
    assert X.export_run(run_id, tmp_path / "none.parquet", store=store) == 0
    assert pq.read_table(tmp_path / "none.parquet").num_rows == 0


def test_export_of_a_missing_run(sqlite_url, tmp_path):
    with pytest.raises(ValueError, match="no run with id 7"):
        X.export_run(7, tmp_path / "x.jsonl", store=sqlite_url)
    assert list(tmp_path.glob("x.jsonl*")) == []


def test_a_file_written_before_labels_said_failure_kind_still_imports(sqlite_url, store_url, tmp_path):
    """Labels in older export files name their kind `failure_mode`: read as `failure_kind`, written back as it."""
    src = S.connect(sqlite_url)
    run_id, _ = _labelled_run(src)
    new = tmp_path / "new.jsonl"
    X.export_run(run_id, new, store=src)
    rows = [json.loads(line) for line in new.read_text().splitlines()]
    assert rows[0]["labels"][0]["failure_kind"] == "wrong_tool" and "failure_mode" not in rows[0]["labels"][0]
    for r in rows:  # the old writer's key
        r["labels"] = [
            {("failure_mode" if k == "failure_kind" else k): v for k, v in lab.items()} for lab in r["labels"]
        ]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = X.import_file(old, store=store_url)
    tid = S.find_trajectory(res.run_ids[0], rows[0]["sample_id"], store=store_url)
    assert [(h.outcome, h.failure_kind) for h in S.label_history(tid, store=store_url)] == [
        ("fail", "wrong_tool"),
        ("pass", None),
    ]
    again = tmp_path / "again.jsonl"
    X.export_run(res.run_ids[0], again, store=store_url)
    assert again.read_bytes() == new.read_bytes()


def test_parquet_names_the_label_kind_apart_from_the_diagnosis_kind(sqlite_url, tmp_path):
    import pyarrow.parquet as pq

    store = S.connect(sqlite_url)
    run_id, _ = _labelled_run(store)
    rows = S.list_trajectories(run_id=run_id, store=store, descending=False).rows
    S.set_label(rows[2].id, "fail", failure_kind="bad_arguments", store=store)
    X.export_run(run_id, tmp_path / "out.parquet", store=store)
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert "failure_mode" not in table[0] and {"label_kind", "failure_kind"} <= set(table[0])
    assert table[2]["label_kind"] == "bad_arguments" and table[0]["label_kind"] is None
