"""Suite loading: the bundled demo suites and clear errors for malformed case files."""

from __future__ import annotations

import json
import re

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
    from evalrx.demo.data import held_out_prompts
    from evalrx.demo.episodes import training_episodes

    held = held_out_prompts()
    assert len(held) == len(load_cases("demo"))
    assert not any(ep.prompt in held for ep in training_episodes(3000, exclude=held))


def test_load_a_path_with_meta_image_and_defaults(tmp_path):
    path = _write(
        tmp_path,
        [
            json.dumps(
                {
                    "id": "a",
                    "prompt": "What is 3 + 4?",
                    "expected": 7,
                    "grader": {"kind": "numeric"},
                    "task_type": "arithmetic",
                    "difficulty": "easy",
                    "tools": ["calculator"],
                    "note": "x",
                }
            ),
            "",
            "# a comment line",
            json.dumps({"prompt": "Describe it.", "image": "img.png"}),
        ],
    )
    a, b = load_cases(str(path))
    assert a.id == "a" and a.expected == 7 and a.grader == {"kind": "numeric"}
    assert a.meta == {
        "task_type": "arithmetic",
        "difficulty": "easy",
        "tools": ["calculator"],
        "note": "x",
        "suite": "cases",
    }
    assert b.id.startswith("cases-") and b.grader is None and b.meta["tools"] == []
    assert b.inputs.image == str(tmp_path / "img.png")
    assert load_case_file(path)[0].id == "a"


@pytest.mark.parametrize(
    "lines, line_no, problem, fix",
    [
        (['{"prompt": "ok", "expected": 1}', '{"prompt": "bad", '], 2, "bad JSON", "complete JSON object"),
        (['{"expected": 1}'], 1, "missing prompt", 'Add a "prompt" field'),
        (['{"prompt": ""}'], 1, "prompt must be a non-empty string", '"prompt"'),
        (
            ['{"prompt": "p", "expected": 1, "grader": {"kind": "fuzzy"}}'],
            1,
            "unknown grader kind 'fuzzy'",
            "exact, normalized, numeric, contains, regex",
        ),
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
    from evalrx.demo.episodes import training_episodes
    from evalrx.demo.world import make_world
    from evalrx.tools.lookup import search

    bundled = make_world()
    eps = [e for e in training_episodes(400, world_pool=16) if e.task_type == "lookup" and e.difficulty == "easy"]
    assert eps
    verbatim = 0
    for ep in eps:
        msgs = ep.messages()
        observation, answer = msgs[2]["content"], msgs[-1]["content"]
        assert observation == answer  # the scripted answer copies the observation
        assert ep.kb is not bundled and str(ep.expected) in observation
        query = ep.calls[0][1]["query"]
        verbatim += query in ep.prompt and query.endswith(("?", "."))
        # Whatever the query's wording, it finds the entity of this episode's own world.
        assert search(query, ep.kb) == observation
    assert verbatim > len(eps) / 2  # most single lookups copy the question
    assert len({id(e.kb) for e in eps}) > 1


def test_suites_regenerate_byte_for_byte(tmp_path):
    """Training-side changes to the generator must not move a held-out case."""
    from evalrx.demo.data import DEMO_DIR, write_all

    write_all(tmp_path)
    committed = sorted((DEMO_DIR / "suites").glob("*.jsonl"))
    assert [p.name for p in committed] == sorted(p.name for p in (tmp_path / "suites").glob("*.jsonl"))
    for path in committed:
        assert (tmp_path / "suites" / path.name).read_bytes() == path.read_bytes(), path.name
    assert (tmp_path / "kb.json").read_bytes() == (DEMO_DIR / "kb.json").read_bytes()


def test_held_out_wordings_never_appear_in_training_templates():
    from evalrx.demo import templates as D

    train = {t for t, _ in D.ARITH_TRAIN + D.ARITH_TRAIN_EXTRA} | {t for t, _ in D.ARITH_UNARY_TRAIN}
    assert not train & {t for t, _ in D.ARITH_HELD_OUT}
    two_train = {t for t, _ in D.TWO_STEP_TRAIN + D.TWO_STEP_TRAIN_EXTRA}
    two_train |= {t for ts in D.TWO_STEP_SPECIAL_TRAIN.values() for t, _ in ts}
    assert not two_train & {t for t, _ in D.TWO_STEP_HELD_OUT}
    assert not two_train & {t for ts in D.TWO_STEP_SPECIAL_HELD_OUT.values() for t, _ in ts}

    # The training-only extras teach the paraphrases' words, never a held-out sentence with its
    # punctuation changed or a sentence appended.
    def words(template):
        return " ".join(re.findall(r"[a-z{}]+", template.lower()))

    extras = {words(t) for t, _ in D.ARITH_TRAIN_EXTRA + D.ARITH_UNARY_TRAIN + D.TWO_STEP_TRAIN_EXTRA}
    held = {words(t) for t, _ in D.ARITH_HELD_OUT + D.TWO_STEP_HELD_OUT}
    assert not [(e, h) for e in extras for h in held if h == e or h.startswith(e + " ")]
    for train_list, held_list in (
        (D.MULTI_TRAIN, D.MULTI_HELD_OUT),
        (D.DISTRACTORS_TRAIN, D.DISTRACTORS_HELD_OUT),
        (D.GREETINGS_TRAIN, D.GREETINGS_HELD_OUT),
        (D.THANKS_TRAIN, D.THANKS_HELD_OUT),
        (D.NAME_TRAIN, D.NAME_HELD_OUT),
        (D.ECHO_TRAIN, D.ECHO_HELD_OUT),
        (D.STORY_TRAIN, D.STORY_HELD_OUT),
        (D.ABOUT_TRAIN, D.ABOUT_HELD_OUT),
    ):
        assert not set(train_list) & set(held_list)
