"""The pages and real tools: New run on a BFCL suite (no built-in tools by default), saved MCP servers
(a secret is never stored), and the Trajectory page's offered tools, call schemas and grade reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from apppages import open_page, pre_texts, store_url, texts  # noqa: E402,F401  (store_url: a fixture)
from test_bfcl_cases import Scripted, call  # noqa: E402

import evalrx.store as S  # noqa: E402
from evalrx.models.agent import run_case  # noqa: E402
from evalrx.suites import case_tools, load_cases  # noqa: E402


def _stored_bfcl_failure(url: str) -> int:
    """A BFCL case whose call has a wrong value, run by a scripted model and stored as a worker would."""
    from evalrx.diagnosis import diagnose
    from evalrx.store import runs
    from evalrx.store.queries import pending_cases

    case = next(c for c in load_cases("bfcl/simple_python") if c.id == "simple_python_0")
    traj = run_case(
        Scripted(call("calculate_triangle_area", base=10, height=5, unit="cm")), case, case_tools(case), grade=True
    )
    found = diagnose(traj, case=case, tools=case_tools(case))
    with S.connect(url).write() as s:
        run_id = runs.create_run(
            s, name="bfcl", config={"model": {"name": "evalrx-tiny", "backend": "hf_local"}}, cases=[case]
        )
        ((_, case_row_id, _),) = pending_cases(s, run_id)
        return runs.save_trajectory(s, run_id, case_row_id, traj, diagnoses=found)


def test_trajectory_page_shows_offered_tools_call_schemas_and_why_the_grade_failed(store_url):
    tid = _stored_bfcl_failure(store_url)
    at = open_page("trajectory", id=tid)
    shown = texts(at)
    assert "Why the grade failed" in shown
    assert "`unit`: got 'cm', want one of 'units', ''" in pre_texts(at)
    labels = [e.label for e in at.expander]
    assert "Tools offered (1)" in labels
    # Markdown-escaped: a tool's name and where it came from are untrusted text.
    assert "schema of calculate\\_triangle\\_area · the case\\'s own document" in labels
    assert "calls **calculate\\_triangle\\_area**" in shown or "calls **calculate_triangle_area**" in shown


def test_new_run_offers_the_tools_a_suite_was_written_for(store_url):
    """The demo VLM's image suites name calculator, image_zoom and lookup; the text suites no image_zoom."""
    at = open_page("new_run")
    at.selectbox(key="spec").set_value("evalrx-tiny-vl").run()
    at.selectbox(key="suite").set_value("demo/vision_zoom").run()
    assert not at.exception
    shown = at.multiselect(key="tools-False-calculator-image_zoom-lookup").value
    assert shown == ["calculator", "image_zoom", "lookup"]
    at.selectbox(key="suite").set_value("demo/lookup_easy").run()
    assert at.multiselect(key="tools-False-calculator-lookup").value == ["calculator", "lookup"]


def test_new_run_on_a_bfcl_suite_offers_no_built_in_tools_by_default(store_url):
    at = open_page("new_run")
    at.selectbox(key="suite").set_value("bfcl/simple_python").run()
    assert not at.exception
    assert at.multiselect(key="tools-True-").value == []
    assert "Each case brings its own functions" in texts(at)
    at.number_input(key="limit").set_value(2)
    at.button(key="launch").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (run,) = S.list_runs(store=store_url)
    assert run.config["tools"] == [] and run.config["suite"] == "bfcl/simple_python" and run.n_cases == 2


def test_a_saved_mcp_server_keeps_secrets_as_names_and_reaches_the_run(store_url):
    at = open_page("new_run")
    at.text_input(key="mcp_new_name").set_value("git")
    at.text_area(key="mcp_new_entry").set_value(
        json.dumps({"command": "python", "args": ["-m", "mcp_server_git"], "env": {"GITHUB_TOKEN": "ghp_literal"}})
    )
    at.button(key="mcp_save").click().run()
    assert [e.value for e in at.error] and "GITHUB\\_TOKEN" in at.error[0].value and "secret" in at.error[0].value
    assert S.list_mcp_servers(store=store_url) == []  # refused: nothing stored
    at.text_area(key="mcp_new_entry").set_value(
        json.dumps({"command": "python", "args": ["-m", "mcp_server_git"], "env": {"GITHUB_TOKEN": "${GH_TOKEN}"}})
    )
    at.button(key="mcp_save").click().run()
    assert not at.exception
    (saved,) = S.list_mcp_servers(store=store_url)
    assert saved["name"] == "git" and saved["env"] == {"GITHUB_TOKEN": "${GH_TOKEN}"}
    at.multiselect(key="mcp").set_value(["git"])
    at.number_input(key="limit").set_value(1)
    at.button(key="launch").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (run,) = S.list_runs(store=store_url)
    assert run.config["mcp_servers"] == [saved]
    assert "ghp_" not in json.dumps(run.config)


def test_trajectory_page_numbers_user_turns_and_shows_the_state_difference(store_url):
    from test_bfcl_cases import _multi_turn_script

    from evalrx.config import ModelConfig, RunConfig
    from evalrx.diagnosis import diagnose
    from evalrx.runner.toolset import static_tools
    from evalrx.store import runs
    from evalrx.store.queries import pending_cases

    case = load_cases("bfcl/multi_turn_base")[0]

    def wrong(k, name, args):
        return (name, dict(args, destination="archive")) if (k, name) == (0, "mv") else (name, args)

    tools = static_tools(RunConfig(model=ModelConfig("scripted"), tools=[]), case)
    traj = run_case(Scripted(*_multi_turn_script(case, wrong)), case, tools, grade=True, max_turns=3)
    with S.connect(store_url).write() as s:
        run_id = runs.create_run(
            s, name="mt", config={"model": {"name": "evalrx-tiny", "backend": "hf_local"}}, cases=[case]
        )
        ((_, case_row_id, _),) = pending_cases(s, run_id)
        tid = runs.save_trajectory(s, run_id, case_row_id, traj, diagnoses=diagnose(traj, case=case, tools=tools))
    at = open_page("trajectory", id=tid)
    shown = texts(at)
    for k in range(1, 5):
        assert f"User\\, turn {k}" in shown  # Markdown-escaped on the page
    assert "State after that turn, where it differs (agent vs ground truth)" in shown
    assert any(t.startswith('{\n  "GorillaFileSystem"') for t in pre_texts(at))  # the diff, as JSON


def test_served_beyond_this_machine_the_page_names_no_command_or_function_unless_the_operator_allows(
    store_url, monkeypatch
):
    from streamlit import config

    ENV_COMMANDS = "EVALRX_APP_COMMANDS"  # components.access's name for it (the app's packages are not on this path)
    monkeypatch.setenv("EVALRX_ALLOW_UNAUTHENTICATED", "1")  # behind an authenticating proxy, say
    monkeypatch.delenv(ENV_COMMANDS, raising=False)
    config.set_option("server.address", "0.0.0.0")
    try:
        at = open_page("new_run")
        assert at.text_input(key="py_tools").disabled and at.text_area(key="mcp_new_entry").disabled
        assert at.button(key="mcp_save").disabled
        assert f"{ENV_COMMANDS}=1" in texts(at)
        monkeypatch.setenv(ENV_COMMANDS, "1")
        at = open_page("new_run")
        assert not at.text_input(key="py_tools").disabled and not at.button(key="mcp_save").disabled
    finally:
        config.set_option("server.address", "127.0.0.1")


def _launch_on_new_run(spec: str, suite: str, limit: int, **picked):
    """Launch a run from the New run form (its defaults, unless `picked` sets a widget by key)."""
    at = open_page("new_run")
    at.selectbox(key="spec").set_value(spec).run()
    at.selectbox(key="suite").set_value(suite).run()
    at.number_input(key="limit").set_value(limit)
    for key, value in picked.items():
        next(w for w in at.multiselect if w.key.startswith(key)).set_value(value)
    at.button(key="launch").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    return at


def _offered_and_outcomes(run_id: int, url: str) -> dict:
    out = {}
    for row in S.list_trajectories(run_id=run_id, store=url).rows:
        detail = S.get_trajectory(row.id, store=url)
        out[row.sample_id] = ([t["name"] for t in detail.trajectory.offered_tools], row.outcome)
    return out


def test_the_cli_and_new_run_offer_a_suite_the_same_tools_and_get_the_same_outcomes(store_url):
    """One default for both doors: the tools the suite's cases name, in their order, not the text demo's pair."""
    from evalrx.cli import main
    from evalrx.runner import Worker

    suite = "demo/vision_read"
    # One case each way keeps it cheap (two model loads); the tools decide the prompt of every case alike.
    assert main(["run", "--spec", "evalrx-tiny-vl", "--suite", suite, "--limit", "1", "--url", store_url]) == 0
    _launch_on_new_run("evalrx-tiny-vl", suite, 1)
    Worker(S.connect(store_url), exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()

    cli_run, app_run = sorted(S.list_runs(store=store_url), key=lambda r: r.id)
    named = load_cases(suite)[0].meta["tools"]
    assert cli_run.config["tools"] == app_run.config["tools"] == named
    by_cli, by_app = _offered_and_outcomes(cli_run.id, store_url), _offered_and_outcomes(app_run.id, store_url)
    assert len(by_cli) == 1 and by_cli == by_app
    assert all(offered == named for offered, _ in by_cli.values())


def test_tools_given_in_any_order_reach_the_run_in_one_order_and_the_cli_names_its_run(store_url):
    """The order is part of the prompt: typed or picked in another order, the run is the same; --name names it."""
    from evalrx.cli import main

    suite, named = "demo/vision_zoom", load_cases("demo/vision_zoom")[0].meta["tools"]
    argv = ["run", "--spec", "evalrx-tiny-vl", "--suite", suite, "--limit", "1", "--url", store_url]
    assert main([*argv, "--tools", ",".join(reversed(named)), "--name", " zoom check "]) == 0
    assert main([*argv, "--name", ""]) == 0  # blank: the default name, as the form's empty field gives
    _launch_on_new_run("evalrx-tiny-vl", suite, 1, tools=list(reversed(named)))
    runs = sorted(S.list_runs(store=store_url), key=lambda r: r.id)
    assert [r.config["tools"] for r in runs] == [named] * 3
    assert [r.name for r in runs] == ["zoom check", f"evalrx-tiny-vl on {suite}", f"evalrx-tiny-vl on {suite}"]
