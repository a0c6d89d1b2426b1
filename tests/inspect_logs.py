"""A real Inspect AI `.eval` log, written by inspect_ai itself (offline, mockllm): two epochs of two
samples; one looks a key up (a long result Inspect keeps as an attachment, an input image, logprobs on
its answer), the other's tool raises `ToolError`. Used by the store's interop tests and the browser test."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(48))
LONG = "value of a: " + "x" * 150  # over Inspect's 100 characters: events hold it as an attachment


def write_eval_log(log_dir: Path, log_format: str = "eval") -> Path:
    """Run the task with inspect_ai and return the log file it wrote into `log_dir` (`.eval`, or `.json`)."""
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import (
        ChatMessageUser,
        ContentImage,
        ContentText,
        Logprob,
        Logprobs,
        ModelOutput,
        ModelUsage,
        TopLogprob,
    )
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import ToolError, tool

    @tool
    def lookup():
        async def execute(key: str) -> str:
            """Look a key up.

            Args:
                key: The key.

            Returns:
                The value.
            """
            if key == "missing":
                raise ToolError("no such key: missing")
            return LONG

        return execute

    def model(messages, tools, tool_choice, config):
        question = next(m.text for m in messages if m.role == "user")
        if not any(m.role == "tool" for m in messages):
            out = ModelOutput.for_tool_call(
                "mockllm/model", "lookup", {"key": "missing" if "missing" in question else "a"}, content="Looking."
            )
        else:
            out = ModelOutput.from_content("mockllm/model", "The answer is 42.")
            out.choices[0].logprobs = Logprobs(
                content=[
                    Logprob(
                        token="The",
                        logprob=-0.25,
                        top_logprobs=[TopLogprob(token="The", logprob=-0.25), TopLogprob(token="A", logprob=-1.5)],
                    ),
                    Logprob(token=" answer", logprob=-0.5),
                ]
            )
        # set so mockllm does not count tokens itself (that loads a tiktoken encoding from the network)
        out.usage = ModelUsage(input_tokens=20, output_tokens=8, total_tokens=28)
        return out

    image = "data:image/png;base64," + base64.b64encode(PNG).decode()
    task = Task(
        dataset=[
            Sample(
                id="look",
                input=[ChatMessageUser(content=[ContentText(text="Find a"), ContentImage(image=image)])],
                target="42",
            ),
            Sample(id="missing", input="Find missing", target="7"),
        ],
        solver=[use_tools(lookup()), generate()],
        scorer=includes(),
        name="lookup_task",
        epochs=2,
    )
    return run_mock_task(task, model, log_dir, log_format)


def run_mock_task(task, model, log_dir: Path, log_format: str = "eval") -> Path:
    """Run an Inspect task on `mockllm` answering with `model(messages, tools, tool_choice, config)`; the log file."""
    from inspect_ai import eval as inspect_eval

    # In a thread of its own: Inspect starts an event loop, and another test's browser may hold this thread's.
    with ThreadPoolExecutor(1) as pool:
        logs = pool.submit(
            inspect_eval,
            task,
            model="mockllm/model",
            model_args={"custom_outputs": model},
            log_dir=str(log_dir),
            log_format=log_format,
            display="none",
        ).result()
    assert logs[0].status == "success", logs[0].error
    (found,) = log_dir.glob(f"*.{log_format}")
    return found


@contextmanager
def inspect_env(root: Path) -> Iterator[pytest.MonkeyPatch]:
    """Inspect's own files (traces, caches) under `root`, not the developer's; no display."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSPECT_DISPLAY", "none")
        mp.setenv("XDG_DATA_HOME", str(root / "xdg-data"))
        mp.setenv("XDG_CACHE_HOME", str(root / "xdg-cache"))
        yield mp
