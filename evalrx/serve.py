"""`evalrx serve`: an OpenAI-compatible chat-completions server over a local model.

It lets the `api` backend (and any OpenAI client) talk to a model loaded in-process by
`hf_local`, so API-side runs and white-box runs use the very same weights. Built on the
standard library's `ThreadingHTTPServer`; one generation runs at a time (a lock), since a
local model is not re-entrant.

Endpoints:
    GET  /health               -> {"status": "ok"}
    GET  /v1/models            -> the served model
    POST /v1/chat/completions  -> an OpenAI chat completion (no streaming, n=1)

Decoding is greedy unless a request sets `temperature` > 0, which samples (hf_local);
`top_p`, `seed` and other sampling options are accepted and ignored. A greedy reply is
deterministic and equal to what `hf_local` gives for the same messages. Tool calls are
parsed from the generated text with the spec's local codec (Hermes `<tool_call>` blocks for
Qwen2.5) and returned as native `tool_calls`. `tool_choice` is "auto" (the default), "none"
(the tools are not shown to the model), "required" or a named function
(`{"type": "function", "function": {"name": ...}}`): a forced call is made by prefilling the
reply with the codec's `call_prefix` (up to the tool's name for "required", up to its
arguments for a named function) and letting the model write the rest, which is parsed as
usual. `logprobs` returns the chosen token's log-probability per generated token (not for
the prefilled ones); `top_logprobs` lists are always empty (alternatives are not computed).
"""

from __future__ import annotations

import argparse
import inspect
import json
import signal
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Sequence
from urllib.parse import urlsplit

from evalrx.core.capability import Capability
from evalrx.core.model import ContextOverflow

MAX_BODY_BYTES = 64 * 1024 * 1024  # generous for base64 images, bounded against abuse


class ServeError(RuntimeError):
    """The server could not start (e.g. the port is taken)."""


class RequestError(ValueError):
    """A bad request: becomes an OpenAI-style error response with `status`."""

    def __init__(
        self, message: str, status: int = 400, param: Optional[str] = None, code: Optional[str] = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


def error_body(
    message: str, *, kind: str = "invalid_request_error", param: Optional[str] = None, code: Optional[str] = None
) -> dict:
    """The OpenAI error envelope."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class ChatService:
    """Turns OpenAI chat-completion requests into `handle.chat` calls and back.

    Transport-free (no sockets), so request handling is testable on its own.

    Args:
        handle: an evalrx model handle with `chat(messages, tools, logprobs=..., max_new_tokens=...)`.
        model_name: the id reported by /v1/models (default: the spec key).
        codec: the tool codec that parses calls out of generated text (default: `codec_for(handle)`).
    """

    def __init__(self, handle: Any, *, model_name: Optional[str] = None, codec: Any = None) -> None:
        self.handle = handle
        self.model_name = model_name or handle.spec.key
        if codec is None:
            from evalrx.models.toolcodec import codec_for

            codec = codec_for(handle)
        self.codec = codec
        self.vision = Capability.VISION in frozenset(getattr(handle, "capabilities", ()))
        self.prefills = _takes_prefill(handle)
        self.created = int(time.time())
        self._lock = threading.Lock()

    def models(self) -> dict:
        """The /v1/models payload."""
        return {
            "object": "list",
            "data": [{"id": self.model_name, "object": "model", "created": self.created, "owned_by": "evalrx"}],
        }

    def parse_request(self, body: Any) -> dict:
        """Validate a request body; return the arguments for `handle.chat` plus response options.

        Raises:
            RequestError: the body is not a valid request.
        """
        from evalrx.models.backends.api_wire import from_wire_messages

        if not isinstance(body, dict):
            raise RequestError("The request body must be a JSON object.")
        if "messages" not in body:
            raise RequestError("Missing required parameter: 'messages'.", param="messages")
        if body.get("stream"):
            raise RequestError("Streaming is not supported by evalrx serve; send stream=false.", param="stream")
        if body.get("n", 1) not in (1, None):
            raise RequestError("Only n=1 is supported (decoding is greedy).", param="n")
        try:
            messages = from_wire_messages(body["messages"], allow_images=self.vision)
        except ValueError as exc:
            raise RequestError(str(exc), param="messages") from None

        tools = body.get("tools")
        if tools is not None:
            if not isinstance(tools, list) or not all(
                isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("name") for t in tools
            ):
                raise RequestError("'tools' must be a list of {type: function, function: {name, ...}}.", param="tools")
        prefill = None
        choice = body.get("tool_choice")
        if choice == "none":
            tools = None
        elif choice not in (None, "auto"):
            prefill = self.forced_prefix(choice, tools)

        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise RequestError("max_tokens must be a positive integer.", param="max_tokens")
        temperature = body.get("temperature")
        if temperature is not None and (
            isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2
        ):
            raise RequestError("temperature must be a number between 0 and 2.", param="temperature")
        logprobs = body.get("logprobs", False)
        if not isinstance(logprobs, bool) and logprobs is not None:
            raise RequestError("logprobs must be a boolean.", param="logprobs")
        top = body.get("top_logprobs")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20):
            raise RequestError("top_logprobs must be an integer between 0 and 20.", param="top_logprobs")
        model = body.get("model")
        return {
            "messages": messages,
            "tools": tools or None,
            "logprobs": bool(logprobs),
            "max_new_tokens": max_tokens,
            "temperature": float(temperature) if temperature else None,
            "model": model if isinstance(model, str) and model else self.model_name,
            "prefill": prefill,
        }

    def forced_prefix(self, choice: Any, tools: Optional[list]) -> str:
        """The reply prefill that forces a call for `tool_choice` "required" or a named function.

        Raises:
            RequestError: an invalid `tool_choice` (as OpenAI words it), no `tools` to call, a
                named function not among them, or a model that cannot be forced (its codec has
                no call prefix, or its backend does not prefill).
        """
        if isinstance(choice, str) and choice != "required":
            raise RequestError(
                f"Invalid value: {choice!r}. Supported values are: 'none', 'auto', and 'required'.",
                param="tool_choice",
                code="invalid_value",
            )
        name = None
        if choice != "required":
            function = choice.get("function") if isinstance(choice, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if (
                not isinstance(choice, dict)
                or choice.get("type") != "function"
                or not isinstance(name, str)
                or not name
            ):
                raise RequestError(
                    "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or "
                    '{"type": "function", "function": {"name": "<tool name>"}}.',
                    param="tool_choice",
                )
        if not tools:
            raise RequestError(
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
                param="tool_choice",
            )
        if name is not None and name not in [t["function"]["name"] for t in tools]:
            raise RequestError(f"Tool choice {name!r} not found in 'tools' parameter.", param="tool_choice")
        call_prefix = getattr(self.codec, "call_prefix", None)  # a codec not built on ToolCallCodec may lack it
        prefix = call_prefix(name) if call_prefix is not None else None
        if prefix is None or not self.prefills:
            why = "its tool-call format has no call prefix" if prefix is None else "its backend cannot prefill a reply"
            raise RequestError(
                f"This server cannot force a tool call for {self.model_name} ({why}); "
                "send tool_choice 'auto' or 'none'.",
                param="tool_choice",
            )
        return prefix

    def complete(self, body: Any) -> dict:
        """Answer one chat-completion request body (already JSON-decoded).

        Raises:
            RequestError: an invalid request (the model is not called).
        """
        req = self.parse_request(body)
        kwargs: dict = {"logprobs": req["logprobs"]}
        if req["max_new_tokens"] is not None:
            kwargs["max_new_tokens"] = req["max_new_tokens"]
        if req["temperature"]:  # 0 or absent keeps the handle's default (greedy)
            kwargs["temperature"] = req["temperature"]
        if req["prefill"] is not None:  # tool_choice "required" or a named function: the call is forced
            kwargs["prefill"] = req["prefill"]
        with self._lock:  # one forward at a time: local models are not re-entrant
            try:
                turn = self.handle.chat(req["messages"], req["tools"], **kwargs)
            except ContextOverflow as exc:  # as OpenAI answers a conversation over the context: 400, with its code
                raise RequestError(str(exc), param="messages", code="context_length_exceeded") from None
        return self.build_response(turn, model=req["model"], logprobs=req["logprobs"])

    def build_response(self, turn: Any, *, model: str, logprobs: bool) -> dict:
        """Turn a ChatTurn into an OpenAI chat.completion object, parsing tool calls from its text."""
        parsed = self.codec.parse(turn)
        calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args or {}, ensure_ascii=False)},
            }
            for c in parsed.calls
        ]
        if parsed.errors:
            content: Optional[str] = turn.text  # keep malformed markup visible: it is evidence
        elif calls:
            content = parsed.text or None
        else:
            content = parsed.text
        message: dict = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else (turn.finish_reason or "stop")
        usage = turn.usage or {}
        prompt_tokens = int(usage.get("prompt_tokens", 0))
        completion_tokens = int(usage.get("completion_tokens", 0))
        choice: dict = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if logprobs and turn.logprobs is not None:
            choice["logprobs"] = {
                "content": [
                    {
                        "token": lp["token"],
                        "logprob": float(lp["logprob"]),
                        "bytes": list(str(lp["token"]).encode("utf-8")),
                        "top_logprobs": [],
                    }
                    for lp in turn.logprobs
                ],
                "refusal": None,
            }
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _takes_prefill(handle: Any) -> bool:
    """Whether `handle.chat` takes `prefill=` (a reply forced to start with given text)."""
    try:
        return "prefill" in inspect.signature(handle.chat).parameters
    except (TypeError, ValueError, AttributeError):
        return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the openai SDK expects
    server_version = "evalrx-serve"
    server: "EvalrxHTTPServer"

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            sys.stderr.write(f"evalrx serve: {self.address_string()} {format % args}\n")

    def _send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> str:
        path = urlsplit(self.path).path.rstrip("/")
        return path[3:] if path.startswith("/v1/") else path  # /v1/x and /x are the same route

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        route = self._route()
        if route == "/health":
            self._send_json(200, {"status": "ok"})
        elif route == "/models":
            self._send_json(200, self.server.service.models())
        else:
            self._send_json(404, error_body(f"No route GET {self.path}.", kind="not_found_error"))

    def do_POST(self) -> None:  # noqa: N802
        route = self._route()
        try:
            body = self._read_json()
        except RequestError as exc:
            self.close_connection = True  # the unread body would corrupt the next request
            self._send_json(exc.status, error_body(str(exc), param=exc.param))
            return
        if route != "/chat/completions":
            self._send_json(404, error_body(f"No route POST {self.path}.", kind="not_found_error"))
            return
        try:
            payload = self.server.service.complete(body)
        except RequestError as exc:
            self._send_json(exc.status, error_body(str(exc), param=exc.param, code=exc.code))
            return
        except Exception as exc:  # a model failure answers 500; the server keeps serving
            traceback.print_exc(file=sys.stderr)
            self._send_json(500, error_body(f"Generation failed: {type(exc).__name__}: {exc}", kind="server_error"))
            return
        self._send_json(200, payload)

    def _read_json(self) -> Any:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raise RequestError("Chunked request bodies are not supported; send Content-Length.", status=411)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise RequestError("Invalid Content-Length header.") from None
        if length > MAX_BODY_BYTES:
            raise RequestError(f"Request body too large (over {MAX_BODY_BYTES} bytes).", status=413)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(f"The request body is not valid JSON: {exc}") from None


class EvalrxHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server carrying the ChatService its handlers call."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple, service: ChatService, *, quiet: bool = False) -> None:
        self.service = service
        self.quiet = quiet
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that hung up (timeout, Ctrl-C) is routine, not a server fault
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}/v1"


def make_server(
    handle: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    quiet: bool = False,
    model_name: Optional[str] = None,
    codec: Any = None,
) -> EvalrxHTTPServer:
    """Bind a server for an already-built handle (port 0 picks a free port); call `serve_forever()`."""
    return EvalrxHTTPServer((host, port), ChatService(handle, model_name=model_name, codec=codec), quiet=quiet)


def serve(
    spec_key: str,
    *,
    checkpoint: Optional[str] = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    backend: str = "hf_local",
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    max_new_tokens: Optional[int] = None,
    quiet: bool = False,
) -> None:
    """Load a model and serve it over the OpenAI chat-completions protocol until interrupted.

    Prints `evalrx serve: <spec> on http://host:port/v1` once it accepts connections.

    Args:
        spec_key: the model spec key (see `evalrx specs`).
        checkpoint: a local model directory overriding the spec's weights.
        host: interface to bind (loopback by default; the server has no authentication).
        port: TCP port; 0 picks a free one (the printed line names it).
        backend: a local backend, "hf_local" (default) or "vllm_offline".
        device: torch device for hf_local.
        dtype: torch dtype name.
        max_new_tokens: default generation limit when a request sets no max_tokens.
        quiet: do not log each request to stderr.
    """
    import evalrx

    if backend == "api":
        raise ValueError("evalrx serve needs a local backend (hf_local or vllm_offline), not 'api'.")
    runtime: dict = {}
    if device:
        runtime["device"] = device
    if dtype:
        runtime["dtype"] = dtype
    if max_new_tokens:
        runtime["max_new_tokens"] = int(max_new_tokens)
    handle = evalrx.load(spec_key, backend=backend, checkpoint=checkpoint, want=["generate"], **runtime)
    try:
        server = make_server(handle, host, port, quiet=quiet)
    except OSError as exc:
        raise ServeError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}. Pick another --port (0 picks a free one)."
        ) from None

    def _stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _stop) if threading.current_thread() is threading.main_thread() else None
    print(f"evalrx serve: {handle.spec.key} on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def build_parser() -> argparse.ArgumentParser:
    """The `evalrx serve` argument parser."""
    p = argparse.ArgumentParser(
        prog="evalrx serve",
        description="Serve a local model over the OpenAI chat-completions protocol (greedy unless temperature > 0).",
    )
    p.add_argument("--spec", required=True, help="model spec key, e.g. qwen2.5-0.5b-instruct")
    p.add_argument("--checkpoint", help="local model directory overriding the spec's weights")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; no auth, keep it local)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--backend", default="hf_local", choices=["hf_local", "vllm_offline"], help="local backend")
    p.add_argument("--device", help="torch device, e.g. cpu or cuda:0")
    p.add_argument("--dtype", help="torch dtype, e.g. float32 or bfloat16")
    p.add_argument("--max-new-tokens", type=int, help="default generation limit per request")
    p.add_argument("--quiet", action="store_true", help="do not log requests")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `evalrx serve` (the CLI passes the arguments after `serve`)."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        serve(
            args.spec,
            checkpoint=args.checkpoint,
            host=args.host,
            port=args.port,
            backend=args.backend,
            device=args.device,
            dtype=args.dtype,
            max_new_tokens=args.max_new_tokens,
            quiet=args.quiet,
        )
    except ServeError as exc:
        print(f"evalrx serve: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
