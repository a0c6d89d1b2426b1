"""Pictures in transcripts made elsewhere: a real Inspect AI log whose tool returns a picture, and an OpenAI
chat row with `image_url` parts. The import keeps the case picture and every other picture on the step whose
message held it, and a replay on the demo VLM sees them all (its attention has a segment per picture)."""

# No `from __future__ import annotations`: Inspect reads the tool's type hints, ContentImage is local to a function.
import base64
import io
import json
from pathlib import Path

from inspect_logs import inspect_env, run_mock_task

import evalrx.interop as X
import evalrx.store as S
import evalrx.store.analyses as A
from evalrx.runner import Worker
from evalrx.suites import load_cases
from evalrx.tools import get_tools


def _pictures() -> "tuple[bytes, bytes, dict]":
    """A demo zoom case's picture, the zoomed picture its label gives, and the zoom's arguments."""
    case = load_cases("demo/vision_zoom")[0]
    args = case.meta["reference_calls"][0]["arguments"]
    (zoom,) = [t for t in get_tools(["image_zoom"], case)]
    out = zoom.fn(**args)
    buf = io.BytesIO()
    out.images[0].save(buf, format="PNG")
    return Path(case.inputs.image).read_bytes(), buf.getvalue(), args


def _url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _inspect_log(log_dir: Path, card: bytes, zoomed: bytes, args: dict) -> Path:
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageUser, ContentImage, ContentText, ModelOutput, ModelUsage
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import tool

    @tool
    def image_zoom():
        async def execute(x0: float, y0: float, x1: float, y1: float, scale: int = 2) -> ContentImage:
            """Crop a box of the picture and enlarge it.

            Args:
                x0: left edge (0-1).
                y0: top edge (0-1).
                x1: right edge (0-1).
                y1: bottom edge (0-1).
                scale: enlargement.

            Returns:
                The enlarged crop.
            """
            return ContentImage(image=_url(zoomed))

        return execute

    def model(messages, tools, tool_choice, config):
        if not any(m.role == "tool" for m in messages):
            out = ModelOutput.for_tool_call("mockllm/model", "image_zoom", dict(args), content="")
        else:
            out = ModelOutput.from_content("mockllm/model", "The code is 1234.")
        out.usage = ModelUsage(input_tokens=20, output_tokens=8, total_tokens=28)
        return out

    task = Task(
        dataset=[
            Sample(
                id="zoom",
                input=[ChatMessageUser(content=[ContentImage(image=_url(card)), ContentText(text="Read the code.")])],
                target="5686",
            )
        ],
        solver=[use_tools(image_zoom()), generate()],
        scorer=includes(),
        name="zoom_task",
    )
    return run_mock_task(task, model, log_dir)


def _replayed_pictures(tid: int, store: str) -> list:
    req = A.request_analysis(tid, ["attention"], model="evalrx-tiny-vl", store=store)
    Worker(S.connect(store), exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    assert A.get_request(req, store=store)["status"] == "done", A.get_request(req, store=store)["error"]
    (att,) = S.load_analyses(tid, "attention", store=store)
    return [img["step"] for img in att["meta"].get("images", [])]


def test_an_inspect_log_whose_tool_returns_a_picture_keeps_it_and_the_vlm_replay_sees_it(sqlite_url, tmp_path):
    card, zoomed, args = _pictures()
    with inspect_env(tmp_path):
        log = _inspect_log(tmp_path / "logs", card, zoomed, args)
    result = X.import_file(log, store=sqlite_url)
    (rid,) = result.run_ids
    (row,) = S.list_trajectories(run_id=rid, store=sqlite_url).rows
    detail = S.get_trajectory(row.id, store=sqlite_url)
    tool_step = next(s.idx for s in detail.trajectory.steps if s.role.value == "tool")
    assert S.get_blob(detail.case["image_sha256"], store=sqlite_url)[0] == card
    assert {
        k: [S.get_blob(h, store=sqlite_url)[0] for h in v] for k, v in S.step_pictures(row.id, store=sqlite_url).items()
    } == {tool_step: [zoomed]}
    assert _replayed_pictures(row.id, sqlite_url) == [0, tool_step]


def test_an_openai_row_with_image_parts_keeps_each_picture_on_its_step(sqlite_url, tmp_path):
    card, zoomed, args = _pictures()
    row = {
        "id": "zoom-openai",
        "expected": "5686",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": _url(card)}},
                    {"type": "text", "text": "Read the code."},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "image_zoom", "arguments": json.dumps(args)}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "(an image)"},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": _url(zoomed)}},
                    {"type": "text", "text": "The image above was returned by image_zoom."},
                ],
            },
            {"role": "assistant", "content": "The code is 5686."},
        ],
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (rid,) = X.import_file(path, store=sqlite_url).run_ids
    (stored,) = S.list_trajectories(run_id=rid, store=sqlite_url).rows
    detail = S.get_trajectory(stored.id, store=sqlite_url)
    assert S.get_blob(detail.case["image_sha256"], store=sqlite_url)[0] == card
    media = S.step_pictures(stored.id, store=sqlite_url)
    assert list(media) == [3] and S.get_blob(media[3][0], store=sqlite_url)[0] == zoomed  # the second user turn
    assert _replayed_pictures(stored.id, sqlite_url) == [0, 3]
    # A picture given as a link cannot be read here: the replay scores the text alone rather than a subset.
    linked = json.loads(json.dumps(row))
    linked["id"] = "zoom-linked"
    linked["messages"][3]["content"][0]["image_url"]["url"] = "https://example.invalid/zoomed.png"
    (tmp_path / "linked.jsonl").write_text(json.dumps(linked) + "\n")
    (lrid,) = X.import_file(tmp_path / "linked.jsonl", store=sqlite_url).run_ids
    (lrow,) = S.list_trajectories(run_id=lrid, store=sqlite_url).rows
    assert S.step_pictures(lrow.id, store=sqlite_url) == {}
    assert S.get_trajectory(lrow.id, store=sqlite_url).trajectory.steps[3].span["n_images"] == 1
    assert _replayed_pictures(lrow.id, sqlite_url) == []
    # A bad picture is one line naming the record, and nothing of the file is stored.
    bad = dict(row, id="bad")
    bad["messages"] = [
        dict(row["messages"][0], content=[{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}])
    ]
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    try:
        X.import_file(tmp_path / "bad.jsonl", store=sqlite_url)
    except Exception as exc:  # the import's own error: one line, the file and line
        assert "not valid base64" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a picture that is not base64 was imported")
