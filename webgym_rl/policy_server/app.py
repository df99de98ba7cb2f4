"""The HTTP app (FastAPI) of the policy server, and `running_policy_server` to run it in a thread.

Routes (`webgym_rl.policy_server` lists what each does): ``POST /v1/chat/completions``,
``GET /v1/models``, ``POST /reload``, ``POST /weights``, ``GET /health``, ``GET /metrics``. Each
request and reply is a model of `webgym_rl.policy_server.protocol`; the work is the
`webgym_rl.policy_server.service.PolicyService`'s. Errors answer in the OpenAI shape
(`webgym_rl.policy_server.protocol.error_body`), routing and validation errors too.

Security: binds 127.0.0.1 by default; binding any other address requires ``--token`` and then every
endpoint but ``/health`` and ``/metrics`` needs ``Authorization: Bearer <token>`` (a /weights
request without it is refused before any file is looked at). Before that, every request passes the
caller check (`webgym_rollout.browser.callers`): a ``Host`` that is not one of the server's own
names (its bind address and port, on loopback also 127.0.0.1 / localhost / [::1], plus
``--server-names``) gets 421 (code ``misdirected``), and a request carrying a web page's
``Origin`` (unless in ``--allowed-origins``) or ``Sec-Fetch-Site: cross-site`` gets 403 (code
``foreign_origin``), so that no page, through DNS rebinding or straight to 127.0.0.1, drives it.
The server never fetches URLs: an image must be inline (``data:image/...;base64,...``). /weights
accepts only two content types (``application/octet-stream``, ``application/json``), neither of
which a web page can send to another origin without a CORS preflight (which this server never
grants), so a page in a browser cannot push weights or name a file. A /weights body or file larger
than the served model's weights (plus 16 MiB of header) is refused before it is read.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Annotated

import uvicorn
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from webgym_rl.errors import PolicyServerError, PolicyUnauthorized, WeightsRejected
from webgym_rl.policy_server.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    HealthResponse,
    ModelCard,
    ModelList,
    ReloadRequest,
    ReloadResponse,
    SharedWeightsRequest,
    WeightsResponse,
    error_body,
)
from webgym_rl.policy_server.service import PolicyService
from webgym_rl.policy_server.settings import PolicyServerSettings
from webgym_rollout.browser.callers import CallerCheck, CallerCheckMiddleware, Refusal
from webgym_rollout.browser.guard import is_loopback_host

__all__ = ["check_bind", "create_app", "running_policy_server"]


def create_app(settings: PolicyServerSettings) -> FastAPI:
    """The FastAPI app; loads the checkpoint now, so a bad `--model` fails before anything binds."""
    service = PolicyService(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        try:
            yield
        finally:
            service.close()

    app = FastAPI(title="webgym policy server", version="1", lifespan=lifespan)
    app.state.service = service
    callers = app.state.callers = settings.caller_check()
    app.add_middleware(CallerCheckMiddleware, check=callers, respond=_refused)
    _answer_errors_in_the_openai_shape(app)
    _add_routes(app, service, settings, callers)
    return app


def _answer_errors_in_the_openai_shape(app: FastAPI) -> None:
    """Our errors, routing errors and request validation errors all answer
    ``{"error": {"message", "type", "param", "code"}}``."""

    @app.exception_handler(PolicyServerError)
    async def _policy_error(_: Request, exc: PolicyServerError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), getattr(exc, "param", None), exc.kind),
                            status_code=exc.status_code)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Routing and body parsing (no such route, a body that is not JSON): the OpenAI shape too.
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_chat_request")
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(error_body(message, None, kind), status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}"
                             for e in exc.errors())
        return JSONResponse(error_body(f"invalid request: {problems}", None, "bad_chat_request"),
                            status_code=400)


def _add_routes(app: FastAPI, service: PolicyService, settings: PolicyServerSettings,
                callers: CallerCheck) -> None:
    """The endpoints; all but /health and /metrics need the bearer token when there is one."""

    async def check_token(request: Request) -> None:
        if settings.token is None:
            return
        if request.headers.get("authorization", "") != f"Bearer {settings.token}":
            raise PolicyUnauthorized("missing or wrong bearer token (send Authorization: Bearer <token>)")

    @app.post("/v1/chat/completions", response_model=ChatCompletionResponse,
              dependencies=[Depends(check_token)])
    async def chat_completions(body: ChatCompletionRequest) -> ChatCompletionResponse:
        return await service.complete(body)

    @app.get("/v1/models", response_model=ModelList, dependencies=[Depends(check_token)])
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=settings.name, created=service.policy.loaded_at,
                                         root=service.policy.checkpoint)])

    @app.post("/reload", response_model=ReloadResponse, dependencies=[Depends(check_token)])
    async def reload(body: ReloadRequest) -> ReloadResponse:
        return await service.reload(body)

    @app.post("/weights", response_model=WeightsResponse, dependencies=[Depends(check_token)])
    async def weights(request: Request,
                      version: Annotated[int | None, Query(ge=0)] = None) -> WeightsResponse:
        """Body: a safetensors file of the served model's state_dict() (application/octet-stream),
        or {"shm": "/dev/shm/webgym-weights-....safetensors", "version": N} (application/json)."""
        return await _take_weights(service, request, version)

    @app.get("/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        policy = service.policy
        return HealthResponse(model=settings.name, checkpoint=policy.checkpoint, version=policy.version,
                              pid=os.getpid(), requests_served=service.requests_served,
                              reloads=service.reloads, weight_pushes=service.weight_pushes)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(_metrics_text(service, callers), media_type="text/plain; version=0.0.4")


async def _take_weights(service: PolicyService, request: Request, version: int | None) -> WeightsResponse:
    """``POST /weights``: a shared-memory file named in JSON, or a safetensors body; nothing else."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind == "application/json":
        shared = await _read_shared_request(request)
        if None not in (version, shared.version) and version != shared.version:
            raise WeightsRejected(f"version {version} in the URL and {shared.version} in the body "
                                  "disagree; give it once", param="version")
        return await service.push_shared(shared.shm, shared.version if version is None else version,
                                         keep=shared.keep)
    if kind != "application/octet-stream":
        # Not a content type a web page may send without asking first (CORS preflight).
        raise WeightsRejected(f"Content-Type {kind or 'none'!r}: send application/octet-stream (a "
                              "safetensors body) or application/json ({\"shm\": path})",
                              param="content-type")
    body = await _read_weights_body(request, service.max_weights_bytes())
    return await service.push(body, version)


async def _read_weights_body(request: Request, limit: int) -> bytearray:
    """The request body in one buffer (preallocated from Content-Length: the weights are held once);
    refused before reading when it is larger than `limit`."""
    def too_large(size: int | str) -> WeightsRejected:
        return WeightsRejected(f"the body ({size} bytes) is larger than the served model's weights allow "
                               f"({limit} bytes at most); send exactly its state_dict()")

    declared = request.headers.get("content-length", "")
    if declared.isdigit():
        size = int(declared)
        if size > limit:
            raise too_large(size)
        body, filled = bytearray(size), 0
        async for chunk in request.stream():
            if filled + len(chunk) > size:
                raise WeightsRejected(f"the body is longer than its Content-Length ({size} bytes)")
            body[filled:filled + len(chunk)] = chunk
            filled += len(chunk)
        if filled != size:
            raise WeightsRejected(f"the body ended after {filled} of its {size} bytes (Content-Length)")
        return body
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large(f"more than {len(body)}")
    return body


async def _read_shared_request(request: Request) -> SharedWeightsRequest:
    """The JSON body of a shared-memory push (64 KiB at most), validated."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > 2**16:
            raise WeightsRejected("a JSON /weights body names a file ({\"shm\": path}); this one is "
                                  "over 64 KiB")
    try:
        return SharedWeightsRequest.model_validate_json(bytes(body))
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in errors)
        first = errors[0]["loc"] if errors else ()
        raise WeightsRejected(f"invalid shared-memory weights request: {problems}",
                              param=str(first[0]) if first else None) from None


def _refused(refusal: Refusal) -> JSONResponse:
    return JSONResponse(error_body(refusal.message, None, refusal.kind), status_code=refusal.status)


def _metrics_text(service: PolicyService, callers: CallerCheck) -> str:
    """The policy server's ``/metrics`` (Prometheus text format)."""
    refused = {"misdirected": 0, "foreign_origin": 0, **callers.refused}
    series = [
        ("http_requests_total", "counter", "HTTP requests received (refused ones included).",
         [("", callers.checked)]),
        ("callers_refused_total", "counter",
         "Requests refused for their Host (misdirected) or Origin (foreign_origin).",
         [(f'{{kind="{kind}"}}', count) for kind, count in sorted(refused.items())]),
        ("completions_total", "counter", "Chat completions answered.", [("", service.requests_served)]),
        ("reloads_total", "counter", "Checkpoints swapped in by /reload.", [("", service.reloads)]),
        ("weight_pushes_total", "counter", "Weights accepted on /weights.", [("", service.weight_pushes)]),
        ("version", "gauge", "Version of the weights serving now.", [("", service.policy.version)]),
    ]
    lines = []
    for name, kind, help_text, samples in series:
        lines += [f"# HELP webgym_policy_{name} {help_text}", f"# TYPE webgym_policy_{name} {kind}"]
        lines += [f"webgym_policy_{name}{labels} {value}" for labels, value in samples]
    return "\n".join(lines) + "\n"


def check_bind(settings: PolicyServerSettings) -> None:
    """Refuse to expose the model beyond this machine without a token."""
    if not is_loopback_host(settings.host) and not settings.token:
        raise PolicyServerError(f"binding {settings.host} exposes the policy beyond this machine; "
                                "pass --token (clients then send Authorization: Bearer <token>)")


@contextlib.contextmanager
def running_policy_server(settings: PolicyServerSettings) -> Iterator[str]:
    """Run the server in a background thread; yields its base URL ``http://HOST:PORT/v1``.

    With ``settings.port == 0`` the socket is bound to a free port first, so there is no race.
    """
    check_bind(settings)
    app = create_app(settings)
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    port = sock.getsockname()[1]
    app.state.callers.port = port
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="policy-server",
                              daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise PolicyServerError(f"the policy server did not start on {settings.host}:{port}")
            time.sleep(0.01)
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        yield f"http://{host}:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
