"""Suite loading: the bundled demo suites and clear errors for malformed case files."""

from __future__ import annotations

import json

import pytest

from evalrx.core.case import FailureCase
from evalrx.suites import CaseFileError, list_suites, load_case_file, load_cases


def _write(tmp_path, lines, name="cases.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_list_suites_names_demo_and_each_file():
    names = list_suites()
    assert names[0] == "demo"
    assert {"demo/arithmetic_easy", "demo/lookup_unanswerable", "demo/two_step", "demo/no_tool"} <= set(names)


def test_demo_has_at_least_300_well_formed_cases():
    cases = load_cases("demo")
    assert len(cases) >= 300
    assert len({c.id for c in cases}) == len(cases)
    assert {c.meta["task_type"] for c in cases} == {"arithmetic", "lookup", "two_step", "no_tool"}
    assert {"long", "distractor", "unanswerable", "multi", "paraphrase"} <= {c.meta["difficulty"] for c in cases}
    for c in cases:
        assert isinstance(c, FailureCase) and c.inputs.prompt and c.grader["kind"]
        assert c.meta["tools"] == ["calculator", "lookup"]


def test_demo_suite_by_name_and_unknown_name():
    cases = load_cases("demo/lookup_easy")
    assert cases and all(c.meta["suite"] == "lookup_easy" for c in cases)
    with pytest.raises(ValueError, match="Unknown suite 'demo/nope'.*demo/lookup_easy"):
        load_cases("demo/nope")
    with pytest.raises(ValueError, match="Unknown suite 'nonsense'"):
        load_cases("nonsense")


def test_demo_cases_are_not_training_prompts():
    from evalrx.demo.data import held_out_prompts, training_episodes

    held = held_out_prompts()
    assert len(held) == len(load_cases("demo"))
    assert not any(ep.prompt in held for ep in training_episodes(3000, exclude=held))


def test_load_a_path_with_meta_image_and_defaults(tmp_path):
    path = _write(tmp_path, [
        json.dumps({"id": "a", "prompt": "What is 3 + 4?", "expected": 7, "grader": {"kind": "numeric"},
                    "task_type": "arithmetic", "difficulty": "easy", "tools": ["calculator"], "note": "x"}),
        "",
        "# a comment line",
        json.dumps({"prompt": "Describe it.", "image": "img.png"}),
    ])
    a, b = load_cases(str(path))
    assert a.id == "a" and a.expected == 7 and a.grader == {"kind": "numeric"}
    assert a.meta == {"task_type": "arithmetic", "difficulty": "easy", "tools": ["calculator"], "note": "x",
                      "suite": "cases"}
    assert b.id.startswith("cases-") and b.grader is None and b.meta["tools"] == []
    assert b.inputs.image == str(tmp_path / "img.png")
    assert load_case_file(path)[0].id == "a"


@pytest.mark.parametrize(
    "lines, line_no, problem, fix",
    [
        (['{"prompt": "ok", "expected": 1}', '{"prompt": "bad", '], 2, "bad JSON", "complete JSON object"),
        (['{"expected": 1}'], 1, "missing prompt", 'Add a "prompt" field'),
        (['{"prompt": ""}'], 1, "prompt must be a non-empty string", '"prompt"'),
        (['{"prompt": "p", "expected": 1, "grader": {"kind": "fuzzy"}}'], 1, "unknown grader kind 'fuzzy'",
         "exact, normalized, numeric, contains, regex"),
        (['{"prompt": "p", "grader": {"kind": "numeric"}}'], 1, "needs an expected answer", '"expected"'),
        (['{"prompt": "p", "grader": {"kind": "regex", "pattern": "("}}'], 1, "not a valid regex", "kind"),
        (['["prompt"]'], 1, "expected a JSON object", "on its own line"),
        (['{"prompt": "p", "tools": "calculator"}'], 1, "tools must be a list", '["calculator"'),
        (['{"id": "x", "prompt": "p"}', '{"id": "x", "prompt": "q"}'], 2, "duplicate id 'x'", "unique id"),
    ],
)
def test_malformed_files_name_file_line_problem_and_fix(tmp_path, lines, line_no, problem, fix):
    path = _write(tmp_path, lines)
    with pytest.raises(CaseFileError) as err:
        load_cases(str(path))
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line_no}: ")
    assert problem in msg and fix in msg
    assert err.value.line == line_no and err.value.path == str(path)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(CaseFileError, match="no such case file"):
        load_cases(str(tmp_path / "absent.jsonl"))
    empty = _write(tmp_path, ["", "# only a comment"])
    with pytest.raises(CaseFileError, match="has no cases"):
        load_cases(str(empty))


def test_random_world_training_episodes_observe_their_own_world():
    """With a world pool, facts change between episodes, so only copying the observation works."""
    from evalrx.demo.data import make_world, training_episodes

    bundled = make_world()
    eps = [e for e in training_episodes(400, world_pool=16) if e.task_type == "lookup" and e.difficulty == "easy"]
    assert eps
    for ep in eps:
        msgs = ep.messages()
        observation, answer = msgs[2]["content"], msgs[-1]["content"]
        assert observation == answer  # the scripted answer copies the observation
        name = ep.calls[0][1]["query"].split(" of ", 1)[1]
        assert name in {e["name"] for e in ep.kb["entities"]} and ep.kb is not bundled
    assert len({id(e.kb) for e in eps}) > 1
