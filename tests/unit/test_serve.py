"""`evalrx serve`'s request handling over a scripted fake handle, called through the `api` backend
and raw HTTP on loopback.

No torch here: the served model is a scripted fake handle, so these tests run in seconds.
The end-to-end test with a real tiny model is tests/integration/test_api_serve.py.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import pytest

import evalrx
from evalrx.core.capability import Capability
from evalrx.core.tool import ChatTurn
from evalrx.models.backends import RuntimeConfig
from evalrx.models.backends.api import APIModel
from evalrx.serve import make_server
from evalrx.specs import get_spec

QWEN = "qwen2.5-0.5b-instruct"


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch):
    # A developer's real key or server must never leak into these tests.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@dataclass
class FakeHandle:
    """A scripted local model: replies with `replies` in order and records what it was sent."""

    replies: list
    capabilities: frozenset = frozenset({Capability.GENERATE, Capability.TOOL_CALLS, Capability.LOGPROBS})
    backend: str = "hf_local"
    delay: float = 0.0
    calls: list = field(default_factory=list)
    active: int = 0
    max_active: int = 0

    def __post_init__(self):
        self.spec = get_spec(QWEN)
        self._guard = threading.Lock()

    def chat(self, messages, tools=None, *, logprobs=False, max_new_tokens=None, temperature=None):
        with self._guard:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.delay)
            self.calls.append(
                {
                    "messages": messages,
                    "tools": tools,
                    "logprobs": logprobs,
                    "max_new_tokens": max_new_tokens,
                    "temperature": temperature,
                }
            )
            reply = self.replies[min(len(self.calls), len(self.replies)) - 1]
            if isinstance(reply, Exception):
                raise reply
            return reply
        finally:
            with self._guard:
                self.active -= 1


@pytest.fixture
def served():
    """Start `evalrx serve`'s HTTP server in a thread over a FakeHandle; yield (handle, url)."""
    servers = []

    def start(handle):
        server = make_server(handle, "127.0.0.1", 0, quiet=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


CALL_TEXT = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>'


def test_serve_returns_native_tool_calls_and_logprobs(served):
    reply = ChatTurn(
        text=CALL_TEXT,
        finish_reason="stop",
        usage={"prompt_tokens": 40, "completion_tokens": 3},
        logprobs=[
            {"token": "<tool_call>", "token_id": 7, "logprob": -0.5},
            {"token": "é", "token_id": 9, "logprob": -1.25},
        ],
    )
    fake = FakeHandle([reply])
    url = served(fake)
    handle = evalrx.load(QWEN, backend="api", base_url=url, max_retries=0, max_new_tokens=9)
    history = [
        {"role": "user", "content": "What is 3*4?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+1"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "2"},
        {"role": "user", "content": "now 3*4"},
    ]
    turn = handle.chat(history, [evalrx.Tool("calculator", "math").to_openai()], logprobs=True)
    assert turn.finish_reason == "tool_calls" and turn.text == ""
    assert len(turn.tool_calls) == 1
    assert turn.tool_calls[0]["function"]["name"] == "calculator"
    assert json.loads(turn.tool_calls[0]["function"]["arguments"]) == {"expression": "3*4"}
    assert turn.tool_calls[0]["id"].startswith("call_")
    assert turn.usage == {"prompt_tokens": 40, "completion_tokens": 3}
    assert turn.logprobs == [{"token": "<tool_call>", "logprob": -0.5}, {"token": "é", "logprob": -1.25}]
    # The server handed the model evalrx messages: arguments back as dicts, request options through.
    sent = fake.calls[0]
    assert sent["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"expression": "1+1"}
    assert sent["messages"][2] == {"role": "tool", "content": "2", "tool_call_id": "c0"}
    assert sent["tools"][0]["function"]["name"] == "calculator"
    assert sent["logprobs"] is True and sent["max_new_tokens"] == 9


def test_serve_plain_answer_and_malformed_call(served):
    fake = FakeHandle(
        [
            ChatTurn(
                text="<think>hmm</think>The answer is 12.",
                finish_reason="length",
                usage={"prompt_tokens": 3, "completion_tokens": 8},
            ),
            ChatTurn(text='<tool_call>\n{"name": calculator}\n</tool_call>', finish_reason="stop"),
        ]
    )
    url = served(fake)
    handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=url, max_retries=0))
    first = handle.chat([{"role": "user", "content": "hi"}])
    assert (first.text, first.tool_calls, first.finish_reason) == ("The answer is 12.", [], "length")
    assert first.logprobs is None  # not asked for
    second = handle.chat([{"role": "user", "content": "hi"}])
    # A malformed call is evidence: the raw markup comes back as content, with no native call.
    assert second.text == '<tool_call>\n{"name": calculator}\n</tool_call>' and second.tool_calls == []


def _raw_request(url: str, method: str, path: str, data: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url.rsplit("/v1", 1)[0] + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize(
    "body, status, match",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"model": "x"}', 400, "messages"),
        (b'{"messages": []}', 400, "non-empty"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": true}', 400, "Streaming"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": 2}', 400, "n=1"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 400, "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}', 400, "tools"),
        (b'{"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}', 400, "tool_choice"),
        (
            b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}',
            400,
            "does not accept images",
        ),
    ],
)
def test_serve_rejects_bad_requests_without_calling_the_model(served, body, status, match):
    fake = FakeHandle([ChatTurn(text="ok")])
    url = served(fake)
    code, payload = _raw_request(url, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    assert code == status
    assert payload["error"]["type"] == "invalid_request_error" and match in payload["error"]["message"]
    assert fake.calls == []
    # The server is still up after the bad request.
    assert _raw_request(url, "GET", "/health") == (200, {"status": "ok"})


def test_serve_routes_health_models_404_and_model_failure(served):
    fake = FakeHandle([RuntimeError("CUDA exploded"), ChatTurn(text="recovered")])
    url = served(fake)
    assert _raw_request(url, "GET", "/health") == (200, {"status": "ok"})
    code, models = _raw_request(url, "GET", "/v1/models")
    assert code == 200 and models["data"][0]["id"] == QWEN
    assert _raw_request(url, "GET", "/v1/nothing")[0] == 404
    body = json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode()
    code, payload = _raw_request(url, "POST", "/v1/chat/completions", body)
    assert code == 500 and "CUDA exploded" in payload["error"]["message"]
    code, payload = _raw_request(url, "POST", "/v1/chat/completions", body)
    assert code == 200 and payload["choices"][0]["message"]["content"] == "recovered"
    assert payload["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def test_serve_passes_sampling_temperature_but_keeps_greedy_default(served):
    fake = FakeHandle([ChatTurn(text="ok")])
    url = served(fake)
    greedy = APIModel(get_spec(QWEN), RuntimeConfig(base_url=url, max_retries=0))
    greedy.chat([{"role": "user", "content": "x"}])
    sampled = APIModel(get_spec(QWEN), RuntimeConfig(base_url=url, max_retries=0, temperature=0.7))
    sampled.chat([{"role": "user", "content": "x"}])
    assert [c["temperature"] for c in fake.calls] == [None, 0.7]
    body = json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": 5}).encode()
    assert _raw_request(url, "POST", "/v1/chat/completions", body)[0] == 400


def test_serve_runs_one_generation_at_a_time(served):
    fake = FakeHandle([ChatTurn(text="ok")], delay=0.15)
    url = served(fake)
    handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=url, max_retries=0))
    threads = [threading.Thread(target=handle.chat, args=([{"role": "user", "content": str(i)}],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(fake.calls) == 4 and fake.max_active == 1


def test_serve_main_rejects_unknown_spec():
    from evalrx.serve import main

    with pytest.raises(ValueError, match="Unknown model"):
        main(["--spec", "no-such-model", "--port", "0"])


def test_serve_answers_a_conversation_over_the_context_with_openais_400_and_code(served):
    from evalrx.core import ContextOverflow

    url = served(FakeHandle([ContextOverflow(900, 768)]))
    body = json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode()
    code, payload = _raw_request(url, "POST", "/v1/chat/completions", body)
    assert code == 400 and payload["error"]["code"] == "context_length_exceeded"
    assert payload["error"]["message"] == "the conversation is 900 tokens, over the model's context of 768"
