"""BFCL v4 multi-turn: stateful environments built fresh from a spec, the multi-turn suites, grading by state
on hand-made trajectories, and agreement with BFCL's own `multi_turn_checker` on made-up outputs for every
`multi_turn_base` entry (the ground truth, a changed argument, a dropped call, an extra read, an empty turn).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from evalrx.core.case import Label, Step, StepRole, Termination, Trajectory
from evalrx.grade import StateCheck, grade, grade_state, grade_trajectory
from evalrx.tools.environment import ENV_PACKAGES, Environment, result_text

pytestmark = pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval is not installed")

FS = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system"
MATH = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api"
TREE = {
    "root": {
        "alex": {
            "type": "directory",
            "contents": {
                "docs": {"type": "directory", "contents": {"a.txt": {"type": "file", "content": "one\ntwo"}}},
            },
        }
    }
}


@pytest.fixture(autouse=True)
def this_module_is_an_environment_package(monkeypatch):
    """The Counter / Echo classes below are this module's: cases may name them while these tests run."""
    monkeypatch.setenv(ENV_PACKAGES, __name__)


FS_SPEC = {"classes": {"GorillaFileSystem": FS}, "initial_config": {"GorillaFileSystem": TREE}}
# Reads that change no public attribute, for the "extra harmless call" variant (the first the entry's classes have).
READS = (
    ("pwd", {}),
    ("ls", {}),
    ("list_users", {}),
    ("list_all_following", {}),
    ("ticket_get_login_status", {}),
    ("trading_get_login_status", {}),
    ("travel_get_login_status", {}),
    ("check_tire_pressure", {}),
    ("mean", {"numbers": [1, 2]}),
)


class Counter:
    """A tiny stateful class for the environment's generic behaviour."""

    def __init__(self) -> None:
        self.count = 0
        self.loaded = None
        self._hidden = "private"

    def _load_scenario(self, config: dict, long_context: bool = False) -> None:
        self.count = config.get("start", 0)
        self.loaded = {"config": config, "long_context": long_context}

    def bump(self, by: int = 1) -> dict:
        self.count += by
        return {"count": self.count}

    def fail(self) -> str:
        raise RuntimeError("it broke")

    def ping(self) -> str:
        return "counter"

    def items(self) -> list:
        return [self.count]


class Echo:
    """A second class: its `ping` wins over Counter's (it comes later in the spec)."""

    def ping(self) -> str:
        return "echo"

    def shout(self, text: str) -> str:
        return text.upper()


def _spec(**extra) -> dict:
    return {"classes": {"Counter": __name__, "Echo": __name__}, "initial_config": {"Counter": {"start": 5}}, **extra}


# ---------------------------------------------------------------- the environment


def test_each_build_is_fresh_and_the_config_is_copied():
    spec = _spec()
    a, b = Environment.from_spec(spec), Environment.from_spec(spec)
    assert a.call("bump", kwargs={"by": 2}) == '{"count": 7}'
    assert a.state()["Counter"]["count"] == 7 and b.state()["Counter"]["count"] == 5
    a.instances["Counter"].loaded["config"]["start"] = 99  # the instance got a copy of the spec's config
    assert spec["initial_config"]["Counter"]["start"] == 5
    fs_a, fs_b = Environment.from_spec(FS_SPEC), Environment.from_spec(FS_SPEC)
    fs_a.run_call_string("cd(folder='docs')")
    fs_a.run_call_string("touch(file_name='b.txt')")
    assert fs_a.state() != fs_b.state()
    assert fs_b.run_call_string("ls()") == '{"current_directory_content": ["docs"]}'


def test_state_is_the_public_attributes_deep_copied():
    env = Environment.from_spec(_spec(long_context=True))
    state = env.state()
    assert set(state) == {"Counter", "Echo"} and state["Echo"] == {}
    assert state["Counter"]["count"] == 5 and "_hidden" not in state["Counter"]
    assert state["Counter"]["loaded"]["long_context"] is True
    state["Counter"]["loaded"]["config"]["start"] = 0
    assert env.instances["Counter"].loaded["config"]["start"] == 5


def test_stateless_classes_get_no_scenario():
    env = Environment.from_spec(_spec(stateless=["Counter"]))
    assert env.state()["Counter"] == {"count": 0, "loaded": None}


def test_results_become_text_as_bfcl_has_them_and_a_raising_method_gives_its_error_string():
    env = Environment.from_spec(_spec())
    assert env.call("ping") == "echo" and env.owner("ping") == "Echo"  # the later class's method wins
    assert env.call("items") == "[5]" and env.call("shout", ("hi",)) == "HI"
    assert env.call("fail") == "Error during execution: it broke"
    assert env.call("nope") == "Error during execution: name 'nope' is not defined"
    assert env.call("kill") == "Error during execution: Function call kill is not allowed."
    assert env.call("bump", kwargs={"step": 1}).startswith("Error during execution: ")
    assert result_text({"x": {1, 2}}) == "{'x': {1, 2}}"  # not JSON: str, as BFCL falls back


def test_error_strings_and_results_match_bfcls_execution(bfcl_checker):
    utils = bfcl_checker["utils"]
    calls = ["cd(folder='docs')", "cd(nowhere='x')", "cat(file_name='a.txt')", "wc(file_name='a.txt', mode='l')"]
    theirs, _ = utils.execute_multi_turn_func_call(
        calls, {"GorillaFileSystem": TREE}, ["GorillaFileSystem"], "evalrx_errors", "unit_0", is_evaL_run=True
    )
    env = Environment.from_spec(FS_SPEC)
    assert [env.run_call_string(c) for c in calls] == theirs
    assert theirs[1].startswith("Error during execution: ")


def test_call_strings_are_parsed_with_ast_and_refused_otherwise():
    env = Environment.from_spec(FS_SPEC)
    assert env.parse_call_string("sort('a.txt')") == ("sort", ("a.txt",), {})
    assert env.parse_call_string("tail(file_name='a.txt', lines=-2)") == (
        "tail",
        (),
        {"file_name": "a.txt", "lines": -2},
    )
    assert env.bound_arguments("sort", ("a.txt",)) == {"file_name": "a.txt"}
    env.run_call_string("cd(folder='docs')")
    assert env.run_call_string("sort('a.txt')") == '{"sorted_content": "one\\ntwo"}'
    refused = [
        "kill(pid=1)",
        "os.system('ls')",
        "cd(folder=pwd())",
        "cd(folder=__import__('os'))",
        "cd(**{'folder': 'x'})",
        "1 + 2",
        "cd(folder='a'",
        "no_such_method()",
    ]
    for text in refused:
        with pytest.raises(ValueError) as err:
            env.parse_call_string(text)
        assert "\n" not in str(err.value)


def test_tools_are_the_documented_methods():
    env = Environment.from_spec(_spec())
    docs = [
        {"name": "bump", "description": "add", "parameters": {"type": "object", "properties": {"by": {}}}},
        {"type": "function", "function": {"name": "ping", "description": "who", "parameters": {}}},
        {"name": "not_a_method", "description": "", "parameters": {}},
        {"name": "_load_scenario", "description": "", "parameters": {}},
    ]
    tools = env.tools(docs)
    assert [(t.name, t.source, t.origin) for t in tools] == [
        ("bump", "environment", "Counter"),
        ("ping", "environment", "Echo"),
    ]
    assert tools[0].fn(by=3) == '{"count": 8}' and env.state()["Counter"]["count"] == 8
    assert tools[1].fn() == "echo"


def test_a_bad_spec_says_what_is_wrong():
    bad = [
        None,
        {"classes": {}},
        {"classes": {"X": 3}},
        {"classes": {"Counter": __name__}, "initial_config": []},
        {"classes": {"Nope": "evalrx.no_such_module"}},
        {"classes": {"Nope": __name__}},
    ]
    for spec in bad:
        with pytest.raises(ValueError) as err:
            Environment.from_spec(spec)
        assert "\n" not in str(err.value)


# ---------------------------------------------------------------- the suites


def _bfcl_data(category: str, answers: bool = False) -> dict:
    root = Path(importlib.util.find_spec("bfcl_eval").submodule_search_locations[0]) / "data"
    path = root / ("possible_answer" if answers else "") / f"BFCL_v4_{category}.json"
    with open(path, encoding="utf-8") as fh:
        return {e["id"]: e for e in map(json.loads, fh)}


def test_multi_turn_suites_load_with_turns_tools_and_environment():
    from evalrx.suites import bfcl as bfcl_suites
    from evalrx.suites import list_suites, load_cases

    names = list_suites()
    for cat in ("multi_turn_base", "multi_turn_miss_param", "multi_turn_long_context"):
        assert f"bfcl/{cat}" in names
    assert "bfcl/multi_turn_miss_func" not in names
    bfcl_suites._load.cache_clear()
    t0 = time.perf_counter()
    cases = load_cases("bfcl/multi_turn_base")
    assert time.perf_counter() - t0 < 1.0
    entries, answers = _bfcl_data("multi_turn_base"), _bfcl_data("multi_turn_base", answers=True)
    assert [c.id for c in cases] == list(entries)
    docs_dir = (
        Path(importlib.util.find_spec("bfcl_eval").submodule_search_locations[0]) / "data" / "multi_turn_func_doc"
    )
    for case in cases:
        entry, truth = entries[case.id], answers[case.id]["ground_truth"]
        turns = case.meta["turns"]
        assert len(turns) == len(entry["question"]) and case.expected == truth == [t["expected"] for t in turns]
        assert turns[0]["prompt"] == case.inputs.prompt == entry["question"][0][0]["content"]
        assert case.grader == {"kind": "state"} and case.meta["task_type"] == "multi_turn_base"
        env = case.meta["environment"]
        assert list(env["classes"]) == entry["involved_classes"] and env["long_context"] is False
        assert env["initial_config"] == entry["initial_config"] and env["stateless"] == (
            ["MathAPI"] if "MathAPI" in entry["involved_classes"] else []
        )
        names = [t["name"] for t in case.meta["tools"]]
        assert not set(names) & set(entry.get("excluded_function") or [])
        assert all(t["parameters"]["type"] == "object" for t in case.meta["tools"])
    first = cases[0]
    assert first.meta["turns"][2] == {
        "prompt": entries[first.id]["question"][2][0]["content"],
        "expected": ["sort('final_report.pdf')"],
    }
    fs_docs = [json.loads(line)["name"] for line in open(docs_dir / "gorilla_file_system.json")]
    assert set(fs_docs) - {"cp"} <= set(t["name"] for t in first.meta["tools"])
    long = load_cases("bfcl/multi_turn_long_context")[0]
    assert long.meta["environment"]["long_context"] is True
    assert load_cases("bfcl/simple_python")[0].grader == {"kind": "calls"}  # single-turn unchanged


def test_a_multi_turn_suites_tools_run_on_its_environment():
    from evalrx.suites import load_cases

    case = load_cases("bfcl/multi_turn_base")[0]
    env = Environment.from_spec(case.meta["environment"])
    tools = {t.name: t for t in env.tools(case.meta["tools"])}
    assert len(tools) == len(case.meta["tools"])
    assert tools["cd"].origin == "GorillaFileSystem" and tools["post_tweet"].origin == "TwitterAPI"
    assert tools["cd"].fn(folder="document") == '{"current_working_directory": "document"}'
    assert "final_report.pdf" in tools["ls"].fn()


# ---------------------------------------------------------------- grading by state


def _parsed(case) -> list:
    """The case's ground truth as the agent's calls: (name, arguments by parameter name) per turn."""
    env = Environment.from_spec(case.meta["environment"])
    out = []
    for turn in case.meta["turns"]:
        calls = []
        for text in turn["expected"]:
            name, args, kwargs = env.parse_call_string(text)
            calls.append((name, env.bound_arguments(name, args, kwargs)))
        out.append(calls)
    return out


def _trajectory(case, turn_calls: list, *, terminated: str = Termination.FINAL.value, broken: int = -1) -> Trajectory:
    """A run that makes `turn_calls[k]` in user turn k, each observation from running it on an environment,
    then answers; user turn `broken` also has an actor step whose call could not be parsed."""
    env = Environment.from_spec(case.meta["environment"])
    steps: list = []

    def add(role, **kw):
        steps.append(Step(idx=len(steps), role=role, **kw))

    for k, calls in enumerate(turn_calls):
        add(StepRole.USER, content=case.meta["turns"][k]["prompt"], span={"user_turn": k})
        if k == broken:
            add(StepRole.ACTOR, content="<tool_call>{oops", parse_error="unreadable JSON", span={"user_turn": k})
            add(StepRole.TOOL, observation="could not parse", span={"user_turn": k, "parse_error": True})
        if calls:
            add(StepRole.ACTOR, tool_calls=[{"name": n, "args": a} for n, a in calls], span={"user_turn": k})
            for n, a in calls:
                add(StepRole.TOOL, content=n, observation=env.call(n, kwargs=a), span={"user_turn": k})
        add(StepRole.ACTOR, content="Done.", span={"user_turn": k})
    return Trajectory(sample_id=case.id, goal="", steps=steps, metrics={"terminated": terminated})


@pytest.fixture(scope="module")
def base_cases():
    from evalrx.suites import load_cases

    return {c.id: c for c in load_cases("bfcl/multi_turn_base")}


def _assert_one_line(check: StateCheck):
    assert check.reason and "\n" not in check.reason and len(check.reason) < 400
    json.dumps(check.diff)


def test_the_ground_truth_passes(base_cases):
    case = base_cases["multi_turn_base_0"]
    check = grade_state(_trajectory(case, _parsed(case)), case)
    assert check.ok and check.turn is None and check.kind is None and check.diff == {}
    assert grade_trajectory(_trajectory(case, _parsed(case)), case) is Label.PASS
    with pytest.raises(ValueError):
        grade("answer", case.expected, case.grader)


def test_a_changed_argument_is_bad_arguments_at_its_step_with_the_state_diff(base_cases):
    case = base_cases["multi_turn_base_0"]
    calls = _parsed(case)
    calls[0][1] = ("mkdir", {"dir_name": "tmp"})  # turn 0: mkdir(dir_name='temp') as 'tmp'
    traj = _trajectory(case, calls)
    check = grade_state(traj, case)
    assert not check.ok and check.turn == 0 and check.kind == "bad_arguments"
    assert traj.steps[check.step].role is StepRole.ACTOR and traj.steps[check.step].tool_calls[1].name == "mkdir"
    assert check.reason.startswith("user turn 1: GorillaFileSystem differs in root") and "dir_name" in check.reason
    assert "root" in check.diff["GorillaFileSystem"]
    _assert_one_line(check)
    assert grade_trajectory(traj, case) is Label.FAIL


def test_a_dropped_call_an_empty_turn_and_a_parse_error(base_cases):
    case = base_cases["multi_turn_base_0"]
    dropped = _parsed(case)
    del dropped[0][1]  # no mkdir: the mv renames the file instead
    check = grade_state(_trajectory(case, dropped), case)
    assert (check.turn, check.kind) == (0, "no_tool_call") and "mkdir" in check.reason
    _assert_one_line(check)

    empty = _parsed(case)
    empty[1] = []
    traj = _trajectory(case, empty)
    check = grade_state(traj, case)
    assert (check.turn, check.kind) == (1, "no_tool_call") and check.reason.startswith("user turn 2: no call, want cd(")
    assert traj.steps[check.step].role is StepRole.ACTOR and traj.steps[check.step].span["user_turn"] == 1

    traj = _trajectory(case, empty, broken=1)
    check = grade_state(traj, case)
    assert (check.turn, check.kind) == (1, "malformed_call") and traj.steps[check.step].parse_error


def test_other_calls_an_extra_call_and_another_order(base_cases):
    case = base_cases["multi_turn_base_0"]
    wrong = _parsed(case)
    wrong[0][1] = ("touch", {"file_name": "temp"})  # a file where a directory was wanted
    check = grade_state(_trajectory(case, wrong), case)
    assert (check.turn, check.kind) == (0, "wrong_tool") and "touch" in check.reason

    extra = _parsed(case)
    extra[0].append(("touch", {"file_name": "junk.txt"}))
    check = grade_state(_trajectory(case, extra), case)
    assert (check.turn, check.kind) == (0, "unneeded_tool_call") and "junk.txt" in check.reason

    harmless = _parsed(case)
    harmless[0].append(("pwd", {}))
    harmless[2].insert(0, ("ls", {"a": True}))
    assert grade_state(_trajectory(case, harmless), case).ok

    swapped = _parsed(case)
    swapped[0][1], swapped[0][2] = swapped[0][2], swapped[0][1]  # mv before mkdir
    check = grade_state(_trajectory(case, swapped), case)
    assert (check.turn, check.kind) == (0, "wrong_tool") and "another order" in check.reason


def test_an_earlier_turns_unneeded_call_is_blamed_there():
    from evalrx.suites import load_cases

    def idle_turn(case):
        turns = case.meta["turns"]
        return next((k for k in range(len(turns) - 1) if not turns[k]["expected"] and turns[k + 1]["expected"]), None)

    case = next(
        c
        for c in load_cases("bfcl/multi_turn_miss_param")
        if "GorillaFileSystem" in c.meta["environment"]["classes"] and idle_turn(c) is not None
    )
    idle, calls = idle_turn(case), _parsed(case)
    assert grade_state(_trajectory(case, calls), case).ok
    calls[idle] = [("touch", {"file_name": "stray.txt"})]  # a call in the turn that wanted none (a missing parameter)
    traj = _trajectory(case, calls)
    check = grade_state(traj, case)
    assert (check.turn, check.kind) == (idle + 1, "unneeded_tool_call")
    assert traj.steps[check.step].span["user_turn"] == idle and f"user turn {idle + 1}'s calls differ" in check.reason
    assert "stray.txt" in check.reason


def test_a_run_that_stops_early_or_raised(base_cases):
    case = base_cases["multi_turn_base_0"]
    calls = _parsed(case)
    short = _trajectory(case, calls[:2], terminated=Termination.MAX_TURNS.value)
    check = grade_state(short, case)
    assert (check.turn, check.kind) == (1, "no_final_answer") and "before user turn 3" in check.reason
    ran_out = _trajectory(case, calls, terminated=Termination.MAX_TURNS.value)
    assert grade_state(ran_out, case).kind == "no_final_answer"
    crashed = _trajectory(case, calls, terminated=Termination.ERROR.value)
    assert grade_state(crashed, case).kind == "infra_error" and grade_trajectory(crashed, case) is Label.ERROR


def test_user_steps_without_a_span_count_in_order(base_cases):
    case = base_cases["multi_turn_base_0"]
    traj = _trajectory(case, _parsed(case))
    for step in traj.steps:
        step.span.pop("user_turn", None)
    assert grade_state(traj, case).ok
    bad = _parsed(case)
    bad[3] = []
    traj = _trajectory(case, bad)
    for step in traj.steps:
        step.span.pop("user_turn", None)
    assert grade_state(traj, case).turn == 3


def test_a_case_without_an_environment_says_so(base_cases):
    case = copy.deepcopy(base_cases["multi_turn_base_0"])
    del case.meta["environment"]
    with pytest.raises(ValueError, match="meta\\['environment'\\]"):
        grade_state(_trajectory(base_cases["multi_turn_base_0"], []), case)


# ---------------------------------------------------------------- agreement with BFCL's checker


@pytest.fixture(scope="module")
def bfcl_checker():
    """BFCL's multi-turn checker and its executor (they import no model handler: no stand-ins needed);
    sys.modules restored afterwards, which also drops the instances BFCL keeps in its module globals."""
    saved = dict(sys.modules)
    try:
        yield {
            "checker": importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker"),
            "utils": importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils"),
        }
    finally:
        for name in [n for n in sys.modules if n not in saved]:
            del sys.modules[name]
        sys.modules.update(saved)


def _call_string(name: str, args: dict) -> str:
    return f"{name}({','.join(f'{k}={v!r}' for k, v in args.items())})"  # as BFCL's decoder writes a call


def _changed(value):
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value + 1
    return None


def _variants(case) -> list:
    """(label, calls per turn) for one entry: the ground truth and deterministic ways of getting it wrong."""
    right = _parsed(case)
    out = [("right", right)]
    spots = [(k, i, p) for k, t in enumerate(right) for i, (_, a) in enumerate(t) for p, v in a.items()]
    spot = next(((k, i, p) for k, i, p in spots if _changed(right[k][i][1][p]) is not None), None)
    if spot:
        k, i, p = spot
        wrong = copy.deepcopy(right)
        wrong[k][i][1][p] = _changed(wrong[k][i][1][p])
        out.append(("wrong argument", wrong))
    env = Environment.from_spec(case.meta["environment"])
    changing = None
    for k, turn in enumerate(right):
        for i, (name, args) in enumerate(turn):
            before = env.state()
            env.call(name, kwargs=args)
            if changing is None and env.state() != before:
                changing = (k, i)
    if changing:
        dropped = copy.deepcopy(right)
        del dropped[changing[0]][changing[1]]
        out.append(("dropped call", dropped))
    names = set(Environment.from_spec(case.meta["environment"]).method_names())
    read = next(((n, a) for n, a in READS if n in names), None)
    if read:
        extra = copy.deepcopy(right)
        extra[0].append(read)
        out.append(("extra read", extra))
    last = max(k for k, t in enumerate(right) if case.meta["turns"][k]["expected"])
    empty = copy.deepcopy(right)
    empty[last] = []
    out.append(("empty turn", empty))
    return out


@pytest.mark.parametrize(
    "category",
    ["multi_turn_base", "multi_turn_miss_param", pytest.param("multi_turn_long_context", marks=pytest.mark.slow)],
)
def test_agreement_with_bfcls_multi_turn_checker(bfcl_checker, category):
    from evalrx.suites import load_cases

    checker = bfcl_checker["checker"]
    entries = _bfcl_data(category)
    cases = {c.id: c for c in load_cases(f"bfcl/{category}")}
    seen, disagreements = 0, []
    verdicts: dict = {}
    for n, (case_id, case) in enumerate(cases.items()):
        for v, (label, turn_calls) in enumerate(_variants(case)):
            decoded = [[[_call_string(name, args) for name, args in calls]] if calls else [] for calls in turn_calls]
            theirs = checker.multi_turn_checker(
                decoded, case.expected, copy.deepcopy(entries[case_id]), category, f"evalrx_{category}_v{v}_{n}"
            )
            ours = grade_state(_trajectory(case, turn_calls), case)
            seen += 1
            verdicts.setdefault(label, []).append(theirs["valid"])
            if theirs["valid"] != ours.ok:
                disagreements.append(
                    f"{case_id} {label}: BFCL {theirs['valid']} ({theirs.get('error_type')}), ours {ours.ok} ({ours.reason})"
                )
    for line in disagreements:
        print(line)
    rate = 1 - len(disagreements) / seen
    print(f"{category}: agreement with BFCL's multi_turn_checker {rate:.2%} of {seen} outputs on {len(cases)} entries")
    assert len(cases) >= 25 and rate >= 0.99
    # The variants are what they say: the ground truth passes, an empty turn fails, both verdicts occur.
    assert all(verdicts["right"]) and not any(verdicts["empty turn"])
    assert not all(verdicts["dropped call"]) and sum(verdicts["extra read"]) >= 0.9 * len(verdicts["extra read"])


def test_a_case_cannot_name_a_module_outside_the_registered_environment_packages(tmp_path):
    import json as _json

    from evalrx.suites import CaseFileError, load_case_file

    with pytest.raises(ValueError, match="'os' is not a known environment"):
        Environment.from_spec({"classes": {"system": "os"}})
    web = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.web_search"
    with pytest.raises(ValueError, match="is not a known environment"):  # BFCL's, but it fetches any URL
        Environment.from_spec({"classes": {"WebSearchAPI": web}})
    with pytest.raises(ValueError, match="defines no class of that name"):  # a function of a known package
        Environment.from_spec({"classes": {"result_text": __name__}})
    path = tmp_path / "hostile.jsonl"
    path.write_text(_json.dumps({"prompt": "hi", "environment": {"classes": {"Popen": "subprocess"}}}) + "\n")
    with pytest.raises(CaseFileError, match="not a known environment") as err:
        load_case_file(path)
    assert "\n" not in str(err.value)
