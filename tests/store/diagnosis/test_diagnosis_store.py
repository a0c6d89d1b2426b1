"""Diagnoses and the failure taxonomy in the store: kinds and hotkeys, legacy label keys, export and
import of the `diagnosis` object, `evalrx diagnose` and the per-run counts by kind."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy import select

import evalrx.interop as X
import evalrx.store as S
from evalrx.cli import main
from evalrx.core import FailureCase, Label, Step, StepRole, Trajectory
from evalrx.core.failures import DEFAULT_HOTKEYS, FAILURE_KINDS
from evalrx.diagnosis import diagnose
from evalrx.store import schema as t
from evalrx.store.runs import create_run, save_trajectory
from evalrx.suites import load_cases
from evalrx.tools import get_tools

TOOLS = ["calculator", "lookup"]


# ---------------------------------------------------------------- builders


def _case(suite: str, case_id: str) -> FailureCase:
    return next(c for c in load_cases(suite) if c.id == case_id)


def _traj(case: FailureCase, turns: list, answer: "str | None", outcome: Label) -> Trajectory:
    """Hand-made: each turn is a list of (tool, args, observation); then the answer turn."""
    steps = [Step(idx=0, role=StepRole.USER, content=case.inputs.prompt)]
    for turn in turns:
        steps.append(
            Step(
                idx=len(steps),
                role=StepRole.ACTOR,
                content="<tool_call>...</tool_call>",
                tool_calls=[{"name": n, "args": a} for n, a, _ in turn],
            )
        )
        for i, (n, _, obs) in enumerate(turn):
            steps.append(
                Step(
                    idx=len(steps),
                    role=StepRole.TOOL,
                    content=n,
                    observation={"text": obs, "n_images": 0},
                    span={"call": i},
                )
            )
    if answer is not None:
        steps.append(Step(idx=len(steps), role=StepRole.ACTOR, content=answer))
    return Trajectory(
        sample_id=case.id,
        goal=case.inputs.prompt,
        steps=steps,
        final_answer=answer,
        ground_truth=case.expected,
        outcome=outcome,
        metrics={"terminated": "final" if answer is not None else "max_turns"},
    )


def misread() -> tuple:
    """The height of Vafa (7915) copied as 7951 into the calculator: misread_observation at step 3."""
    c = _case("demo/two_step", "two_step-001")
    return c, _traj(
        c,
        [
            [("lookup", {"query": "height of Vafa"}, "The height of Vafa is 7915 m.")],
            [("calculator", {"expression": "7951 + 821"}, "8772")],
        ],
        "8772",
        Label.FAIL,
    )


def bad_arguments() -> tuple:
    """7 minus 3 computed as 7 + 3: bad_arguments at step 1."""
    c = _case("demo/arithmetic_easy", "arithmetic_easy-001")
    return c, _traj(c, [[("calculator", {"expression": "7 + 3"}, "10")]], "10", Label.FAIL)


def passing() -> tuple:
    c = _case("demo/lookup_easy", "lookup_easy-001")
    return c, _traj(
        c,
        [[("lookup", {"query": "founding year of Drogai"}, "The founding year of Drogai is 1124.")]],
        "1124",
        Label.PASS,
    )


def repeated() -> tuple:
    """The same lookup twice: repeated_calls at step 3."""
    c = _case("demo/lookup_easy", "lookup_easy-002")
    fact = "The population of Dothibraim is 312041."
    call = ("lookup", {"query": "population of Dothibraim"}, fact)
    return c, _traj(c, [[call], [call]], "312041", Label.FAIL)


def store_run(store, items: list, name: str = "diag") -> "tuple[int, dict]":
    """A finished run of (case, trajectory) items, each saved with its diagnoses; returns (run_id, case id -> tid)."""
    cases = [c for c, _ in items]
    tids = {}
    with store.write() as s:
        run_id = create_run(
            s,
            name=name,
            config={"model": {"name": "hand", "backend": "api"}, "tools": TOOLS},
            cases=cases,
            source="import",
            status="done",
        )
        ids = dict(s.execute(select(t.RunCase.position, t.RunCase.case_row_id).where(t.RunCase.run_id == run_id)).all())
        for pos, (case, traj) in enumerate(items):
            found = diagnose(traj, case=case, tools=get_tools(TOOLS, case))
            tids[case.id] = save_trajectory(s, run_id, ids[pos], traj, diagnoses=found)
    return run_id, tids


def _kinds(store) -> dict:
    return {k.key: k for k in S.list_kinds(store=store)}


# ---------------------------------------------------------------- the taxonomy


def test_a_new_store_holds_the_builtin_kinds_with_the_default_hotkeys(store_url):
    kinds = S.list_kinds(store=store_url)
    assert [k.key for k in kinds] == list(FAILURE_KINDS)
    assert all(k.builtin and k.definition for k in kinds)
    assert {k.key: k.hotkey for k in kinds if k.hotkey} == DEFAULT_HOTKEYS


def test_a_custom_kind_is_seen_by_another_process_on_the_same_store(store_url):
    info = S.save_kind("tool_timeout", "  the tool took too long  ", store=store_url)
    assert (info.key, info.definition, info.hotkey, info.builtin) == (
        "tool_timeout",
        "the tool took too long",
        None,
        False,
    )
    code = (
        "import json, sys, evalrx.store as S\n"
        "print(json.dumps([[k.key, k.definition, k.builtin] for k in S.list_kinds(store=sys.argv[1])]))"
    )
    out = subprocess.run([sys.executable, "-c", code, store_url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen[-1] == ["tool_timeout", "the tool took too long", False]  # custom kinds after the built-ins
    assert [k for k, _, b in seen if b] == list(FAILURE_KINDS)


def test_moving_a_hotkey_keeps_hotkeys_unique(store_url):
    assert _kinds(store_url)["bad_arguments"].hotkey == "1"
    S.save_kind("tool_timeout", "the tool took too long", hotkey="1", store=store_url)
    kinds = _kinds(store_url)
    assert kinds["tool_timeout"].hotkey == "1" and kinds["bad_arguments"].hotkey is None
    # back onto a built-in: its definition stays whatever is passed
    S.save_kind("wrong_tool", "a different definition", hotkey="1", store=store_url)
    kinds = _kinds(store_url)
    assert kinds["wrong_tool"].hotkey == "1" and kinds["tool_timeout"].hotkey is None
    assert kinds["wrong_tool"].definition == "called a tool other than the one the task needed"
    bound = [k.hotkey for k in kinds.values() if k.hotkey]
    assert len(bound) == len(set(bound))
    assert "3" not in bound  # wrong_tool's old key went with it


def test_delete_kind_removes_a_custom_kind_and_refuses_a_builtin(store_url):
    S.save_kind("tool_timeout", store=store_url)
    with pytest.raises(ValueError, match="'wrong_tool' is built in"):
        S.delete_kind("wrong_tool", store=store_url)
    S.delete_kind("tool_timeout", store=store_url)
    kinds = _kinds(store_url)
    assert "tool_timeout" not in kinds and "wrong_tool" in kinds
    with pytest.raises(ValueError, match="no failure kind 'tool_timeout'"):
        S.delete_kind("tool_timeout", store=store_url)


@pytest.mark.parametrize("key", ["no$good", "-dash-first", "k" * 61, "two\nlines"])
def test_a_bad_kind_key_is_refused_naming_it(sqlite_url, key):
    before = S.list_kinds(store=sqlite_url)
    with pytest.raises(ValueError, match="is not a valid failure kind") as exc:
        S.save_kind(key, store=sqlite_url)
    assert repr(key.strip().lower().replace(" ", "_")) in str(exc.value)
    assert S.list_kinds(store=sqlite_url) == before


def test_a_bad_hotkey_is_refused(sqlite_url):
    with pytest.raises(ValueError, match="hotkey '0' must be one of 1-9"):
        S.save_kind("tool_timeout", hotkey="0", store=sqlite_url)
    assert "tool_timeout" not in _kinds(sqlite_url)


def test_save_kind_normalises_the_key_and_maps_a_legacy_one(sqlite_url):
    assert S.save_kind("Tool Timeout", store=sqlite_url).key == "tool_timeout"
    legacy = S.save_kind("looping", store=sqlite_url)  # an old key is the built-in it became
    assert (legacy.key, legacy.builtin) == ("repeated_calls", True)
    assert "looping" not in _kinds(sqlite_url)


def test_a_label_with_a_legacy_failure_kind_stores_the_current_key(store_url):
    store = S.connect(store_url)
    _, tids = store_run(store, [repeated()])
    tid = next(iter(tids.values()))
    label = S.set_label(tid, "fail", failure_kind="looping", annotator="ana", store=store)
    assert label.failure_kind == "repeated_calls"
    assert S.label_history(tid, store=store)[0].failure_kind == "repeated_calls"
    row = S.list_trajectories(store=store).rows[0]
    assert row.label_kind == "repeated_calls" and row.diagnosis_kind == "repeated_calls"
    assert [r.id for r in S.list_trajectories(label_kind="repeated_calls", store=store).rows] == [tid]


# ---------------------------------------------------------------- diagnoses, export and import


def test_saved_diagnoses_are_read_back_best_first_and_index_the_top_kind(store_url):
    store = S.connect(store_url)
    case, traj = misread()
    run_id, tids = store_run(store, [(case, traj)])
    tid = tids[case.id]
    expected = diagnose(traj, case=case, tools=get_tools(TOOLS, case))
    got = S.get_diagnoses(tid, store=store)
    assert [d.to_dict() for d in got] == [d.to_dict() for d in expected]
    assert (got[0].kind, got[0].first_wrong_step, got[0].source) == ("misread_observation", 3, "reference")
    assert [r.id for r in S.list_trajectories(diagnosis_kind="misread_observation", store=store).rows] == [tid]
    assert S.get_trajectory(tid, store=store).diagnoses[0].kind == "misread_observation"


def test_export_writes_a_diagnosis_per_row_and_import_keeps_it(store_url, sqlite_url, tmp_path):
    src = S.connect(sqlite_url)
    items = [misread(), bad_arguments(), passing()]
    run_id, tids = store_run(src, items)
    out = tmp_path / "diag.jsonl"
    assert X.export_run(run_id, out, store=src) == 3
    rows = {r["case_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    m = rows["two_step-001"]["diagnosis"]
    assert (m["kind"], m["first_wrong_step"], m["source"]) == ("misread_observation", 3, "reference")
    assert m["evidence"]["diff"] == [{"arg": "expression", "expected": "7915 + 821", "actual": "7951 + 821"}]
    b = rows["arithmetic_easy-001"]["diagnosis"]
    assert (b["kind"], b["first_wrong_step"], b["source"]) == ("bad_arguments", 1, "reference")
    p = rows["lookup_easy-001"]["diagnosis"]
    assert p["kind"] is None and p["first_wrong_step"] is None and p["source"] is None
    assert list(S.iter_export_rows(run_id, store=src))[0]["diagnosis"] == rows["two_step-001"]["diagnosis"]

    res = X.import_file(out, store=store_url)
    dst = S.connect(store_url)
    new_run = res.run_ids[0]
    for case_id, row in rows.items():
        tid = S.find_trajectory(new_run, case_id, store=dst)
        got = S.get_diagnoses(tid, store=dst)
        if row["diagnosis"]["kind"] is None:
            assert got == []
            continue
        top = got[0]
        assert (top.kind, top.first_wrong_step, top.source) == (
            row["diagnosis"]["kind"],
            row["diagnosis"]["first_wrong_step"],
            row["diagnosis"]["source"],
        )
        assert top.evidence == row["diagnosis"]["evidence"]
    assert S.failure_kind_counts(new_run, store=dst) == {"bad_arguments": 1, "misread_observation": 1}
    again = tmp_path / "again.jsonl"
    X.export_run(new_run, again, store=dst)
    assert [json.loads(x)["diagnosis"] for x in again.read_text().splitlines()] == [
        json.loads(x)["diagnosis"] for x in out.read_text().splitlines()
    ]


def test_evalrx_diagnose_recomputes_stored_diagnoses_and_prints_counts(store_url, capsys):
    store = S.connect(store_url)
    run_id, tids = store_run(store, [misread(), bad_arguments(), passing()])
    before = {tid: [d.to_dict() for d in S.get_diagnoses(tid, store=store)] for tid in tids.values()}
    with store.write() as s:
        for tid in tids.values():
            S.save_diagnoses(s, tid, [])
    assert all(S.get_diagnoses(tid, store=store) == [] for tid in tids.values())
    assert S.failure_kind_counts(run_id, store=store) == {}

    assert main(["diagnose", str(run_id), "--url", store_url]) == 0
    out = capsys.readouterr().out
    assert "diagnosed 3 trajectories; by kind: bad_arguments 1, misread_observation 1" in out
    after = {tid: [d.to_dict() for d in S.get_diagnoses(tid, store=store)] for tid in tids.values()}
    assert after == before
    assert after[tids["lookup_easy-001"]] == []
    assert S.get_diagnoses(tids["two_step-001"], store=store)[0].source == "reference"


def test_evalrx_diagnose_one_trajectory(store_url, capsys):
    store = S.connect(store_url)
    run_id, tids = store_run(store, [misread(), bad_arguments()])
    with store.write() as s:
        for tid in tids.values():
            S.save_diagnoses(s, tid, [])
    tid = tids["arithmetic_easy-001"]
    assert main(["diagnose", "--trajectory", str(tid), "--url", store_url]) == 0
    assert "diagnosed 1 trajectory; by kind: bad_arguments 1" in capsys.readouterr().out
    assert S.get_diagnoses(tids["two_step-001"], store=store) == []
    assert S.get_diagnoses(tid, store=store)[0].kind == "bad_arguments"


def test_evalrx_diagnose_on_an_empty_store_names_the_upgrade_command(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    assert main(["diagnose", "--url", url]) == 2
    assert "evalrx db upgrade" in capsys.readouterr().err


def test_failure_kind_counts_counts_per_run(store_url):
    store = S.connect(store_url)
    first, _ = store_run(store, [misread(), bad_arguments(), passing()], name="first")
    second, _ = store_run(store, [bad_arguments(), repeated()], name="second")
    assert S.failure_kind_counts(first, store=store) == {"bad_arguments": 1, "misread_observation": 1}
    assert S.failure_kind_counts(second, store=store) == {"bad_arguments": 1, "repeated_calls": 1}
    both = S.failure_kind_counts(store=store)
    assert both == {"bad_arguments": 2, "misread_observation": 1, "repeated_calls": 1}
    assert list(both) == ["bad_arguments", "misread_observation", "repeated_calls"]  # most frequent first
    assert S.run_stats(first, store=store).diagnosis_kinds == {"bad_arguments": 1, "misread_observation": 1}
    assert S.failure_kind_counts(999, store=store) == {}
