"""The trained demo model as a black box and a white box: the same agent run, tool calls included.

`evalrx serve --spec evalrx-tiny` runs as a real process on loopback; the api backend talks to
it; hf_local loads the same weights in-process. Both must produce the same trajectories,
and the demo model really calls tools, so this covers calls crossing the wire both ways.

A malformed call is the one place the paths differ by design: an OpenAI-compatible server
returns unparseable call markup as plain content (as vLLM's parsers do), so the api agent
sees an answer where hf_local sees a parse error. Those cases are compared up to that turn.
"""

from __future__ import annotations

import pytest
from servehelpers import serving

import evalrx
from evalrx.models.agent import run_batch
from evalrx.suites import load_cases
from evalrx.tools import get_tools

MAX_NEW = 64


@pytest.fixture(scope="module")
def cases():
    by_suite = {}
    for case in load_cases("demo"):
        by_suite.setdefault(case.meta.get("suite") or case.meta.get("task_type"), case)
    return list(by_suite.values())[:6]  # one case of each of several suites


def _calls(traj):
    return [(c.name, c.args) for s in traj.steps for c in s.tool_calls]


def _served(spec: str, url: str):
    """The spec through the api backend at `url` (the loopback server), greedy, no retries."""
    return evalrx.load(
        spec, backend="api", base_url=url, api_key="sk-local", max_retries=0, timeout=120, max_new_tokens=MAX_NEW
    )


def _shape(steps):
    """What both paths must agree on (the api path carries calls natively, not as markup text)."""
    return [(s.role, [(c.name, c.args) for c in s.tool_calls], s.observation) for s in steps]


def test_agent_runs_match_through_serve_and_hf_local(cases, tmp_path):
    local = evalrx.load("evalrx-tiny", device="cpu", max_new_tokens=MAX_NEW)

    def tools(case):
        return get_tools(["calculator", "lookup"], case=case)

    direct = run_batch(local, cases, tools_factory=tools, max_turns=4)
    with serving("evalrx-tiny", tmp_path / "serve.log", max_new_tokens=MAX_NEW) as url:
        remote = _served("evalrx-tiny", url)
        served = run_batch(remote, cases, tools_factory=tools, max_turns=4, concurrency=1)

    assert sum(len(_calls(t)) for t in direct) >= 3, "the demo model should call tools on these cases"
    clean = [(a, b) for a, b in zip(direct, served) if not a.metrics.get("n_parse_errors")]
    assert len(clean) >= 3, "most demo cases should produce well-formed calls"
    for a, b in zip(direct, served):
        first_bad = next((s.idx for s in a.steps if s.parse_error), len(a.steps))
        assert _shape(a.steps[:first_bad]) == _shape(b.steps[:first_bad]), a.sample_id
    for a, b in clean:
        assert _calls(a) == _calls(b), a.sample_id
        assert a.final_answer == b.final_answer, a.sample_id
        assert a.terminated == b.terminated
        assert [s.observation for s in a.steps] == [s.observation for s in b.steps]
        assert a.metrics["total_prompt_tokens"] == b.metrics["total_prompt_tokens"]
        assert a.metrics["total_completion_tokens"] == b.metrics["total_completion_tokens"]


def test_image_cases_match_through_serve_and_hf_local(tmp_path):
    """The demo VLM served on loopback gets every picture as an `image_url` part (the case picture and the
    zoomed one the tool returned): its agent runs match the in-process ones, digits read off the pictures
    included. The server decodes each part and refuses one that is not a picture."""
    import base64
    import json
    import urllib.error
    import urllib.request

    from evalrx.grade import grade_trajectory

    picked = []
    for suite in ("vision_read", "vision_compare", "vision_zoom"):
        picked += load_cases(f"demo/{suite}")[:2]

    def tools(case):
        return get_tools(case.meta["tools"], case=case)

    local = evalrx.load("evalrx-tiny-vl", device="cpu", max_new_tokens=MAX_NEW)
    direct = run_batch(local, picked, tools_factory=tools, max_turns=4)
    with serving("evalrx-tiny-vl", tmp_path / "serve.log", max_new_tokens=MAX_NEW) as url:
        remote = _served("evalrx-tiny-vl", url)
        served = run_batch(remote, picked, tools_factory=tools, max_turns=4, concurrency=1)
        bad = {
            "model": "evalrx-tiny-vl",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"no").decode()},
                        },
                        {"type": "text", "text": "Read the number."},
                    ],
                }
            ],
        }
        request = urllib.request.Request(
            url + "/chat/completions",
            data=json.dumps(bad).encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer sk-local"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 400
        assert "image" in json.loads(refused.value.read())["error"]["message"].lower()

    assert [grade_trajectory(t, c) for t, c in zip(served, picked)].count(evalrx.Label.PASS) >= 5
    zoomed = [t for t in served if any(c.name == "image_zoom" for s in t.steps for c in s.tool_calls)]
    assert len(zoomed) == 2  # both zoom cases sent the zoomed picture back as a second image part
    for a, b in zip(direct, served):
        assert _shape(a.steps) == _shape(b.steps), a.sample_id
        assert a.final_answer == b.final_answer, a.sample_id
        assert a.metrics["total_prompt_tokens"] == b.metrics["total_prompt_tokens"]  # 64 tokens a picture on both
