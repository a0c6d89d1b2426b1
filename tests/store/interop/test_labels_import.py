"""Human labels from elsewhere: our labels CSV back in, labels JSONL, AgentRx ground truth, and the
taxonomy table that maps other projects' categories to our kinds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import evalrx.interop as X
import evalrx.store as S
from evalrx import reports
from evalrx.cli import main
from evalrx.core.failures import FAILURE_KINDS
from evalrx.core.taxonomies import TAXONOMY_KINDS, map_category

# The shared folder beside the checkout (CI lays a copy of it beside its fresh clone).
AGENTRX_GROUND_TRUTH = (
    Path(__file__).resolve().parents[4] / "shared" / "data" / "agentrx_tau_retail" / "tau_ground_truth.json"
)
SYSTEM = {"role": "system", "content": "You are a shop assistant. Confirm before changing an order."}


def _call(call_id: str, name: str, args: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


# Messages by 1-based index (the system message is 1), and the steps they become.
CHATS = [
    # 1 system, 2 user -> step 0, 3 call -> 1, 4 tool -> 2, 5 answer -> 3 (says 24 where the tool said 42)
    {
        "id": "101",
        "outcome": "fail",
        "messages": [
            SYSTEM,
            {"role": "user", "content": "How many shirts are in stock?"},
            {"role": "assistant", "content": None, "tool_calls": [_call("c1", "count_stock", {"item": "shirt"})]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "assistant", "content": "There are 24 shirts in stock."},
        ],
    },
    # 1 system, 2 user -> 0, 3 call -> 1, 4 tool -> 2, 5 answer -> 3
    {
        "id": "102",
        "outcome": "fail",
        "messages": [
            SYSTEM,
            {"role": "user", "content": "Cancel order 7."},
            {"role": "assistant", "content": None, "tool_calls": [_call("c2", "cancel_order", {"order": 7})]},
            {"role": "tool", "tool_call_id": "c2", "content": "cancelled"},
            {"role": "assistant", "content": "Order 7 is cancelled."},
        ],
    },
    # 1 system, 2 user -> 0, 3 answer -> 1, 4 user -> 2, 5 answer -> 3
    {
        "id": "103",
        "outcome": "fail",
        "messages": [
            SYSTEM,
            {"role": "user", "content": "Change my order."},
            {"role": "assistant", "content": "Which order, and what should change?"},
            {"role": "user", "content": "The blue one. Or maybe the red one."},
            {"role": "assistant", "content": "I changed the blue one."},
        ],
    },
]


def _import_chats(tmp_path: Path, url: str, *, again: bool = False) -> int:
    f = tmp_path / "chats.jsonl"
    f.write_text("".join(json.dumps(c) + "\n" for c in CHATS))
    return X.import_file(f, store=url, again=again).run_ids[0]


def _ids(run_id: int, url: str) -> dict:
    return {r.sample_id: r.id for r in S.list_trajectories(run_id=run_id, store=url).rows}


def _whole(tid: int, url: str):
    return next(lab for lab in S.current_labels(tid, store=url) if lab.step_idx is None)


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---------------------------------------------------------------- the taxonomy table


def test_every_mapped_category_is_one_of_our_kinds_and_names_match_loosely():
    assert {v for v in TAXONOMY_KINDS.values() if v is not None} <= set(FAILURE_KINDS)
    for (source, name), kind in TAXONOMY_KINDS.items():
        got = map_category(name, source)
        assert got == (kind or got) and (kind is not None or got not in FAILURE_KINDS), (source, name, got)
    assert map_category("  misinterpretation   OF tool output ") == "misread_observation"
    assert map_category("tool_output_misinterpretation") == "misread_observation"  # a TRAIL name as a key
    assert map_category("Invalid Invocation", "AgentRx") == "bad_arguments"
    assert map_category("Guardrails Triggered") == "guardrails_triggered"  # known, no kind of ours: custom
    assert map_category("Ignored Other Agent's Input", "mast") == "ignored_other_agents_input"
    assert map_category("wrong_tool") == "wrong_tool" and map_category("wrong_arguments") == "bad_arguments"
    assert map_category("my-team_kind") == "my-team_kind"  # a custom key from a store's export stays as it is
    with pytest.raises(ValueError, match="unknown taxonomy"):
        map_category("Step Repetition", "nope")


def test_agentrx_tau_retail_ground_truth_maps_every_failure_to_our_vocabulary():
    """The real AgentRx labels: all 29 root causes (and all 39 failures) land on built-in kinds."""
    records = json.loads(AGENTRX_GROUND_TRUTH.read_text())
    assert len(records) == 29
    roots = []
    for rec in records:
        by_id = {f["failure_id"]: f for f in rec["failures"]}
        roots.append(map_category(by_id[rec["root_cause"]["failure_id"]]["failure_category"], "agentrx"))
        for f in rec["failures"]:
            assert map_category(f["failure_category"], "agentrx") in FAILURE_KINDS, f["failure_category"]
    assert len(roots) == 29 and set(roots) <= set(FAILURE_KINDS)
    assert Counter(roots) == {
        "user_error": 8,  # with the System Failure at a user message, docs/diagnosis.md's 9 roots on the user's turns
        "misread_observation": 7,
        "wrong_goal": 7,
        "policy_violation": 3,
        "task_not_supported": 2,
        "bad_arguments": 1,
        "infra_error": 1,
    }


# ---------------------------------------------------------------- our CSV back in


def test_labels_csv_round_trips_into_another_store(sqlite_url, tmp_path):
    run_a = _import_chats(tmp_path, sqlite_url)
    ids = _ids(run_a, sqlite_url)
    S.set_label(
        ids["101"], "fail", failure_kind="misread_observation", first_wrong_step=3, annotator="ana", store=sqlite_url
    )
    S.set_label(
        ids["101"],
        "fail",
        failure_kind="misread_observation",
        step_idx=3,
        note="24 vs 42",
        annotator="ana",
        store=sqlite_url,
    )
    S.save_kind("team-odd_kind", store=sqlite_url)
    S.set_label(ids["102"], "fail", failure_kind="team-odd_kind", note="=SUM(A1)", annotator="bo", store=sqlite_url)
    S.set_label(ids["103"], "pass", store=sqlite_url)
    out = tmp_path / "labels.csv"
    assert X.export_labels_csv(out, run_id=run_a, store=sqlite_url) == 4

    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    S.upgrade(other)
    try:
        run_b = _import_chats(tmp_path, other)
        res = X.import_labels(out, store=other)
        assert (res.format, res.n_labels, res.n_step_labels, res.unmatched) == ("csv", 3, 1, [])
        assert res.kinds_created == ["team-odd_kind"] and res.annotators == ["ana", "bo"]
        back = tmp_path / "back.csv"
        X.export_labels_csv(back, run_id=run_b, store=other)

        def rows(p: Path) -> list:  # the columns that name this store's ids differ; the labels must not
            lines = [line.split(",", 3)[2:] for line in p.read_text().splitlines()]
            return lines

        assert rows(back) == rows(out)
        assert _whole(_ids(run_b, other)["102"], other).note == "=SUM(A1)"  # the export's quote undone
        again = X.import_labels(out, store=other)  # the same file again adds no history
        assert (again.n_labels, again.n_step_labels, again.n_unchanged) == (0, 0, 4)
    finally:
        S.forget(other)


# ---------------------------------------------------------------- labels JSONL


def test_labels_jsonl_by_message_index_and_by_step_index(sqlite_url, tmp_path):
    run = _import_chats(tmp_path, sqlite_url)
    ids = _ids(run, sqlite_url)
    f = _write(
        tmp_path / "reviewers.jsonl",
        [
            {"case_id": "101", "message": 5, "kind": "Tool Output Misinterpretation", "note": "said 24"},
            {"sample_id": "102", "attempt": 1, "step": 1, "kind": "Disobey Task Specification", "annotator": "cy"},
            {"trajectory_id": ids["103"], "outcome": "pass"},
            {"case_id": "nope", "kind": "wrong_tool"},
        ],
    )
    res = X.import_labels(f, store=sqlite_url)
    assert (res.format, res.n_labels, res.unmatched) == ("jsonl", 3, ["case nope"])
    a, b, c = (_whole(ids[k], sqlite_url) for k in ("101", "102", "103"))
    # message 5 (the answer) is step 3; a record without an annotator is the file's own
    assert (a.outcome, a.failure_kind, a.first_wrong_step, a.annotator) == (
        "fail",
        "misread_observation",
        3,
        "reviewers",
    )
    assert (b.failure_kind, b.first_wrong_step, b.annotator) == ("policy_violation", 1, "cy")
    assert (c.outcome, c.failure_kind, c.first_wrong_step) == ("pass", None, None)

    # the same cases in a second run: which one is meant must be said
    run2 = _import_chats(tmp_path, sqlite_url, again=True)
    res = X.import_labels(f, store=sqlite_url, annotator="dee")
    both = f"(in runs {run}, {run2}: choose one with --run)"
    assert res.unmatched[:2] == [f"case 101 {both}", f"case 102 attempt 1 {both}"]
    res = X.import_labels(f, store=sqlite_url, run_id=run2, annotator="dee")
    assert res.n_labels == 2 and res.annotators == ["dee"]  # trajectory 103's id is in the first run only
    assert res.unmatched == [f"trajectory {ids['103']} (not in run {run2})", f"case nope (not in run {run2})"]
    assert _whole(_ids(run2, sqlite_url)["101"], sqlite_url).annotator == "dee"


# ---------------------------------------------------------------- AgentRx ground truth


def _ground_truth() -> list:
    return [
        {
            "trajectory_id": 101,
            "failures": [
                {
                    "failure_id": 1,
                    "step_number": 3,
                    "step_reason": "At step 3 the agent counted before authenticating the user.",
                    "failure_category": "Instruction Adherence Failure",
                    "category_reason": "Policy says authenticate first.",
                    "failed_agent": "Assistant",
                },
                {
                    "failure_id": 2,
                    "step_number": 5,
                    "step_reason": "At step 5 the agent reported 24 where the tool said 42.",
                    "failure_category": "Misinterpretation of Tool Output",
                    "category_reason": "It misread the tool's count.",
                    "failed_agent": "Assistant",
                },
            ],
            "root_cause": {"failure_id": 2, "reason_for_root_cause": "The wrong count is what the user got."},
            "failure_summary": "Wrong count.",
        },
        {
            "trajectory_id": 102,
            "failures": [
                {
                    "failure_id": 1,
                    "step_number": 3,
                    "step_reason": "A filter blocked the cancellation.",
                    "failure_category": "Guardrails Triggered",
                    "category_reason": "The guardrail fired.",
                    "failed_agent": "Assistant",
                }
            ],
            "root_cause": {"failure_id": 1, "reason_for_root_cause": "Blocked."},
        },
        {
            "trajectory_id": 103,
            "failures": [
                {
                    "failure_id": 1,
                    "step_number": 4,
                    "step_reason": "The user named two orders.",
                    "failure_category": "Underspecified User Intent",
                    "category_reason": "The intent was ambiguous.",
                    "failed_agent": "User",
                }
            ],
            "root_cause": {"failure_id": 1, "reason_for_root_cause": "The user never said which order."},
        },
        {"trajectory_id": 999, "failures": [], "root_cause": {"failure_id": None}},
    ]


def test_agentrx_ground_truth_labels_the_root_cause_step_and_the_agreement_report_sees_it(store_url, tmp_path):
    run = _import_chats(tmp_path, store_url)
    ids = _ids(run, store_url)
    gt = tmp_path / "tau_ground_truth.json"
    records = _ground_truth()
    records[3]["failures"] = [dict(records[2]["failures"][0], failure_id=7)]
    records[3]["root_cause"] = {"failure_id": 7}
    gt.write_text(json.dumps(records))

    res = X.import_labels(gt, store=store_url)
    assert (res.format, res.n_labels, res.n_step_labels) == ("agentrx", 3, 4)
    assert res.unmatched == ["case 999"] and res.annotators == ["agentrx"]
    assert res.kinds_created == ["guardrails_triggered"]
    assert "guardrails_triggered" in {k.key for k in S.list_kinds(store=store_url)}

    a, b, c = (_whole(ids[k], store_url) for k in ("101", "102", "103"))
    # the root cause, not the first failure: message 5 is step 3
    assert (a.outcome, a.failure_kind, a.first_wrong_step, a.annotator) == ("fail", "misread_observation", 3, "agentrx")
    assert "Misinterpretation of Tool Output" in a.note and "The wrong count is what the user got." in a.note
    assert (b.failure_kind, b.first_wrong_step) == ("guardrails_triggered", 1)
    assert (c.failure_kind, c.first_wrong_step) == ("user_error", 2)  # message 4 is the user's second turn
    # every labelled failure is a step label, and comes back in the result for a benchmark to read
    steps = {
        lab.step_idx: lab.failure_kind
        for lab in S.current_labels(ids["101"], store=store_url)
        if lab.step_idx is not None
    }
    assert steps == {1: "policy_violation", 3: "misread_observation"}
    assert [(s.sample_id, s.step_idx, s.message, s.kind, s.root) for s in res.failure_steps] == [
        ("101", 1, 3, "policy_violation", False),
        ("101", 3, 5, "misread_observation", True),
        ("102", 1, 3, "guardrails_triggered", True),
        ("103", 2, 4, "user_error", True),
    ]

    again = X.import_labels(gt, store=store_url)
    assert (again.n_labels, again.n_step_labels, again.n_unchanged, again.kinds_created) == (0, 0, 7, [])

    # The Agreement tab's report: AgentRx is an annotator, the diagnosis scored against it
    agree = reports.label_agreement(run_id=run, store=store_url)
    assert agree["annotators"] == ["agentrx"]
    diagnosed = [tid for tid in ids.values() if S.get_diagnoses(tid, store=store_url)]
    assert ids["101"] in diagnosed  # the answer contradicts the tool: the rules diagnose it
    row = next(x for x in agree["auto"] if x["annotator"] == "agentrx")
    assert row["n"] == len(diagnosed)


def test_cli_labels_import_prints_what_was_stored_and_what_was_not_matched(sqlite_url, tmp_path, capsys):
    _import_chats(tmp_path, sqlite_url)
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(_ground_truth()[:3] + [dict(_ground_truth()[2], trajectory_id=555)]))
    assert main(["labels", "import", str(gt), "--annotator", "tau-people", "--url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "stored 3 labels and 4 step labels (agentrx) from tau-people" in out
    assert "new custom kinds: guardrails_triggered" in out
    assert "1 not matched to a stored trajectory: case 555" in out


# ---------------------------------------------------------------- labels among other files (the Import page)


def test_labels_files_are_told_from_trajectories_and_the_preview_names_the_runs_they_label(
    sqlite_url, tmp_path, capsys
):
    run = _import_chats(tmp_path, sqlite_url)
    ids = _ids(run, sqlite_url)
    reviewers = _write(tmp_path / "reviewers.jsonl", [{"case_id": "101", "kind": "wrong_tool"}, {"case_id": "nope"}])
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(_ground_truth()[:3], indent=1))
    trail = tmp_path / "trace-1.json"
    trail.write_text(json.dumps({"trace_id": "t1", "errors": [{"category": "Tool Selection Errors", "location": "a"}]}))
    S.set_label(ids["101"], "fail", failure_kind="wrong_tool", store=sqlite_url)
    csv_file = tmp_path / "run.labels.csv"
    X.export_labels_csv(csv_file, run_id=run, store=sqlite_url)
    export = tmp_path / "run.jsonl"  # trajectories that carry case ids and outcomes too
    X.export_run(run, export, store=sqlite_url)
    kinds = {f.name: X.labels_format(f) for f in (reviewers, gt, trail, csv_file, export, tmp_path / "chats.jsonl")}
    assert kinds == {
        "reviewers.jsonl": "jsonl",
        "gt.json": "agentrx",
        "trace-1.json": "trail",
        "run.labels.csv": "csv",
        "run.jsonl": None,
        "chats.jsonl": None,
    }

    pre = X.preview_labels(gt, store=sqlite_url)  # 3 records: a label per failure and one for the root cause
    assert (pre.format, pre.n_labels, pre.runs) == ("agentrx", 7, [(run, 7)])
    again = _import_chats(tmp_path, sqlite_url, again=True)
    assert X.preview_labels(reviewers, store=sqlite_url).runs == [(again, 1), (run, 1)]  # newest first among equals
    by_id = _write(tmp_path / "by-id.jsonl", [{"trajectory_id": ids["102"], "outcome": "pass"}])
    assert X.preview_labels(by_id, store=sqlite_url).runs == [(run, 1)]

    # `evalrx import` points at the command that reads them
    assert main(["import", str(reviewers), "--url", sqlite_url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds human labels (jsonl)" in err and "evalrx labels import" in err


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "name, content, problem",
    [
        (
            "bad.jsonl",
            '{"case_id": "101", "kind": "wrong_tool"}\n{"case_id": "102", "outcome": "maybe"}\n',
            "bad.jsonl: line 2: outcome must be one of pass, fail, unknown",
        ),
        ("bad.jsonl", '{"case_id": "101", "message": 9}\n', "bad.jsonl: line 1: message 9 is not a step of trajectory"),
        (
            "bad.jsonl",
            '{"case_id": "101", "step": 1, "message": 3}\n',
            "line 1: give the first wrong step as `step` or",
        ),
        ("bad.jsonl", '{"kind": "wrong_tool"}\n', "line 1: a label needs `case_id`"),
        ("bad.jsonl", '{"case_id": "101"\n', "bad.jsonl: line 1: not valid JSON"),
        ("bad.csv", "case,kind\n101,wrong_tool\n", "bad.csv: line 1: a labels CSV needs the columns"),
        ("bad.csv", "case_id,attempt,outcome\n101,first,fail\n", "bad.csv: line 2: attempt must be a whole number"),
        (
            "gt.json",
            '[{"trajectory_id": 101, "failures": "many"}]',
            "gt.json: record 1: AgentRx ground truth is a list",
        ),
        (
            "gt.json",
            json.dumps([{"trajectory_id": 101, "failures": [], "root_cause": {"failure_id": 3}}]),
            "gt.json: record 1 (trajectory_id 101): root_cause failure_id 3 is none of",
        ),
        ("empty.json", "  \n", "empty.json: line 1: the file is empty"),
    ],
)
def test_a_bad_labels_file_is_one_line_naming_the_place_and_nothing_is_written(
    sqlite_url, tmp_path, name, content, problem
):
    run = _import_chats(tmp_path, sqlite_url)
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(ValueError) as err:
        X.import_labels(f, store=sqlite_url)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(tmp_path)), message
    assert problem in message, message
    assert all(S.current_labels(tid, store=sqlite_url) == [] for tid in _ids(run, sqlite_url).values())
    assert main(["labels", "import", str(f), "--url", sqlite_url]) == 2  # the CLI: one line, status 2
