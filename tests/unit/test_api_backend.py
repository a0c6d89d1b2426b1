"""The `api` backend against real loopback HTTP servers (scripted stubs; no torch, so these run in seconds).

The end-to-end test with a real tiny model is tests/integration/test_api_serve.py.
The wire-format conversion alone is tests/unit/test_api_wire.py; `evalrx serve`'s request handling
over a fake handle is tests/unit/test_serve.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

import evalrx
from evalrx.core.capability import Capability, CapabilityError
from evalrx.models.backends import BACKENDS, RuntimeConfig
from evalrx.models.backends.api import APIModel
from evalrx.models.backends.api_errors import APIAuthenticationFailed, APIConnectionFailed, APIRequestFailed
from evalrx.models.backends.api_secrets import redact_url
from evalrx.specs import get_spec

FAKE_KEY = "sk-evalrx-TESTKEY-0123456789abcdef"
QWEN = "qwen2.5-0.5b-instruct"


def closed_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch):
    # A developer's real key or server must never leak into these tests.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def test_redact_url_hides_userinfo():
    assert redact_url("http://user:pw@host:1/v1") == "http://***@host:1/v1"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://u:p@ss@host:1/v1", "http://***@host:1/v1"),  # an unescaped @: hidden whole, not "ss@host"
        ("http://u:pa/ss@host/v1", "http://***@host/v1"),  # an unescaped /
        ("http://host/v1?to=a@b#x@y", "http://host/v1?to=a@b#x@y"),  # an @ in the query is no password
        ("postgresql+psycopg://u:p@ss@localhost:5432/db", "postgresql+psycopg://***@localhost:5432/db"),
    ],
)
def test_redact_url_hides_a_password_holding_at_or_slash(url, shown):
    assert redact_url(url) == shown
    assert "ss" not in redact_url(url).replace("localhost", "")


def test_a_store_url_shows_no_part_of_its_password():
    from evalrx.store import Store

    store = Store("postgresql+psycopg://evalrx:s3cr@t-tail@localhost:5432/db")
    assert store.display_url == "postgresql+psycopg://***@localhost:5432/db"
    store.engine.dispose()


# ----------------------------------------------------------------------------- capabilities


def test_provides_is_black_box():
    api = BACKENDS["api"]
    text_caps = api.provides(get_spec(QWEN))
    assert text_caps == {Capability.GENERATE, Capability.TOOL_CALLS, Capability.LOGPROBS}
    vision_caps = api.provides(get_spec("qwen2.5-vl-7b-instruct"))
    assert Capability.VISION in vision_caps
    for white_box in (Capability.LOGITS, Capability.HIDDEN_STATES, Capability.ATTENTION):
        assert white_box not in vision_caps


def test_capability_error_comes_before_any_network_call():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    t0 = time.perf_counter()
    with pytest.raises(CapabilityError) as info:
        evalrx.load(QWEN, backend="api", want=["hidden_states"], base_url=url, max_retries=0)
    assert Capability.HIDDEN_STATES in info.value.missing
    assert time.perf_counter() - t0 < 2.0


def test_missing_openai_package_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` raise ImportError
    with pytest.raises(ImportError, match=r"evalrx\[api\]"):
        APIModel(get_spec(QWEN), RuntimeConfig(base_url="http://127.0.0.1:1/v1"))


# ----------------------------------------------------------------------------- key hiding and errors


def test_api_key_never_in_repr_config_or_connection_error():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    runtime = RuntimeConfig(base_url=url, api_key=FAKE_KEY, max_retries=0, timeout=5)
    assert FAKE_KEY not in str(runtime) and FAKE_KEY not in repr(runtime)
    handle = evalrx.load(QWEN, backend="api", base_url=url, api_key=FAKE_KEY, max_retries=0, timeout=5)
    assert FAKE_KEY not in repr(handle) and FAKE_KEY not in str(handle)
    assert all(FAKE_KEY not in repr(v) for v in vars(handle).values() if not isinstance(v, RuntimeConfig))
    with pytest.raises(APIConnectionFailed) as info:
        handle.chat([{"role": "user", "content": "hi"}])
    exc = info.value
    message = str(exc)
    assert url in message and "OPENAI_BASE_URL" in message and "running" in message
    assert FAKE_KEY not in message and FAKE_KEY not in repr(exc)
    # One clean exception: no SDK/httpx chain to print or to carry the request headers.
    assert exc.__cause__ is None and exc.__context__ is None and exc.__suppress_context__


def test_key_from_environment_is_used_and_hidden(monkeypatch):
    seen: dict = {}

    def respond(handler, body):
        seen["auth"] = handler.headers.get("Authorization")
        return 200, _completion("ok")

    with _StubServer(respond) as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        handle = evalrx.load(QWEN, backend="api")
        assert stub.url in repr(handle) and FAKE_KEY not in repr(handle)
        assert handle.chat([{"role": "user", "content": "hi"}]).text == "ok"
    assert seen["auth"] == f"Bearer {FAKE_KEY}"


def test_local_server_without_key_gets_placeholder():
    seen: dict = {}

    def respond(handler, body):
        seen["auth"] = handler.headers.get("Authorization")
        return 200, _completion("ok")

    with _StubServer(respond) as stub:
        assert (
            APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url)).chat([{"role": "user", "content": "x"}]).text
            == "ok"
        )
    assert seen["auth"] == "Bearer EMPTY"


def test_authentication_error_is_clear_and_keyless():
    def respond(handler, body):
        return 401, {"error": {"message": f"Incorrect API key provided: {FAKE_KEY}", "type": "invalid_request_error"}}

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, api_key=FAKE_KEY, max_retries=0))
        with pytest.raises(APIAuthenticationFailed) as info:
            handle.chat([{"role": "user", "content": "hi"}])
    assert "401" in str(info.value) and "OPENAI_API_KEY" in str(info.value)
    assert FAKE_KEY not in str(info.value) and info.value.__context__ is None


def test_server_error_message_is_scrubbed_of_the_key():
    def respond(handler, body):
        return 400, {"error": {"message": f"bad model for key {FAKE_KEY}", "type": "invalid_request_error"}}

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, api_key=FAKE_KEY, max_retries=0))
        with pytest.raises(APIRequestFailed) as info:
            handle.chat([{"role": "user", "content": "hi"}])
    assert info.value.status_code == 400
    assert "bad model for key ***" in str(info.value) and FAKE_KEY not in str(info.value)


def test_retries_with_backoff_then_succeeds():
    hits: list = []

    def respond(handler, body):
        hits.append(time.perf_counter())
        return (503, {"error": {"message": "busy"}}) if len(hits) < 3 else (200, _completion("finally"))

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, max_retries=2))
        assert handle.chat([{"role": "user", "content": "hi"}]).text == "finally"
    assert len(hits) == 3
    assert hits[2] - hits[1] > 0.1  # the SDK waited between attempts


def test_retries_exhausted_reports_status():
    hits: list = []

    def respond(handler, body):
        hits.append(1)
        return 500, {"error": {"message": "boom"}}

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, max_retries=1))
        with pytest.raises(APIRequestFailed, match="HTTP 500.*boom"):
            handle.chat([{"role": "user", "content": "hi"}])
    assert len(hits) == 2


def test_timeout_is_a_connection_failure():
    def respond(handler, body):
        time.sleep(1.5)
        return 200, _completion("late")

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, max_retries=0, timeout=0.3))
        t0 = time.perf_counter()
        with pytest.raises(APIConnectionFailed, match="did not answer within 0.3 s"):
            handle.chat([{"role": "user", "content": "hi"}])
        assert time.perf_counter() - t0 < 1.4


def test_request_body_and_turn_fields():
    seen: dict = {}

    def respond(handler, body):
        seen.update(body)
        payload = _completion(None, finish="tool_calls")
        payload["choices"][0]["message"]["tool_calls"] = [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'},
            }
        ]
        payload["choices"][0]["logprobs"] = {
            "content": [{"token": "<tool_call>", "logprob": -0.25, "bytes": None, "top_logprobs": []}]
        }
        return 200, payload

    tools = [evalrx.Tool("calculator", "math").to_openai()]
    spec = evalrx.ModelSpec("my-served", "qwen2", hf_repo="/ckpt/dir", api_model="served-name")
    with _StubServer(respond) as stub:
        handle = APIModel(spec, RuntimeConfig(base_url=stub.url, temperature=0.0, max_new_tokens=17))
        turn = handle.chat([{"role": "user", "content": "2+2"}], tools, logprobs=True)
    assert seen["model"] == "served-name"
    assert seen["tools"] == tools and seen["logprobs"] is True
    assert seen["max_tokens"] == 17 and seen["temperature"] == 0.0
    assert turn.text == "" and turn.finish_reason == "tool_calls"
    assert turn.tool_calls == [
        {"id": "call_9", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'}}
    ]
    assert turn.usage == {"prompt_tokens": 5, "completion_tokens": 2}
    assert turn.logprobs == [{"token": "<tool_call>", "logprob": -0.25}]


def test_image_to_text_only_model_fails_before_network():
    from PIL import Image

    handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=f"http://127.0.0.1:{closed_port()}/v1"))
    with pytest.raises(ValueError, match="does not accept images"):
        handle.chat([{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (4, 3), (255, 0, 0))}]}])


def test_unknown_chat_option_is_a_type_error():
    handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url="http://127.0.0.1:1/v1"))
    with pytest.raises(TypeError):
        handle.chat([{"role": "user", "content": "x"}], top_k=3)


# ----------------------------------------------------------------------------- one budget per model call


def one_line_error(info, url: str) -> str:
    """The raised message: one line that names the server."""
    message = str(info.value)
    assert "\n" not in message and url in message, message
    return message


def test_a_hanging_server_is_cut_at_the_budget_and_the_elapsed_time_is_kept():
    hits: list = []

    def respond(handler, body):
        hits.append(1)
        stub.released.wait(10)  # never answers while the test runs
        return None

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, timeout=1.0, max_retries=3))
        t0 = time.perf_counter()
        with pytest.raises(APIConnectionFailed) as info:
            handle.chat([{"role": "user", "content": "hi"}])
        wall = time.perf_counter() - t0
    assert 0.9 < wall < 2.5  # the budget covers the retries: no second 1 s try after it is spent
    assert hits == [1]
    message = one_line_error(info, stub.url)
    assert "did not answer within 1 s" in message and "--timeout" in message and "1 try" in message
    assert info.value.elapsed_ms == pytest.approx(wall * 1000, abs=300)


def test_concurrent_cases_each_keep_their_own_budget():
    from evalrx.models.agent import run_batch

    def respond(handler, body):
        stub.released.wait(10)
        return None

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, timeout=1.0, max_retries=1))
        t0 = time.perf_counter()
        trajs = run_batch(handle, ["a", "b", "c", "d"], tools_factory=lambda case: [], concurrency=4)
        wall = time.perf_counter() - t0
    assert wall < 2.5  # four 1 s budgets side by side, not one after the other
    assert all(t.metrics["terminated"] == "error" and stub.url in t.metrics["error"] for t in trajs)


@pytest.mark.parametrize("headers_first", [True, False], ids=["trickled-body", "trickled-status-line"])
def test_a_trickling_server_is_cut_at_the_budget(headers_first):
    # One byte a second never trips a per-read timeout; only a deadline on the whole answer cuts it.
    def respond(handler, body):
        payload = json.dumps(_completion("slow")).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
        wire = head + payload
        if headers_first:
            handler.wfile.write(head)
            handler.wfile.flush()
            wire = payload
        for i in range(len(wire)):
            if stub.released.wait(1.0):
                break
            try:
                handler.wfile.write(wire[i : i + 1])
                handler.wfile.flush()
            except OSError:  # the client gave up
                break
        return None

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, timeout=2.5, max_retries=2))
        t0 = time.perf_counter()
        with pytest.raises(APIConnectionFailed) as info:
            handle.chat([{"role": "user", "content": "hi"}])
        wall = time.perf_counter() - t0
    assert 2.3 < wall < 4.0
    assert "did not answer within 2.5 s" in one_line_error(info, stub.url)


def test_retry_after_beyond_the_budget_fails_at_once():
    hits: list = []

    def respond(handler, body):
        hits.append(1)
        return 429, {"error": {"message": "slow down"}}, {"Retry-After": "30"}

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, timeout=3, max_retries=3))
        t0 = time.perf_counter()
        with pytest.raises(APIRequestFailed) as info:
            handle.chat([{"role": "user", "content": "hi"}])
        wall = time.perf_counter() - t0
    assert wall < 1.0 and hits == [1]  # no 30 s wait, no wait until the deadline either
    message = one_line_error(info, stub.url)
    assert info.value.status_code == 429
    assert "HTTP 429" in message and "slow down" in message and "retry after 30 s" in message
    assert "--timeout" in message


def test_retry_after_within_the_budget_is_honoured():
    hits: list = []

    def respond(handler, body):
        hits.append(time.perf_counter())
        if len(hits) == 1:
            return 503, {"error": {"message": "warming up"}}, {"Retry-After": "0.4"}
        return 200, _completion("ready")

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, timeout=5, max_retries=1))
        assert handle.chat([{"role": "user", "content": "hi"}]).text == "ready"
    assert len(hits) == 2 and hits[1] - hits[0] >= 0.4


def test_backoff_stops_when_the_budget_cannot_cover_another_try():
    hits: list = []

    def respond(handler, body):
        hits.append(1)
        return 503, {"error": {"message": "busy"}}

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, timeout=1.5, max_retries=10))
        t0 = time.perf_counter()
        with pytest.raises(APIRequestFailed) as info:
            handle.chat([{"role": "user", "content": "hi"}])
        wall = time.perf_counter() - t0
    assert wall < 1.6 and 2 <= len(hits) <= 3  # waits of ~0.5 s then ~1 s: the second does not fit
    message = one_line_error(info, stub.url)
    assert "HTTP 503" in message and f"{len(hits)} tries" in message and "--retries" in message


@pytest.mark.parametrize(
    "status, body, content_type, needles",
    [
        (
            200,
            b"<html><body>Welcome to nginx</body></html>",
            "text/html",
            ["answered HTML, not JSON", "HTTP 200", "'<html><body>Welcome", "/v1"],
        ),
        (200, b"{not json at all", "application/json", ["answered invalid JSON", "HTTP 200", "'{not json at all'"]),
        (200, b'{"object": "list", "data": []}', "application/json", ["not a chat completion", '\'{"object"']),
        (404, b"<!DOCTYPE html><title>404</title>", "text/html", ["HTTP 404", "an HTML page", "/v1"]),
    ],
    ids=["html", "invalid-json", "not-a-completion", "html-404"],
)
def test_a_body_that_is_not_a_chat_completion_is_one_line_naming_the_server(status, body, content_type, needles):
    def respond(handler, _body):
        return status, body, {"Content-Type": content_type}

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, max_retries=0))
        with pytest.raises(APIRequestFailed) as info:
            handle.chat([{"role": "user", "content": "hi"}])
    message = one_line_error(info, stub.url)
    assert info.value.status_code == status
    for needle in needles:
        assert needle in message, message
    assert info.value.__context__ is None and info.value.elapsed_ms is not None


def test_a_connection_dropped_mid_answer_is_retried_then_one_line():
    hits: list = []

    def respond(handler, body):
        hits.append(1)
        handler.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"id"')
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)  # gone before the 500 bytes it promised
        return None

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, timeout=10, max_retries=1))
        with pytest.raises(APIConnectionFailed) as info:
            handle.chat([{"role": "user", "content": "hi"}])
    message = one_line_error(info, stub.url)
    assert len(hits) == 2 and "2 tries" in message
    assert "broke before its answer was complete" in message and "--retries" in message


def test_a_tool_call_without_function_is_recorded_as_malformed():
    bad_call = {"id": "call_x", "type": "custom", "custom": {"name": "calculator", "input": "2+2"}}
    turns = iter([[bad_call], None])

    def respond(handler, body):
        calls = next(turns)
        payload = _completion(None if calls else "4", finish="tool_calls" if calls else "stop")
        if calls:
            payload["choices"][0]["message"]["tool_calls"] = calls
        return 200, payload

    with _StubServer(respond) as stub:
        handle = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url, max_retries=0))
        traj = evalrx.Agent(handle, [evalrx.Tool("calculator", "math", fn=lambda expression: "4")], max_turns=3).run(
            "What is 2+2?"
        )
    first = traj.steps[1]
    assert first.tool_calls == [] and first.parse_error and "call #1" in first.parse_error
    assert traj.metrics["n_parse_errors"] == 1 and traj.metrics["n_tool_calls"] == 0
    assert traj.final_answer == "4"


def test_a_call_without_a_name_is_kept_in_the_turn():
    nameless = {"id": "call_y", "type": "function", "function": {"arguments": "{}"}}

    def respond(handler, body):
        payload = _completion(None, finish="tool_calls")
        payload["choices"][0]["message"]["tool_calls"] = [
            nameless,
            {"id": "call_z", "type": "function", "function": {"name": "calculator", "arguments": "{}"}},
        ]
        return 200, payload

    with _StubServer(respond) as stub:
        turn = APIModel(get_spec(QWEN), RuntimeConfig(base_url=stub.url)).chat([{"role": "user", "content": "x"}])
    assert turn.tool_calls[0] == nameless and turn.tool_calls[1]["function"]["name"] == "calculator"


@pytest.mark.parametrize(
    "timeout, retries", [(0, 3), (-1, 3), (3601, 3), (float("nan"), 3), (5, -1), (5, 11), (5, 1.5)]
)
def test_call_budget_out_of_range_is_refused(timeout, retries):
    with pytest.raises(ValueError, match="timeout|max_retries"):
        APIModel(get_spec(QWEN), RuntimeConfig(base_url="http://127.0.0.1:1/v1", timeout=timeout, max_retries=retries))


# ----------------------------------------------------------------------------- a scriptable stub server


def _completion(content, finish="stop") -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


class _StubServer:
    """A loopback HTTP server whose answers come from `respond(handler, body) -> (status, payload)`."""

    def __init__(self, respond: Callable[[Any, dict], tuple]):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                answer = outer.respond(self, body)
                if answer is None:  # the responder wrote (or withheld) the answer on the socket itself
                    self.close_connection = True
                    return
                status, payload, *more = answer  # a third item adds headers; bytes are sent as they are
                headers = dict(more[0]) if more else {}
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except ConnectionError:  # the client timed out and left
                    pass

        self.respond = respond
        self.released = threading.Event()  # set on exit: handlers that hang wait on it
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
