"""Multi-agent chat logs: Who&When runs (both subsets' formats) and Magentic-One message lists, imported by content,
each step keeping its agent and its source message, the people's labels landing as their own annotator's; and the
team surviving every export that reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evalrx.store as S
from evalrx.interop import ImportFormatError, export_run, import_file, import_labels, read_file

WHOWHEN = Path(__file__).resolve().parents[4] / "shared" / "data" / "whowhen_algorithm_generated"

# A Hand-Crafted (Magentic-One) run as the subset writes it: the speaker in `role`, the person as `human`.
HAND_CRAFTED = {
    "is_correct": False,
    "question": "How many studio albums did the band release before 2000?",
    "question_ID": "hc-1",
    "ground_truth": "4",
    "history": [
        {"role": "human", "content": "How many studio albums did the band release before 2000?"},
        {"role": "Orchestrator (thought)", "content": "Initial plan: ask WebSurfer to search the discography."},
        {"role": "Orchestrator (-> WebSurfer)", "content": "Search for the band's discography."},
        {"role": "WebSurfer", "content": "I typed 'discography' into the search box. The page lists 5 albums."},
        {"role": "Orchestrator (-> WebSurfer)", "content": "Count the studio albums before 2000."},
        {"role": "WebSurfer", "content": "There are 5 studio albums before 2000."},
        {"role": "Orchestrator (final answer)", "content": "FINAL ANSWER: 5"},
    ],
    "mistake_agent": "WebSurfer",
    "mistake_step": "5",
    "mistake_reason": "Counted a live album as a studio album.",
}


def _whowhen(n: int) -> dict:
    return json.loads((WHOWHEN / f"{n}.json").read_text())


def test_a_whowhen_algorithm_generated_run_keeps_each_agent_its_message_and_the_peoples_label(store_url):
    source = _whowhen(1)
    result = import_file(WHOWHEN / "1.json", store=store_url)
    assert (result.format, result.n_trajectories) == ("team_chat", 1)
    (row,) = S.list_trajectories(run_id=result.run_ids[0], store=store_url).rows
    detail = S.get_trajectory(row.id, store=store_url)
    traj = detail.trajectory
    # One step a history message, in order, each naming who wrote it and where it came from (1-based).
    assert [s.agent for s in traj.steps] == [m["name"] for m in source["history"]]
    assert [s.span["message"] for s in traj.steps] == list(range(1, len(source["history"]) + 1))
    assert [s.content for s in traj.steps] == [m["content"] for m in source["history"]]
    assert traj.goal == source["question"] and detail.case["expected"] == source["ground_truth"]
    roster = {m["name"]: m for m in traj.roster}
    assert set(source["system_prompt"]) <= set(roster)
    assert all(roster[n]["system_prompt"] == p for n, p in source["system_prompt"].items())
    assert "Computer_terminal" in roster  # spoke, though the log gives it no prompt
    (label,) = [x for x in S.current_labels(row.id, store=store_url) if x.step_idx is None]
    assert label.annotator == "who&when" and label.outcome == "fail"
    assert label.agent == source["mistake_agent"]
    assert traj.steps[label.first_wrong_step].span["message"] == int(source["mistake_step"]) + 1
    assert label.note == source["mistake_reason"]
    # The filter and the per-agent figures read the agents that took part.
    took_part = S.trajectory_agents(row.id, store=store_url)
    assert {a.agent: a.n_steps for a in took_part} == {
        n: sum(1 for m in source["history"] if m["name"] == n) for n in {m["name"] for m in source["history"]}
    }
    assert [r.id for r in S.list_trajectories(agent="Computer_terminal", store=store_url).rows] == [row.id]
    assert S.list_trajectories(agent="Nobody_Expert", store=store_url).rows == []


def test_every_whowhen_algorithm_generated_file_reads_with_its_label_on_a_step():
    files = sorted(WHOWHEN.glob("*.json"))
    assert len(files) == 126
    for path in files:
        fmt, (record,) = read_file(path)
        source = json.loads(path.read_text())
        assert fmt == "team_chat"
        assert len(record.traj.steps) == len(source["history"])
        (label,) = record.labels
        assert record.traj.steps[label["first_wrong_step"]].span["message"] == int(source["mistake_step"]) + 1
        assert label["agent"] == source["mistake_agent"]


def test_a_hand_crafted_run_names_the_person_the_speaker_and_the_addressee(tmp_path, sqlite_url):
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(HAND_CRAFTED))
    result = import_file(path, store=sqlite_url)
    (row,) = S.list_trajectories(run_id=result.run_ids[0], store=sqlite_url).rows
    traj = S.get_trajectory(row.id, store=sqlite_url).trajectory
    assert [(s.role.value, s.agent, s.addressee) for s in traj.steps] == [
        ("user", None, None),
        ("actor", "Orchestrator", None),
        ("actor", "Orchestrator", "WebSurfer"),
        ("actor", "WebSurfer", None),
        ("actor", "Orchestrator", "WebSurfer"),
        ("actor", "WebSurfer", None),
        ("actor", "Orchestrator", None),
    ]
    assert traj.steps[1].span["aside"] == "thought" and traj.steps[6].span["aside"] == "final answer"
    assert [m["name"] for m in traj.roster] == ["Orchestrator", "WebSurfer"]
    (label,) = S.current_labels(row.id, store=sqlite_url)
    assert (label.agent, label.first_wrong_step) == ("WebSurfer", 5)


def test_a_magentic_one_message_list_imports_and_agentrx_ground_truth_blames_its_agent(tmp_path, sqlite_url):
    path = tmp_path / "17.json"
    path.write_text(json.dumps(HAND_CRAFTED["history"]))
    result = import_file(path, store=sqlite_url)
    assert result.format == "team_chat"
    (row,) = S.list_trajectories(run_id=result.run_ids[0], store=sqlite_url).rows
    assert row.sample_id == "17"  # a bare message list is known by its file's name
    truth = [
        {
            "trajectory_id": 17,
            "failures": [
                {
                    "failure_id": 1,
                    "step_number": 6,
                    "step_reason": "At step 6 the count included a live album.",
                    "failure_category": "Misinterpretation of Tool Output",
                    "category_reason": "read the page wrong",
                    "failed_agent": "websurfer",
                }
            ],
            "root_cause": {"failure_id": 1, "reason_for_root_cause": "the count is wrong"},
        }
    ]
    gt = tmp_path / "truth.json"
    gt.write_text(json.dumps(truth))
    res = import_labels(gt, run_id=result.run_ids[0], store=sqlite_url)
    assert (res.n_labels, res.n_step_labels, res.unmatched) == (1, 1, [])
    labels = S.current_labels(row.id, store=sqlite_url)
    # The agent as the log spells it; the step is message 6's.
    assert {(x.step_idx, x.agent, x.first_wrong_step) for x in labels} == {
        (None, "WebSurfer", 5),
        (5, "WebSurfer", None),
    }


def test_a_single_agent_trajectorys_labels_name_no_agent(sqlite_url):
    data = Path(__file__).resolve().parents[4] / "shared" / "data" / "agentrx_tau_retail"
    run = import_file(data / "tau_dataset_failed.json", store=sqlite_url).run_ids[0]
    import_labels(data / "tau_ground_truth.json", run_id=run, store=sqlite_url)
    rows = S.list_trajectories(run_id=run, limit=100, store=sqlite_url).rows
    assert all(x.agent is None for r in rows for x in S.current_labels(r.id, store=sqlite_url))
    assert all(not S.trajectory_agents(r.id, store=sqlite_url) for r in rows)


@pytest.mark.parametrize("suffix", [".jsonl", ".atif.jsonl", ".otlp.json"])
def test_the_team_survives_an_export_and_its_import(tmp_path, sqlite_url, suffix):
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(HAND_CRAFTED))
    run = import_file(path, store=sqlite_url).run_ids[0]
    out = tmp_path / f"out{suffix}"
    export_run(run, out, store=sqlite_url, otel_content=True)
    again = import_file(out, store=sqlite_url)
    (before,) = S.list_trajectories(run_id=run, store=sqlite_url).rows
    (after,) = S.list_trajectories(run_id=again.run_ids[0], store=sqlite_url).rows
    a = S.get_trajectory(before.id, store=sqlite_url).trajectory
    b = S.get_trajectory(after.id, store=sqlite_url).trajectory
    actors = lambda t: [(s.agent, s.addressee, s.content) for s in t.steps if s.role.value == "actor"]  # noqa: E731
    assert actors(b) == actors(a)
    if suffix != ".otlp.json":  # OTLP carries who acted, not the roster's prompts or the labels
        assert b.roster == a.roster
        assert [x.agent for x in S.current_labels(after.id, store=sqlite_url)] == ["WebSurfer"]


@pytest.mark.parametrize(
    "history, says",
    [
        ([{"role": "A", "content": "x"}, {"content": "hi"}], "message 1 names no speaker"),
        ([{"role": "A", "content": "x"}, "x"], "message 1 is not an object"),
    ],
)
def test_a_broken_team_log_is_one_line_and_writes_nothing(tmp_path, sqlite_url, history, says):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"question": "q", "history": history}))
    with pytest.raises(ImportFormatError, match=says):
        import_file(path, store=sqlite_url)
    assert S.list_runs(store=sqlite_url) == []


def test_a_mistake_step_outside_the_log_is_named(tmp_path, sqlite_url):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**HAND_CRAFTED, "mistake_step": "40"}))
    with pytest.raises(ImportFormatError, match=r"bad.json: line 1: `mistake_step` 40 is not a message"):
        import_file(path, store=sqlite_url)
    assert S.list_runs(store=sqlite_url) == []


@pytest.mark.parametrize(
    "role, expected",
    [
        ("Orchestrator (-> WebSurfer)", ("Orchestrator", "WebSurfer", None)),
        ("Orchestrator (-> Coder(2))", ("Orchestrator", "Coder(2)", None)),
        ("Orchestrator (thought)", ("Orchestrator", None, "thought")),
        ("FileSurfer", ("FileSurfer", None, None)),
    ],
)
def test_a_magentic_one_role_gives_the_speaker_the_addressee_and_the_aside(role, expected):
    from evalrx.interop.team_chat import speaker

    assert speaker(role) == expected


def test_the_diagnosis_blames_an_agent_and_the_list_filters_and_sorts_by_it(store_url):
    runs = [import_file(WHOWHEN / f"{n}.json", store=store_url).run_ids[0] for n in (1, 2, 3)]
    rows = [r for run in runs for r in S.list_trajectories(run_id=run, store=store_url).rows]
    for row in rows:
        (top, *_) = S.get_diagnoses(row.id, store=store_url)
        steps = S.get_trajectory(row.id, store=store_url).trajectory.steps
        assert row.diagnosis_agent == top.agent == steps[top.first_wrong_step].agent is not None
        found = S.list_trajectories(diagnosis_agent=row.diagnosis_agent, store=store_url).rows
        assert row.id in [r.id for r in found]
    # sorted by the agent blamed, a page at a time (keyset cursors over the names)
    seen, after = [], None
    while True:
        page = S.list_trajectories(sort="diagnosis_agent", descending=False, limit=1, after=after, store=store_url)
        seen += [r.diagnosis_agent for r in page.rows]
        if page.next_cursor is None:
            break
        after = page.next_cursor
    assert seen == sorted(r.diagnosis_agent for r in rows)


def test_a_team_message_whose_content_is_parts_or_other_json_is_read_as_text(tmp_path):
    path = tmp_path / "parts.json"
    history = [
        {"role": "Orchestrator", "content": [{"type": "text", "text": "Look it up."}, {"type": "image_url"}]},
        {"role": "WebSurfer", "content": {"page": "results", "hits": 3}},
        {"role": "Coder", "content": 42},
    ]
    path.write_text(json.dumps({"question": "q", "history": history}))
    fmt, (record,) = read_file(path)
    assert [s.content for s in record.traj.steps] == ["Look it up.\n[image]", '{"page": "results", "hits": 3}', "42"]
