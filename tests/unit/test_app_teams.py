"""Teams of agents on the pages: who took each step (a colour and a name), handoffs, the roster and the
per-agent table on the Trajectory page, the agent filter on the Trajectories page, and the agent a label
blames. A single agent's trajectory shows none of it. AppTest over a real SQLite store."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from appdata import fill_run  # noqa: E402
from apppages import list_cells, listed, open_page, pre_texts, row_htmls, store_url, texts  # noqa: E402,F401  (store_url: a fixture)
from components.labelling import blame_choices, describe_label  # noqa: E402
from components.team import edge_style, who_acted  # noqa: E402
from components.viewmodel import (  # noqa: E402
    agent_colours,
    agent_table,
    roster_rows,
    step_views,
    team_names,
    waterfall_rows,
)

import evalrx.store as S  # noqa: E402
from evalrx.core import Step, StepRole, Trajectory  # noqa: E402
from evalrx.interop import import_file  # noqa: E402

WHOWHEN_1 = ROOT.parent / "shared" / "data" / "whowhen_algorithm_generated" / "1.json"
HOSTILE = "<img src=x onerror=window.pwned=1>"

# A Magentic-One log as Who&When's Hand-Crafted subset writes it: the speaker in `role`, whom it addressed after
# "->"; one agent's name and its system prompt carry markup.
MAGENTIC = {
    "is_correct": False,
    "question": "How many studio albums did the band release before 2000?",
    "question_ID": "hc-1",
    "ground_truth": "4",
    "history": [
        {"role": "human", "content": "How many studio albums did the band release before 2000?"},
        {"role": "Orchestrator (thought)", "content": "Plan: ask WebSurfer to search the discography."},
        {"role": "Orchestrator (-> WebSurfer)", "content": "Search for the band's discography."},
        {"role": "WebSurfer", "content": "The page lists 5 albums."},
        {"role": f"Orchestrator (-> {HOSTILE})", "content": "Check the count."},
        {"role": HOSTILE, "content": "There are 5 studio albums before 2000."},
        {"role": "Orchestrator (final answer)", "content": "FINAL ANSWER: 5"},
    ],
    "system_prompt": {"WebSurfer": "You browse. <script>alert('prompt')</script> **not bold**"},
    "mistake_agent": "WebSurfer",
    "mistake_step": "3",
    "mistake_reason": "Counted a live album as a studio album.",
}


def _import(path: Path, url: str) -> int:
    result = import_file(path, store=url)
    (row,) = S.list_trajectories(run_id=result.run_ids[0], store=url).rows
    return row.id


@pytest.fixture
def teams(store_url, tmp_path):
    """A Who&When run, a Magentic-One run (with a hostile agent) and a run of one agent, in one store."""
    magentic = tmp_path / "magentic.json"
    magentic.write_text(json.dumps(MAGENTIC))
    single_run, single_ids = fill_run(store_url, 3, seed=2, name="one agent", outcomes=["fail", "pass", "fail"])
    return {
        "url": store_url,
        "whowhen": _import(WHOWHEN_1, store_url),
        "magentic": _import(magentic, store_url),
        "single_run": single_run,
        "single": single_ids[0],
    }


def _team() -> Trajectory:
    return Trajectory(
        sample_id="t",
        goal="g",
        steps=[
            Step(0, StepRole.USER, "question"),
            Step(1, StepRole.ACTOR, "plan", agent="Orchestrator", addressee="WebSurfer", span={"latency_ms": 5.0}),
            Step(2, StepRole.ACTOR, "found it", agent="WebSurfer", span={"latency_ms": 7.0, "aside": "thought"}),
            Step(3, StepRole.ACTOR, "done", agent="Orchestrator"),
        ],
        roster=[{"name": "Orchestrator", "system_prompt": "lead"}, {"name": "Coder", "description": "writes code"}],
    )


# ------------------------------------------------------------------ pure pieces


def test_a_teams_steps_name_their_agent_and_addressee_in_stable_colours():
    traj = _team()
    views = step_views(traj)
    assert [(v.agent, v.addressee, v.title) for v in views[1:]] == [
        ("Orchestrator", "WebSurfer", "Orchestrator -> WebSurfer"),
        ("WebSurfer", None, "WebSurfer"),
        ("Orchestrator", None, "Orchestrator"),
    ]
    assert views[2].aside == "thought"
    # roster first, then who else spoke or was spoken to; one colour a name, the same on every call
    assert team_names(traj) == ["Orchestrator", "Coder", "WebSurfer"]
    colours = agent_colours(traj)
    assert colours == agent_colours(_team()) and len(set(colours.values())) == 3 and "red" not in colours.values()
    assert who_acted(views[1], colours) == (
        f":{colours['Orchestrator']}-badge[:material/smart_toy: Orchestrator] \\-\\> "
        f":{colours['WebSurfer']}-badge[:material/smart_toy: WebSurfer]"
    )
    assert who_acted(views[2], colours).endswith(":gray[(thought)]")
    assert [r["label"] for r in waterfall_rows(traj)] == ["1 Orchestrator", "2 WebSurfer"]
    assert [(r["name"], r["system_prompt"], r["description"]) for r in roster_rows(traj)] == [
        ("Orchestrator", "lead", None),
        ("Coder", None, "writes code"),
        ("WebSurfer", None, None),
    ]
    css = edge_style(views, colours)
    assert ".st-key-step-1{" in css and ".st-key-step-3{" in css and ".st-key-step-0{" not in css
    assert blame_choices(traj) == ["Orchestrator", "Coder", "WebSurfer"]
    shares = [S.AgentShare("Orchestrator", 2, 5.0), S.AgentShare("WebSurfer", 1, 0.0)]
    assert agent_table(shares) == [
        {"agent": "Orchestrator", "steps": 2, "share of the team's steps": "67%", "latency": "5.0 ms"},
        {"agent": "WebSurfer", "steps": 1, "share of the team's steps": "33%", "latency": "-"},
    ]


def test_a_single_agents_steps_carry_no_agent():
    traj = Trajectory(sample_id="s", goal="g", steps=[Step(0, StepRole.USER, "q"), Step(1, StepRole.ACTOR, "a")])
    views = step_views(traj)
    assert views[1].title == "Model" and views[1].agent is None
    assert agent_colours(traj) == {} and team_names(traj) == [] and blame_choices(traj) == []
    assert edge_style(views, {}) == ""


# ------------------------------------------------------------------ Trajectory page


def test_the_trajectory_of_a_whowhen_run_shows_who_took_each_step_the_team_and_its_roster(teams):
    url, tid = teams["url"], teams["whowhen"]
    source = json.loads(WHOWHEN_1.read_text())
    at = open_page("trajectory", id=tid)
    headers = [str(m.value) for m in at.markdown if re.match(r":material/smart_toy: \*\*\d+ ·\*\*", str(m.value))]
    assert len(headers) == len(source["history"])
    colours = agent_colours(S.get_trajectory(tid, store=url).trajectory)
    for header, msg in zip(headers, source["history"]):
        name = msg["name"].replace("_", "\\_")
        assert f":{colours[msg['name']]}-badge[:material/smart_toy: {name}]" in header
    shown = texts(at)
    assert "**Team of 4 agents**" in shown
    # the per-agent table: every agent that spoke, with its steps (no timings in the log)
    table = next(h.proto.body for h in at.get("html") if "share of the team" in h.proto.body)
    assert "<td>Computer_terminal</td><td>2</td><td>33%</td><td>-</td>" in table
    # the roster, one click away: every system prompt the log gives, as text
    assert any(e.label.startswith("Roster") for e in at.expander)
    prompts = {" ".join(p.split()) for p in pre_texts(at)}  # (st.html empties a line of only spaces)
    assert all(" ".join(p.split()) in prompts for p in source["system_prompt"].values())
    assert "The log gives no system prompt or description for this agent." in shown  # Computer_terminal
    # the people's label names the agent they blame, and the form preselects it
    assert "blames **Excel\\_Expert**" in shown and "blames Excel\\_Expert" in shown
    assert at.selectbox(key=f"tl-agent-{tid}").value == "Excel_Expert"


def test_a_handoff_reads_speaker_arrow_addressee_and_agents_text_stays_text(teams):
    at = open_page("trajectory", id=teams["magentic"])
    shown = texts(at)
    assert "Orchestrator] \\-\\> :" in shown and "WebSurfer]" in shown
    assert ":gray[(thought)]" in shown and ":gray[(final answer)]" in shown
    for m in list(at.markdown) + list(at.caption):
        v = str(m.value)
        assert not re.search(r"(?<!\\)<", v), v  # the hostile agent's name is escaped wherever it shows
    assert MAGENTIC["system_prompt"]["WebSurfer"] in pre_texts(at)  # the prompt as text, markup and all
    for h in at.get("html"):
        assert "<script>alert" not in h.proto.body and "<img" not in h.proto.body


def test_a_single_agents_trajectory_shows_no_team(teams):
    at = open_page("trajectory", id=teams["single"])
    shown = texts(at)
    assert "Team of" not in shown and "-badge[:material/smart_toy:" not in shown and "1 · Model" in shown
    assert not any(e.label.startswith("Roster") for e in at.expander)
    assert not [s for s in at.selectbox if s.label == "Agent to blame"]
    assert not any("st-key-step" in h.proto.body for h in at.get("html"))


# ------------------------------------------------------------------ Trajectories page


def test_the_list_filters_by_an_agent_that_took_part(teams):
    url = teams["url"]
    at = open_page("trajectories")
    agent = at.selectbox(key="agent")
    assert set(agent.options) == {a.agent for a in S.run_agents(store=url)} and "WebSurfer" in agent.options
    agent.set_value("WebSurfer").run()
    assert [tid for tid, _ in listed(at)] == [teams["magentic"]]
    assert all(q.get("in_agent") == "WebSurfer" for _, q in listed(at))  # prev/next walk the filter
    assert "agent “WebSurfer”" in texts(at)
    at = open_page("trajectories", agent="Computer_terminal")
    assert [tid for tid, _ in listed(at)] == [teams["whowhen"]]
    # a run of one agent offers no agent filter
    at = open_page("trajectories", run=teams["single_run"])
    assert not [s for s in at.selectbox if s.label == "Agent"] and len(listed(at)) == 3


# ------------------------------------------------------------------ labelling


def test_a_label_blames_an_agent_and_the_current_label_says_so(teams):
    url, tid = teams["url"], teams["magentic"]
    at = open_page("trajectory", id=tid)
    at.text_input(key="annotator").set_value("ana")
    blame = at.selectbox(key=f"tl-agent-{tid}")
    assert blame.options == ["(none)", "Orchestrator", "WebSurfer", HOSTILE]
    blame.set_value("Orchestrator")
    at.button(key="tl-fail").click().run()
    label = next(x for x in S.current_labels(tid, store=url) if x.step_idx is None)
    assert (label.outcome, label.agent, label.annotator) == ("fail", "Orchestrator", "ana")
    assert describe_label(label) in texts(at) and "blames **Orchestrator**" in texts(at)
    history = next(h.proto.body for h in at.get("html") if "agent blamed" in h.proto.body)
    assert "<td>WebSurfer</td>" in history and "<td>Orchestrator</td>" in history
    at.button(key="tl-pass").click().run()  # a pass blames no one
    label = next(x for x in S.current_labels(tid, store=url) if x.step_idx is None)
    assert (label.outcome, label.agent) == ("pass", None)


# ------------------------------------------------------------------ the agent a diagnosis blames


def _card(at) -> str:
    """What the Why-it-failed card shows as Markdown and captions."""
    card = at.get_by_key("why-it-failed")
    return "\n".join(str(m.value) for m in [*card.get("markdown"), *card.get("caption")])


def _blame(
    url: str, tid: int, agent: "str | None", step: int, *, second: "tuple[str | None, int] | None" = None
) -> None:
    """Store a diagnosis of `tid` blaming `agent` at `step` (and a second source's other candidate)."""
    from evalrx.core import Diagnosis

    found = [Diagnosis(kind="wrong_final_answer", first_wrong_step=step, source="heuristic", agent=agent)]
    if second:
        found.append(Diagnosis(kind="tool_misuse", first_wrong_step=second[1], source="judge", agent=second[0]))
    with S.connect(url).write() as s:
        S.save_diagnoses(s, tid, found)


def test_blames_text_names_the_agent_escaped_and_nothing_for_one_agent():
    from components.diagnosis_card import blames_text

    assert blames_text("Analyst", 3) == "blames **Analyst** at step **3**"
    assert blames_text("Excel_Expert", None, bold=False) == "blames Excel\\_Expert"
    assert "<" not in blames_text(HOSTILE, 1).replace("\\<", "")
    assert blames_text(None, 3) == "" and blames_text("", 3) == ""


def test_the_why_it_failed_card_names_the_agent_it_blames_in_a_team(teams):
    url, tid = teams["url"], teams["whowhen"]
    (top,) = S.get_trajectory(tid, store=url).diagnoses
    assert top.agent == "Excel_Expert"  # the diagnosis of Who&When's first run, as imported
    card = _card(open_page("trajectory", id=tid))
    assert f"blames **Excel\\_Expert** at step **{top.first_wrong_step}**" in card
    assert "first wrong step **" not in card  # said once, with the agent
    # every source's proposal and the other candidates name theirs; a hostile name stays text
    _blame(url, teams["magentic"], HOSTILE, 5, second=("Orchestrator", 2))
    at = open_page("trajectory", id=teams["magentic"])
    card = _card(at)
    assert (
        "blames **" in card and "at step **5**" in card and "judge: **tool\\_misuse** · blames **Orchestrator**" in card
    )
    assert "**tool\\_misuse** blames Orchestrator at step 2 · judge" in card
    for m in list(at.markdown) + list(at.caption):
        assert not re.search(r"(?<!\\)<", str(m.value)), m.value


def test_a_single_agents_card_says_the_step_as_before(teams):
    url, tid = teams["url"], teams["single"]
    _blame(url, tid, None, 1, second=(None, 2))
    card = _card(open_page("trajectory", id=tid))
    assert "first wrong step **1**" in card  # the headline
    assert "judge: **tool\\_misuse** · step **2**" in card  # each source's proposal
    assert "**tool\\_misuse** at step 2 · judge" in card  # the other candidates
    assert "blames" not in card


def test_the_list_filters_and_sorts_by_the_agent_blamed_and_shows_it(teams):
    from components.filters import neighbours

    url = teams["url"]
    _blame(url, teams["magentic"], HOSTILE, 5)
    blamed = S.blamed_agents(store=url)
    assert set(blamed) == {"Excel_Expert", HOSTILE}
    at = open_page("trajectories")
    assert set(at.selectbox(key="blamed").options) == set(blamed)
    assert "blamed" in at.selectbox(key="sort").options
    rows = {tid: q for tid, q in listed(at)}
    assert len(rows) == 5
    blames = [cells[2] for cells in list_cells(at) if "blames " in cells[2]]
    assert len(blames) == 2  # the two teams' rows; a single agent's rows blame no one
    assert any("blames Excel_Expert" in b for b in blames) and any(f"blames {HOSTILE}" in b for b in blames)
    for m in at.markdown:
        assert not re.search(r"(?<!\\)<", str(m.value)), m.value
    assert not any("<img" in row for row in row_htmls(at))  # the hostile name is escaped in its badge
    # the filter, in the URL and on prev/next links
    at.selectbox(key="blamed").set_value("Excel_Expert").run()
    assert [tid for tid, _ in listed(at)] == [teams["whowhen"]]
    assert all(q.get("in_blamed") == "Excel_Expert" for _, q in listed(at))
    assert "blamed “Excel\\_Expert”" in texts(at)
    at = open_page("trajectories", blamed=HOSTILE)  # read from the URL
    assert [tid for tid, _ in listed(at)] == [teams["magentic"]]
    # the sort: by the agent blamed (a trajectory blaming no one sorts as ""), ties by id; prev/next walk it
    at = open_page("trajectories", sort="blamed", asc="true")
    order = [tid for tid, _ in listed(at)]
    assert order == [r.id for r in S.list_trajectories(sort="diagnosis_agent", descending=False, store=url).rows]
    assert order[-2:] == [teams["magentic"], teams["whowhen"]]  # "<img..." before "Excel_Expert"
    for i, tid in enumerate(order):
        row = S.get_trajectory(tid, store=url).row
        prev, nxt = neighbours(row, {"sort": "blamed", "asc": "true"}, store=url)
        assert (prev, nxt) == (order[i - 1] if i else None, order[i + 1] if i + 1 < len(order) else None)
    # a run of one agent offers neither the filter nor the sort
    at = open_page("trajectories", run=teams["single_run"])
    assert not [s for s in at.selectbox if s.label == "Blamed agent"]
    assert "blamed" not in at.selectbox(key="sort").options and "blames" not in texts(at)
    assert list_cells(at) and not any("blames" in cells[2] for cells in list_cells(at))


# ------------------------------------------------------------------ agreement on the agent and the step


def test_attribution_agreement_counts_the_same_agent_and_step_with_wilson_intervals():
    from scipy.stats import binomtest

    from evalrx.runstats import attribution_agreement, wilson_share

    truth = {1: ("A", 3), 2: ("B", 5), 3: ("A", None), 4: (None, 2)}
    guess = {1: ("A", 3), 2: ("A", 5), 3: ("A", 1), 4: ("C", 2), 5: ("A", 0)}  # 5: no truth, not scored
    out = attribution_agreement(truth, guess)
    assert out["n"] == 4
    assert (out["agent"]["k"], out["agent"]["n"]) == (2, 3)  # items 1 and 3 (4 names no agent)
    assert (out["step"]["k"], out["step"]["n"]) == (3, 3)  # items 1, 2 and 4 (3 gives no step)
    ci = binomtest(2, 3).proportion_ci(method="wilson")
    assert out["agent"]["low"] == pytest.approx(ci.low) and out["agent"]["high"] == pytest.approx(ci.high)
    assert attribution_agreement({1: ("A", 1)}, {1: (None, None)})["agent"]["k"] == 0  # naming no one never agrees
    one = wilson_share(1, 1)
    assert (
        one["share"] == 1.0 and one["high"] == pytest.approx(1.0) and one["low"] == pytest.approx(1 / (1 + 1.959964**2))
    )
    assert wilson_share(0, 0) == {"k": 0, "n": 0, "share": None, "low": None, "high": None}


def _agreement_rows(at):
    (frame,) = [d.value for d in at.dataframe if "kind κ" in d.value.columns]
    return frame


def test_the_agreement_tab_scores_the_diagnosis_on_the_agent_and_the_step_of_each_annotator(teams):
    from evalrx.reports import label_agreement

    url, tid = teams["url"], teams["whowhen"]
    (top,) = S.get_trajectory(tid, store=url).diagnoses
    (people,) = [x for x in S.current_labels(tid, store=url) if x.annotator == "who&when"]
    assert (top.agent, top.first_wrong_step) == (people.agent, people.first_wrong_step)  # run 1: both right
    # a second person blames another agent at another step
    S.set_label(
        tid, "fail", first_wrong_step=people.first_wrong_step + 2, agent="Computer_terminal", annotator="ana", store=url
    )
    run = S.get_trajectory(tid, store=url).row.run_id
    agree = label_agreement(run_id=run, store=url)
    assert agree["teams"]
    by = {(r["annotator"], r["diagnosis"]): r["attribution"] for r in agree["auto"]}
    ww, ana = by[("who&when", "top")], by[("ana", "top")]
    assert (ww["agent"]["k"], ww["agent"]["n"], ww["step"]["k"], ww["step"]["n"]) == (1, 1, 1, 1)
    assert (ana["agent"]["k"], ana["agent"]["n"], ana["step"]["k"], ana["step"]["n"]) == (0, 1, 0, 1)
    assert by[("who&when", "heuristic")] == ww  # each source's best candidate is scored as well

    at = open_page("runs", run=run, view="Agreement")
    rows = _agreement_rows(at).set_index(["annotator", "diagnosis"])
    w = rows.loc[("who&when", "top")]
    assert (w["same agent"], w["same agent %"], w["agent 95% CI"]) == ("1/1", 100.0, "0.21–1.00")
    assert (w["same step"], w["same step %"], w["step 95% CI"]) == ("1/1", 100.0, "0.21–1.00")
    a = rows.loc[("ana", "top")]
    assert (a["same agent"], a["same agent %"], a["agent 95% CI"]) == ("0/1", 0.0, "0.00–0.79")
    assert (a["same step"], a["step 95% CI"]) == ("0/1", "0.00–0.79")
    assert "kind κ" in rows.columns and "step exact" in rows.columns  # beside the kind and step agreement
    assert any("*same agent* counts" in c.value for c in at.caption)


def test_the_agreement_tab_scores_what_another_runs_diagnosis_named(teams):
    """Who&When's second run (the diagnosis and the people may part): each figure is what the diagnosis named."""
    url = teams["url"]
    tid = _import(WHOWHEN_1.with_name("2.json"), url)
    (top,) = S.get_trajectory(tid, store=url).diagnoses
    (people,) = [x for x in S.current_labels(tid, store=url) if x.annotator == "who&when"]
    at = open_page("runs", run=S.get_trajectory(tid, store=url).row.run_id, view="Agreement")
    w = _agreement_rows(at).set_index(["annotator", "diagnosis"]).loc[("who&when", "top")]
    assert w["same agent"] == f"{int(top.agent == people.agent)}/1"
    assert w["same step"] == f"{int(top.first_wrong_step == people.first_wrong_step)}/1"


def test_a_single_agents_agreement_tab_shows_no_agent_columns(teams):
    url, run, tid = teams["url"], teams["single_run"], teams["single"]
    _blame(url, tid, None, 1)
    S.set_label(tid, "fail", failure_kind="wrong_final_answer", first_wrong_step=1, annotator="ana", store=url)
    from evalrx.reports import label_agreement

    agree = label_agreement(run_id=run, store=url)
    assert not agree["teams"] and all(r["attribution"] is None for r in agree["auto"])
    at = open_page("runs", run=run, view="Agreement")
    rows = _agreement_rows(at)
    assert set(rows["annotator"]) == {"ana"} and list(rows["step exact"]) == [1.0] * len(rows)
    assert not [c for c in rows.columns if "agent" in c or c.startswith("same")]
    assert not any("same agent" in c.value for c in at.caption)
