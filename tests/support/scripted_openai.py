"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol with scripted replies.

Used wherever the toolkit talks to an LLM (rubric generation, judges, policies): the code under test
goes through the real `openai` client and a real socket; only the model behind it is a script.

    with ScriptedOpenAI(["first reply", {"status": 500}, {"content": "{...}", "usage": {...}}]) as llm:
        client = AsyncOpenAI(base_url=llm.base_url, api_key="x")
        ...
        assert len(llm.requests) == 3

A reply is a string (the assistant message) or a dict with any of ``content`` (str), ``status``
(an HTTP error status to answer with instead), ``delay_s`` (sleep before answering),
``finish_reason`` (default "stop"), ``usage`` (``prompt_tokens``, ``completion_tokens``), ``model``
(the model name the reply carries; default: the one requested) and ``logprobs`` (a list of
per-token log-probabilities, sent as OpenAI ``choices[0].logprobs.content``) and ``tool_calls`` (a list
of ``(name, arguments)`` pairs, sent as the message's ``tool_calls``, as vLLM's tool-call parser moves a
call there; ``content`` may then be None); or ``body`` alone: the
response body as it is (any JSON value, or bytes sent unchanged), for a server that breaks the protocol.
`replies` may also be a callable ``request_body -> reply``. Once a list runs out, its last reply
repeats.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["ScriptedOpenAI"]

Reply = str | dict[str, Any]


class _QuietServer(http.server.ThreadingHTTPServer):
    """A client that gave up (a timeout under test) is expected: no traceback on stderr for it."""

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ScriptedOpenAI:
    """Context manager: starts the server on a free port, stops it on exit."""

    def __init__(self, replies: Iterable[Reply] | Callable[[dict], Reply] = (), *,
                 model: str = "scripted-model", host: str = "127.0.0.1") -> None:
        self.model = model
        self.requests: list[dict] = []
        self.max_in_flight = 0
        self._script = replies if callable(replies) else list(replies)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._served = 0
        self._server = _QuietServer((host, 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedOpenAI:
        # A short poll interval: shutdown() waits up to one interval, and many tests start a server.
        self._thread = threading.Thread(target=lambda: self._server.serve_forever(poll_interval=0.05),
                                        name="scripted-openai", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _next_reply(self, body: dict) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            index = self._served
            self._served += 1
        if callable(self._script):
            reply = self._script(body)
        elif not self._script:
            reply = "ok"
        else:
            reply = self._script[min(index, len(self._script) - 1)]
        return {"content": reply} if isinstance(reply, str) else dict(reply)

    def _completion(self, body: dict, reply: dict[str, Any]) -> dict[str, Any]:
        content = reply.get("content", "")
        usage = reply.get("usage") or {"prompt_tokens": 10,
                                       "completion_tokens": max(1, len((content or "").split()))}
        usage = {**usage, "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)}
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": reply.get("finish_reason", "stop"),
        }
        if reply.get("tool_calls"):
            choice["message"]["tool_calls"] = [
                {"id": f"call-{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
                for i, (name, arguments) in enumerate(reply["tool_calls"])]
        if reply.get("logprobs") is not None:
            choice["logprobs"] = {"content": [{"token": f"t{i}", "logprob": value, "bytes": None,
                                               "top_logprobs": []}
                                              for i, value in enumerate(reply["logprobs"])]}
        return {
            "id": f"chatcmpl-{self._served}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.get("model") or body.get("model") or self.model,
            "choices": [choice],
            "usage": usage,
        }

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        scripted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": scripted.model, "object": "model", "created": 0, "owned_by": "scripted"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                with scripted._lock:
                    scripted._in_flight += 1
                    scripted.max_in_flight = max(scripted.max_in_flight, scripted._in_flight)
                try:
                    reply = scripted._next_reply(body)
                    if reply.get("delay_s"):
                        time.sleep(float(reply["delay_s"]))
                    if reply.get("status"):
                        status = int(reply["status"])
                        self._send(status, {"error": {"message": f"scripted error {status}",
                                                      "type": "scripted", "code": status}})
                    elif "body" in reply:
                        self._send(200, reply["body"])
                    else:
                        self._send(200, scripted._completion(body, reply))
                finally:
                    with scripted._lock:
                        scripted._in_flight -= 1

        return Handler
