"""The browser environment server: `BrowserPool` over HTTP (FastAPI + uvicorn, async end to end).

Routes (JSON bodies are the pydantic models of `webgym_rollout.browser.protocol`)::

    POST   /sessions                       CreateSessionRequest -> SessionCreated
    POST   /sessions/{id}/navigate         NavigateRequest      -> PageState
    POST   /sessions/{id}/screenshot       ScreenshotRequest    -> image + metadata (SCREENSHOT_MEDIA_TYPE;
                                                                   ScreenshotResponse JSON if
                                                                   Accept: application/json)
    POST   /sessions/{id}/execute          BrowserAction        -> ExecuteResult
    POST   /sessions/{id}/act              ActRequest           -> ActResult + image (ACT_MEDIA_TYPE): an
                                                                   agent step, action then observation
    POST   /sessions/{id}/page_info        PageInfoRequest      -> PageInfo
    POST   /sessions/{id}/env_state                             -> EnvState
    DELETE /sessions/{id}
    GET    /sessions/{id}/recording                             -> RecordingIndex (record / replay)
    POST   /sessions/{id}/recording/bodies BodyHashes           -> those bodies (BODIES_MEDIA_TYPE)
    POST   /bodies/missing                 BodyHashes           -> BodyHashes (those not held)
    PUT    /bodies/{sha256}                raw bytes            (a body for replays)
    GET    /health  -> ServerHealth     GET /info     GET /metrics (Prometheus text)
    DELETE /blocklist/{origin}                                  -> BlocklistLifted (needs the token)

Errors are ``ErrorBody`` JSON with the HTTP status of their `webgym_rollout.errors` class (502 for a
plain ``browser_error``: a page that did not load, an action Chromium refused; a 500 is a bug). The server
binds 127.0.0.1 by default; any other address needs ``--token``, and then every request must carry
``Authorization: Bearer <token>`` (401 otherwise). Stopping the server closes every browser.

Before the token, every request passes the caller check (`webgym_rollout.browser.callers`): a
``Host`` that is not one of the server's own names (its bind address and port, on loopback also
127.0.0.1 / localhost / [::1], plus ``--server-names``) gets 421 ``misdirected``; a request that
carries a web page's ``Origin`` (unless in ``--allowed-origins``) or ``Sec-Fetch-Site: cross-site``
gets 403 ``foreign_origin``. Refusals are counted in ``/metrics`` (``webgym_callers_refused_total``).

``/info`` lists the blocklist's entries (origin, reason, kind of failure, seconds left): origins
blocked for every session after their start pages failed in several sessions; an agent's own
failures block an origin for its session only, and an allowlisted ``host:port`` (the local site
server) is never blocked (`webgym_rollout.browser.blocklist`; ``/metrics`` counts both). ``DELETE
/blocklist/{origin}`` (``/blocklist/http://127.0.0.1:8400``; any URL of the origin will do) lifts
one, and is the one route that always needs the token: a server started without ``--token``
answers it 401, since on loopback any local process could otherwise call it. Restart such a
server with a token (or wait for ``--blocklist-ttl-s``). The egress proxy never forwards a
browser's request to the server's own port on a loopback address, and ``--allow-hosts`` takes
``host:port`` entries only (`webgym_rollout.browser.guard`): no page reaches another local port.

``webgym-rollout serve`` takes its flags and ``--config`` YAML keys from `ServerSettings` (and the
`PoolSettings` it holds, whose flags carry no prefix) through `webgym_core.settings`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.metadata
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import click
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from webgym_core.settings import SettingsCommand, flat, load_settings, settings_options
from webgym_rollout.browser.callers import CallerCheck, CallerCheckMiddleware, Refusal
from webgym_rollout.browser.egress import Resolver
from webgym_rollout.browser.guard import is_loopback_host, origin_of
from webgym_rollout.browser.pages import environment_names
from webgym_rollout.browser.pool import BrowserPool, PoolSettings
from webgym_rollout.browser.protocol import (
    ACT_MEDIA_TYPE,
    BODIES_MEDIA_TYPE,
    SCREENSHOT_MEDIA_TYPE,
    ActRequest,
    ActResult,
    BlocklistLifted,
    BodyHashes,
    BrowserAction,
    CreateSessionRequest,
    EnvState,
    ErrorBody,
    ExecuteResult,
    NavigateRequest,
    PageInfo,
    PageInfoRequest,
    PageState,
    RecordingIndex,
    ScreenshotRequest,
    ScreenshotResponse,
    ServerHealth,
    SessionCreated,
    encode_act,
    encode_bodies,
    encode_screenshot,
)
from webgym_rollout.errors import BrowserError, Unauthorized

__all__ = ["ServerSettings", "check_bind", "create_app", "running_server", "serve_command"]

log = logging.getLogger(__name__)


def _version() -> str:
    """The installed distribution's version (not through `webgym_rollout`'s root, which imports the
    environment, the policies and the judges: the browser server knows nothing of them)."""
    try:
        return importlib.metadata.version("webgym")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class ServerSettings:
    """Settings of ``webgym-rollout serve``: where it listens, who may call it, how its pool runs."""

    host: str = "127.0.0.1"
    """Address to bind; anything but a loopback address requires `token`."""
    port: int = 8300
    """Port to bind (0 picks a free one)."""
    token: str | None = None
    """Bearer token every request must carry (the command reads env WEBGYM_BROWSER_TOKEN when it is
    not given); required off loopback."""
    server_names: tuple[str, ...] = ()
    """More names clients reach the server by (the Host header): ``name`` (any port) or
    ``name:port``. Without them it answers only to its bind address and port (on loopback also
    127.0.0.1, localhost and [::1]; bound to 0.0.0.0 or ::, any IP address and localhost); any other
    Host gets 421, so that no web page reaches it through DNS rebinding."""
    allowed_origins: tuple[str, ...] = ()
    """Web origins (``https://dashboard.example``) whose pages may call the server; any other request
    carrying an Origin header (or Sec-Fetch-Site: cross-site / same-site) gets 403, so that no web
    page, not even one in the server's own browsers, drives it."""
    pool: PoolSettings = flat(PoolSettings)
    """The browser pool's settings (their flags and YAML keys carry no prefix)."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be in 0..65535, got {self.port}")
        check_bind(self.host, self.token)
        self.caller_check()  # a ValueError naming server_names / allowed_origins

    def caller_check(self) -> CallerCheck:
        """A new `CallerCheck` for these settings (its port is set once the server is bound)."""
        return CallerCheck(self.host, self.port, server_names=self.server_names,
                           allowed_origins=self.allowed_origins)


def check_bind(host: str, token: str | None) -> None:
    """Refuse (ValueError naming the field ``host``) to bind a non-loopback address without a token."""
    if not token and not is_loopback_host(host):
        raise ValueError(
            f"host: refusing to bind {host} without --token: anyone who reaches it could drive "
            "the browsers. Pass --token SECRET (clients send it as a bearer token) or bind 127.0.0.1"
        )


class _RequireToken:
    """Plain ASGI middleware (Starlette's BaseHTTPMiddleware costs ~1 ms a request): 401 unless
    ``Authorization: Bearer <token>``."""

    def __init__(self, app, token: str, pool: BrowserPool):
        self.app, self.pool = app, pool
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not secrets.compare_digest(given, self.expected):
                self.pool.errors["unauthorized"] += 1
                body = ErrorBody(error="unauthorized", message="missing or wrong bearer token")
                await JSONResponse(body.model_dump(), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _refused(refusal: Refusal) -> JSONResponse:
    body = ErrorBody(error=refusal.kind, message=refusal.message)
    return JSONResponse(body.model_dump(), status_code=refusal.status)


def _json(model: BaseModel) -> Response:
    """A model already validated by the pool, serialised once by pydantic (FastAPI would validate
    it again against the response model: measurable on the per-step routes)."""
    return Response(model.model_dump_json(), media_type="application/json")


def _component_schema(model: type[BaseModel]) -> dict:
    """`model`'s JSON schema for a route that parses its body itself: the models it nests are
    referenced among the OpenAPI components, where the routes that take them put them."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema


def _error_response(exc: BrowserError) -> JSONResponse:
    body = ErrorBody(
        error=exc.kind,
        message=str(exc),
        url=getattr(exc, "url", ""),
        session_closed=bool(getattr(exc, "session_closed", False)),
    )
    # A plain BrowserError is the browser or the site failing at what it was asked (a start URL that
    # does not load, an action Chromium refused): 502, as a gateway says. 500 stays for our own bugs.
    status = 502 if exc.status_code == 500 else exc.status_code
    return JSONResponse(body.model_dump(), status_code=status)


def create_app(settings: ServerSettings, *, resolver: Resolver | None = None) -> FastAPI:
    """The FastAPI app; its lifespan starts the pool and closes every browser on shutdown.
    `resolver` is the egress proxy's name lookup (tests: a `MappingResolver`; default: the OS)."""
    pool = BrowserPool(settings.pool, resolver=resolver)
    if settings.port:
        pool.egress.protect_port(settings.port)
    version = _version()
    app = FastAPI(title="webgym browser server", version=version, lifespan=_lifespan(pool, settings))
    app.state.pool = pool
    app.state.settings = settings
    callers = app.state.callers = settings.caller_check()

    if settings.token:
        app.add_middleware(_RequireToken, token=settings.token, pool=pool)
    # Added last, so it runs first: a foreign Host or Origin is refused before the token is looked at.
    app.add_middleware(CallerCheckMiddleware, check=callers, respond=_refused)
    _add_error_handlers(app, pool)
    _add_session_routes(app, pool)
    _add_body_routes(app, pool)
    _add_operator_routes(app, pool, settings, callers, version)
    return app


def _lifespan(pool: BrowserPool, settings: ServerSettings):
    """The app's lifespan: start the pool, and close every browser on shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.start()
        log.info(
            "browser server ready: %d browsers x %d contexts",
            settings.pool.browsers,
            settings.pool.contexts_per_browser,
        )
        try:
            yield
        finally:
            await pool.close()

    return lifespan


def _add_error_handlers(app: FastAPI, pool: BrowserPool) -> None:
    """Every error answers an `ErrorBody`, counted in the pool's errors by kind."""

    @app.exception_handler(BrowserError)
    async def browser_error(request: Request, exc: BrowserError) -> JSONResponse:
        pool.errors[exc.kind] += 1
        return _error_response(exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Routing and body parsing (no such route, a body that is not JSON): an ErrorBody like the rest.
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
        pool.errors[kind] += 1
        body = ErrorBody(error=kind, message=f"{request.method} {request.url.path}: {exc.detail}")
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        pool.errors["invalid_request"] += 1
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        body = ErrorBody(error="invalid_request", message=f"{request.url.path}: {details}")
        return JSONResponse(body.model_dump(), status_code=422)


def _add_session_routes(app: FastAPI, pool: BrowserPool) -> None:
    """The routes of a session: create, navigate, observe, act, close."""

    @app.post("/sessions", response_model=SessionCreated)
    async def create_session(body: CreateSessionRequest) -> SessionCreated:
        return await pool.create(body)

    @app.post("/sessions/{session_id}/navigate", response_model=PageState)
    async def navigate(session_id: str, body: NavigateRequest) -> PageState:
        return await pool.navigate(session_id, body.url)

    @app.post("/sessions/{session_id}/screenshot", response_model=ScreenshotResponse)
    async def screenshot(session_id: str, body: ScreenshotRequest, request: Request) -> Response:
        shot = await pool.screenshot(session_id, body)
        if "application/json" in request.headers.get("accept", ""):
            wire = ScreenshotResponse(
                data_b64=base64.b64encode(shot.data).decode("ascii"),
                **shot.model_dump(exclude={"data"}),
            )
            return _json(wire)
        content, headers = encode_screenshot(shot)
        return Response(content, media_type=SCREENSHOT_MEDIA_TYPE, headers=headers)

    @app.post("/sessions/{session_id}/execute", response_model=ExecuteResult)
    async def execute(session_id: str, body: BrowserAction) -> Response:
        return _json(await pool.execute(session_id, body))

    @app.post("/sessions/{session_id}/act", response_model=ActResult,
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": _component_schema(ActRequest)}}}})
    async def act(session_id: str, request: Request) -> Response:
        # The agent's step: the body is parsed by pydantic-core straight from its bytes (FastAPI's
        # body handling, json.loads then validation through its dependency solver, measurably costs
        # more per step); errors answer 422 like every other route's.
        try:
            body = ActRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False)) from None
        content, headers = encode_act(await pool.act(session_id, body))
        return Response(content, media_type=ACT_MEDIA_TYPE, headers=headers)

    @app.post("/sessions/{session_id}/page_info", response_model=PageInfo)
    async def page_info(session_id: str, body: PageInfoRequest) -> PageInfo:
        return await pool.page_info(session_id, body)

    @app.post("/sessions/{session_id}/env_state", response_model=EnvState)
    async def env_state(session_id: str) -> EnvState:
        return await pool.env_state(session_id)

    @app.delete("/sessions/{session_id}", status_code=204)
    async def close_session(session_id: str) -> Response:
        await pool.close_session(session_id)
        return Response(status_code=204)


def _add_body_routes(app: FastAPI, pool: BrowserPool) -> None:
    """Record and replay: a session's recording, and the response bodies replays are served from."""

    @app.get("/sessions/{session_id}/recording", response_model=RecordingIndex)
    async def recording(session_id: str) -> Response:
        return _json(await pool.recording(session_id))

    @app.post("/sessions/{session_id}/recording/bodies")
    async def recorded_bodies(session_id: str, body: BodyHashes) -> Response:
        content, headers = encode_bodies([(sha, pool.recorded_body(session_id, sha)) for sha in body.sha256])
        return Response(content, media_type=BODIES_MEDIA_TYPE, headers=headers)

    @app.post("/bodies/missing", response_model=BodyHashes)
    async def missing_bodies(body: BodyHashes) -> BodyHashes:
        return BodyHashes(sha256=pool.bodies.missing(body.sha256))

    @app.put("/bodies/{sha256}", status_code=204)
    async def put_body(sha256: str, request: Request) -> Response:
        pool.bodies.put(sha256, await request.body())
        return Response(status_code=204)


def _add_operator_routes(app: FastAPI, pool: BrowserPool, settings: ServerSettings, callers: CallerCheck,
                         version: str) -> None:
    """What an operator reads and does: health, info, metrics, lifting a blocklist entry."""

    @app.get("/health", response_model=ServerHealth)
    async def health() -> ServerHealth:
        return pool.health()

    @app.get("/info")
    async def info() -> dict:
        return _info(pool, settings, version)

    @app.delete("/blocklist/{origin:path}", response_model=BlocklistLifted)
    async def lift_block(origin: str, request: Request) -> BlocklistLifted:
        if not settings.token:  # with a token, the middleware has checked it already
            raise Unauthorized(
                "DELETE /blocklist needs the server's token, and this server runs without one: "
                "restart it with --token (or WEBGYM_BROWSER_TOKEN) to lift entries, or wait for "
                "--blocklist-ttl-s"
            )
        if request.url.query:  # an origin never has one, but a URL given whole may
            origin = f"{origin}?{request.url.query}"
        lifted = pool.lift_block(origin)
        if lifted is None:
            return BlocklistLifted(origin=origin_of(origin), lifted=False)
        return BlocklistLifted(origin=lifted.origin, lifted=True, reason=lifted.reason)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(pool.metrics_text(refused_callers=callers.refused),
                                 media_type="text/plain; version=0.0.4")


def _info(pool: BrowserPool, settings: ServerSettings, version: str) -> dict:
    """``/info``: the server's settings and the blocklist's entries now."""
    s = settings.pool
    return {
        "version": version,
        "browsers": s.browsers,
        "contexts_per_browser": s.contexts_per_browser,
        "max_sessions": s.max_sessions,
        "allow_hosts": list(s.allow_hosts),
        "server_names": list(settings.server_names),
        "allowed_origins": list(settings.allowed_origins),
        "idle_timeout_s": s.idle_timeout_s,
        "navigate_timeout_s": s.navigate_timeout_s,
        "action_timeout_s": s.action_timeout_s,
        "concurrency": s.lane_limits,
        "max_queue": s.max_queue,
        "environments": environment_names(),
        "blocklist_threshold": s.blocklist_threshold,
        "blocklist_ttl_s": s.blocklist_ttl_s,
        "blocklist": [
            {"origin": e.origin, "reason": e.reason, "kind": e.kind,
             "expires_in_s": round(e.until - time.monotonic())}
            for e in pool.blocklist.entries()
        ],
    }


@contextlib.asynccontextmanager
async def running_server(
    settings: ServerSettings, *, resolver: Resolver | None = None
) -> AsyncIterator[tuple[str, BrowserPool]]:
    """Run the server on the current event loop (tests, benchmarks); yields (base_url, pool).
    `resolver`: the egress proxy's name lookup (see `create_app`)."""
    import uvicorn  # optional: uvicorn

    check_bind(settings.host, settings.token)
    app = create_app(settings, resolver=resolver)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="warning", lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # the caller owns signals
    task = asyncio.create_task(server.serve(), name="webgym-browser-server")
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("browser server stopped while starting")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    app.state.pool.egress.protect_port(port)
    app.state.callers.port = port
    try:
        yield f"http://{settings.host}:{port}", app.state.pool
    finally:
        server.should_exit = True
        await task


@click.command("serve", cls=SettingsCommand)
@settings_options(ServerSettings)
def serve_command(config: str | None, **flags: Any) -> None:
    """Run the browser environment server: a Chromium pool behind an HTTP API.

    \b
    Example:
      webgym-rollout serve-sites --port 8400 &
      webgym-rollout serve --port 8300 --allow-hosts 127.0.0.1:8400 \\
          --browsers 2 --contexts-per-browser 6 --concurrency navigate=4
      curl http://127.0.0.1:8300/health
      # on a shared network, a token is required (the flag, or env WEBGYM_BROWSER_TOKEN); clients
      # that use a name rather than an address need it in --server-names:
      webgym-rollout serve --host 0.0.0.0 --token "$WEBGYM_BROWSER_TOKEN" --server-names browsers.lan
      # the same settings from a YAML file (flags override it):
      webgym-rollout serve --config serve.yaml
    """
    import uvicorn  # optional: uvicorn

    if not flags.get("token"):
        flags["token"] = os.environ.get("WEBGYM_BROWSER_TOKEN") or None
    try:
        settings = load_settings(ServerSettings, config, flags)
    except ValueError as exc:  # SettingsError and the checks of __post_init__, naming the field
        raise click.UsageError(str(exc)) from exc
    app = create_app(settings)
    pool = settings.pool
    click.echo(
        f"browser server on http://{settings.host}:{settings.port} "
        f"({pool.browsers} browsers x {pool.contexts_per_browser} contexts)"
    )
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
        timeout_graceful_shutdown=10,
    )
