"""A team of agents in a real Chromium: two Who&When runs imported, the list filtered by an agent that took part,
one trajectory opened with each step's agent, the agent its diagnosis blames and the team's roster, and a label
that blames an agent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from apphelpers import goto, main_text, open_listed, poll, settle

import evalrx.store as S
from evalrx.interop import import_file

pytestmark = pytest.mark.browser

WHOWHEN = Path(__file__).resolve().parents[3] / "shared" / "data" / "whowhen_algorithm_generated"


def _imported(name: str, url: str) -> int:
    result = import_file(WHOWHEN / name, store=url)
    (row,) = S.list_trajectories(run_id=result.run_ids[0], store=url).rows
    return row.id


def _label(url: str, tid: int, annotator: str):
    return next((x for x in S.current_labels(tid, store=url) if x.step_idx is None and x.annotator == annotator), None)


def test_filter_by_an_agent_open_its_trajectory_see_the_team_and_blame_an_agent(app_server, app_env, page):
    url = app_env["EVALRX_DATABASE_URL"]
    tid = _imported("1.json", url)  # Excel_Expert, Computer_terminal, BusinessLogic_Expert, DataVerification_Expert
    other = _imported("10.json", url)  # Computer_terminal, Validation_Expert

    # The list: the Agent filter offers the agents that took part, and keeps only their trajectories.
    agent_filter = page.get_by_role("combobox", name="Agent", exact=True)

    def listed_with_the_filter() -> bool:  # the page caches its choices for 5 s: a page seen before may lack them
        goto(page, f"{app_server.url}/trajectories")
        return page.locator(f".st-key-row-{other}").count() == 1 and agent_filter.count() == 1

    poll(listed_with_the_filter, timeout=20, every=1, what="the agent filter")
    agent_filter.click()
    page.get_by_role("option", name="Excel_Expert", exact=True).click()
    page.wait_for_url(re.compile(r"agent=Excel_Expert"))
    settle(page)
    # the rerun that applies the filter may land after the URL changes (a busy machine): wait for the list itself
    poll(
        lambda: page.locator(f".st-key-row-{tid}").count() == 1 and page.locator(f".st-key-row-{other}").count() == 0,
        timeout=20,
        every=0.5,
        what="the list filtered by the agent",
    )
    assert "agent “Excel_Expert”" in main_text(page)
    assert "blames Excel_Expert" in page.locator(f".st-key-row-{tid}").inner_text()  # whom its diagnosis blames

    # The trajectory: every step names the agent that took it; the team's table and roster are there.
    open_listed(page, tid)
    page.wait_for_url(re.compile(rf"/trajectory\?id={tid}\b.*in_agent=Excel_Expert"))
    page.get_by_role("heading", name=f"Trajectory {tid}").wait_for()
    steps = S.get_trajectory(tid, store=url).trajectory.steps
    page.locator(f".st-key-step-{steps[-1].idx}").wait_for()
    (top,) = S.get_trajectory(tid, store=url).diagnoses
    card = page.locator(".st-key-why-it-failed").inner_text()
    assert f"blames {top.agent} at step {top.first_wrong_step}" in card  # the card names the agent it blames
    for step in steps:
        assert step.agent in page.locator(f".st-key-step-{step.idx}").inner_text().split("\n")[0]
    team = page.locator(".st-key-team")
    assert "Team of 4 agents" in team.inner_text() and "Computer_terminal\t2" in team.inner_text()
    team.get_by_text("Roster: what each agent was told").click()
    team.get_by_text("Expert in analyzing and processing data from Excel files").wait_for()
    # each agent keeps one colour: its steps' cards share one edge colour, and two agents' differ
    edges = [
        (s.agent, page.locator(f".st-key-step-{s.idx}").evaluate("e => getComputedStyle(e).borderLeftColor"))
        for s in steps[1:]  # (step 0, the first wrong step, is framed in red)
    ]
    colour = dict(edges)
    assert sorted(set(edges)) == sorted(colour.items()) and len(set(colour.values())) == len(colour) == 3

    # The label: the people's label blames Excel_Expert; blame DataVerification_Expert instead and fail it.
    assert "blames Excel_Expert" in main_text(page)
    page.get_by_label("Annotator").fill("e2e-teams")
    page.get_by_label("Annotator").press("Enter")
    settle(page)
    # (a rerun as the Annotator field loses focus can close the list just opened: open it until it stays)
    option = page.get_by_role("option", name="DataVerification_Expert", exact=True)

    def opened() -> bool:
        if not option.is_visible():
            page.get_by_role("combobox", name="Agent to blame").click()
            page.wait_for_timeout(500)
        return option.is_visible()

    poll(opened, timeout=20, every=0.5, what="the Agent to blame list open")
    option.click()
    settle(page)
    page.locator(".st-key-tl-fail button").first.click()
    saved = poll(lambda: _label(url, tid, "e2e-teams"), what="the label saved")
    assert (saved.outcome, saved.agent) == ("fail", "DataVerification_Expert")
    page.get_by_text(re.compile(r"blames DataVerification_Expert · by e2e-teams")).wait_for()
