"""A deterministic, torch-free model backend for the worker tests (a worker `--plugin`).

`scripted` answers the store tests' cases ("Question i: what is i * 7?"): first turn a
Hermes `<tool_call>` to the calculator, then the answer from the tool's result. The
`scripted-api` spec's handle says it is an API backend and returns native OpenAI tool
calls, so the worker runs its cases in a bounded pool. `runtime.extra`: `delay` (s per
turn), `fail_every` (every n-th case raises inside chat), `die_on` (the worker process dies,
as a segfault would, on the case asking "Question i").
"""

from __future__ import annotations

import json
import os
import re
import threading
import time

from evalrx.core import Capability, ChatTurn
from evalrx.models.backends import BACKENDS, BackendInfo, register_backend
from evalrx.specs import REGISTRY, ModelSpec, register_spec

_Q = re.compile(r"what is (\d+) \* (\d+)")
CAPS = frozenset({Capability.GENERATE, Capability.TOOL_CALLS})


class ScriptedModel:
    def __init__(self, spec: ModelSpec, runtime) -> None:
        self.spec = spec
        self.backend = "api" if "api" in spec.tags else "scripted"
        self.capabilities = CAPS
        self.delay = float(runtime.extra.get("delay", 0.0))
        self.fail_every = int(runtime.extra.get("fail_every", 0))
        self.die_on = runtime.extra.get("die_on")
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._n = 0

    def chat(self, messages, tools=None, **kw) -> ChatTurn:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            return self._reply(messages)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _reply(self, messages) -> ChatTurn:
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        if self.die_on is not None and prompt.startswith(f"Question {self.die_on}:"):
            os._exit(70)  # no cleanup, no exception: the process is gone
        tool_msgs = [m for m in messages if m["role"] == "tool" or "<tool_response>" in str(m.get("content"))]
        usage = {"prompt_tokens": 20 + 10 * len(messages), "completion_tokens": 12}
        if not tool_msgs:
            with self._lock:
                self._n += 1
                n = self._n
            if self.fail_every and n % self.fail_every == 0:
                raise RuntimeError("scripted failure")
            a, b = _Q.search(prompt).groups()
            args = {"expression": f"{a}*{b}"}
            if self.backend == "api":
                call = {
                    "id": f"call_{a}",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": json.dumps(args)},
                }
                return ChatTurn(text="", tool_calls=[call], finish_reason="tool_calls", usage=usage)
            text = "<tool_call>\n" + json.dumps({"name": "calculator", "arguments": args}) + "\n</tool_call>"
            return ChatTurn(text=text, finish_reason="stop", usage=usage)
        last = str(tool_msgs[-1]["content"])
        value = re.findall(r"-?\d+(?:\.\d+)?", last)
        return ChatTurn(text=f"The answer is {value[-1] if value else '?'}.", finish_reason="stop", usage=usage)


if "scripted" not in BACKENDS:
    register_backend(
        BackendInfo(
            name="scripted",
            description="deterministic test backend",
            provides=lambda spec: CAPS if spec.family == "scripted" else frozenset(),
            build=lambda spec, runtime, want: ScriptedModel(spec, runtime),
        )
    )
if "scripted" not in REGISTRY:
    register_spec(ModelSpec("scripted", "scripted", tool_call_style="hermes"))
    register_spec(ModelSpec("scripted-api", "scripted", tool_call_style="openai", tags=("api",)))
