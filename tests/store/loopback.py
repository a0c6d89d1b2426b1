"""A loopback OpenAI-compatible chat server for the store and worker tests (real sockets, no mocks)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "The answer is 7."}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
}


class ChatServer:
    """Answers every POST with `status` and `body` (default: a final answer) and records each request's
    path and Authorization header (`seen`, in order). With `echo_auth`, "{auth}" in the body becomes the
    Authorization header received (a server that quotes the key it refused)."""

    def __init__(
        self, host: str = "127.0.0.1", *, status: int = 200, body: Optional[dict] = None, echo_auth: bool = False
    ) -> None:
        seen = self.seen = []
        paths = self.hits = []
        template = json.dumps(ANSWER if body is None else body)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append(self.headers.get("Authorization"))
                paths.append(self.path)
                auth = json.dumps(self.headers.get("Authorization") or "")[1:-1]
                data = (template.replace("{auth}", auth) if echo_auth else template).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "ChatServer":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def failing_500() -> ChatServer:
    """A server whose every chat completion answers HTTP 500."""
    return ChatServer(status=500, body={"error": {"message": "upstream exploded", "type": "server_error"}})


def completion(content: str, *, prompt_tokens: int = 50, completion_tokens: int = 20) -> dict:
    """A chat completion whose message says `content`."""
    return {
        **ANSWER,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ScriptedChatServer:
    """Answers each POST with the next of `script`, in order: a dict body (a 200 JSON answer) or a tuple
    (status, body, headers, delay seconds). Past the script it answers 500, so an unexpected request shows.
    Records each request's path, headers (lower-case names) and JSON body (`requests`, in order)."""

    def __init__(self, script: list, host: str = "127.0.0.1") -> None:
        self.requests: list = []
        self.released = threading.Event()  # set on exit: a hanging answer stops waiting
        answers = list(script)
        lock = threading.Lock()
        requests, released = self.requests, self.released

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    requests.append(
                        {
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": json.loads(raw or b"{}"),
                        }
                    )
                    step = answers.pop(0) if answers else (500, {"error": {"message": "no more scripted answers"}})
                if isinstance(step, dict):
                    step = (200, step)
                status, body, headers, delay = (*step, *({}, 0.0)[len(step) - 2 :])
                if delay and released.wait(delay):
                    return  # the test is over: the client gave up long ago
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client hung up at its deadline
                    pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedChatServer":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
