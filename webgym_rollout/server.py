"""The browser environment server: `BrowserPool` over HTTP (FastAPI + uvicorn, async end to end).

Routes (JSON bodies are the pydantic models of `webgym_rollout.client`)::

    POST   /sessions                       CreateSessionRequest -> SessionCreated
    POST   /sessions/{id}/navigate         NavigateRequest      -> PageState
    POST   /sessions/{id}/screenshot       ScreenshotRequest    -> image + metadata (SCREENSHOT_MEDIA_TYPE;
                                                                   ScreenshotResponse JSON if
                                                                   Accept: application/json)
    POST   /sessions/{id}/execute          BrowserAction        -> ExecuteResult
    POST   /sessions/{id}/page_info        PageInfoRequest      -> PageInfo
    POST   /sessions/{id}/env_state                             -> EnvState
    DELETE /sessions/{id}
    GET    /health  -> ServerHealth     GET /info     GET /metrics (Prometheus text)

Errors are ``ErrorBody`` JSON with the HTTP status of their `webgym_rollout.errors` class. The server
binds 127.0.0.1 by default; any other address needs ``--token``, and then every request must carry
``Authorization: Bearer <token>`` (401 otherwise). Stopping the server closes every browser.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import click
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel

from webgym_rollout import __version__
from webgym_rollout.browser import BrowserPool, PoolSettings
from webgym_rollout.client import (
    SCREENSHOT_MEDIA_TYPE,
    BrowserAction,
    CreateSessionRequest,
    EnvState,
    ErrorBody,
    ExecuteResult,
    NavigateRequest,
    PageInfo,
    PageInfoRequest,
    PageState,
    ScreenshotRequest,
    ScreenshotResponse,
    ServerHealth,
    SessionCreated,
    encode_screenshot,
)
from webgym_rollout.errors import BrowserError
from webgym_rollout.guard import is_loopback_host

__all__ = ["ServerSettings", "check_bind", "create_app", "running_server", "serve_command"]

log = logging.getLogger(__name__)


@dataclass
class ServerSettings:
    """Settings of ``webgym-rollout serve``."""

    host: str = "127.0.0.1"
    """Address to bind; anything but a loopback address requires `token`."""
    port: int = 8300
    """Port to bind (0 picks a free one)."""
    token: str | None = None
    """Bearer token every request must carry; required off loopback."""
    pool: PoolSettings = field(default_factory=PoolSettings)
    """The browser pool's settings."""


def check_bind(host: str, token: str | None) -> None:
    """Refuse (ValueError) to bind a non-loopback address without a token."""
    if not token and not is_loopback_host(host):
        raise ValueError(
            f"refusing to bind {host} without --token: anyone who reaches it could drive "
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


def _json(model: BaseModel) -> Response:
    """A model already validated by the pool, serialised once by pydantic (FastAPI would validate
    it again against the response model: measurable on the per-step routes)."""
    return Response(model.model_dump_json(), media_type="application/json")


def _error_response(exc: BrowserError) -> JSONResponse:
    body = ErrorBody(
        error=exc.kind,
        message=str(exc),
        url=getattr(exc, "url", ""),
        session_closed=bool(getattr(exc, "session_closed", False)),
    )
    return JSONResponse(body.model_dump(), status_code=exc.status_code)


def create_app(settings: ServerSettings) -> FastAPI:
    """The FastAPI app; its lifespan starts the pool and closes every browser on shutdown."""
    pool = BrowserPool(settings.pool)

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

    app = FastAPI(title="webgym browser server", version=__version__, lifespan=lifespan)
    app.state.pool = pool

    if settings.token:
        app.add_middleware(_RequireToken, token=settings.token, pool=pool)

    @app.exception_handler(BrowserError)
    async def browser_error(request: Request, exc: BrowserError) -> JSONResponse:
        pool.errors[exc.kind] += 1
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        pool.errors["invalid_request"] += 1
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        body = ErrorBody(error="invalid_request", message=f"{request.url.path}: {details}")
        return JSONResponse(body.model_dump(), status_code=422)

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

    @app.get("/health", response_model=ServerHealth)
    async def health() -> ServerHealth:
        return pool.health()

    @app.get("/info")
    async def info() -> dict:
        s = settings.pool
        return {
            "version": __version__,
            "browsers": s.browsers,
            "contexts_per_browser": s.contexts_per_browser,
            "max_sessions": s.max_sessions,
            "allow_hosts": list(s.allow_hosts),
            "idle_timeout_s": s.idle_timeout_s,
            "navigate_timeout_s": s.navigate_timeout_s,
            "action_timeout_s": s.action_timeout_s,
            "concurrency": s.concurrency,
            "max_queue": s.max_queue,
            "environments": ["web", "miniwob:<task>"],
            "blocked_sites": [
                {"site": e.site, "reason": e.reason, "expires_in_s": round(e.until - time.monotonic())}
                for e in pool.blocklist.entries()
            ],
        }

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(pool.metrics_text(), media_type="text/plain; version=0.0.4")

    return app


@contextlib.asynccontextmanager
async def running_server(settings: ServerSettings) -> AsyncIterator[tuple[str, BrowserPool]]:
    """Run the server on the current event loop (tests, benchmarks); yields (base_url, pool)."""
    import uvicorn

    check_bind(settings.host, settings.token)
    app = create_app(settings)
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
    try:
        yield f"http://{settings.host}:{port}", app.state.pool
    finally:
        server.should_exit = True
        await task


def _parse_concurrency(values: tuple[str, ...]) -> dict[str, int]:
    limits = PoolSettings().concurrency
    for value in values:
        kind, _, number = value.partition("=")
        if kind not in limits or not number.isdigit() or int(number) < 1:
            raise click.BadParameter(
                f"{value!r}: expected KIND=N with KIND in {', '.join(limits)}", param_hint="--concurrency"
            )
        limits[kind] = int(number)
    return limits


@click.command("serve")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind (non-loopback needs --token)."
)
@click.option("--port", default=8300, show_default=True, type=int, help="Port to bind.")
@click.option(
    "--token",
    envvar="WEBGYM_BROWSER_TOKEN",
    default=None,
    help="Bearer token required on every request (env WEBGYM_BROWSER_TOKEN).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="Open a host the URL guard refuses (repeatable), e.g. 127.0.0.1 or 127.0.0.1:8400.",
)
@click.option("--browsers", default=2, show_default=True, type=int, help="Chromium processes.")
@click.option("--contexts-per-browser", default=6, show_default=True, type=int, help="Sessions per browser.")
@click.option(
    "--idle-timeout", default=300.0, show_default=True, type=float, help="Close sessions idle this long (s)."
)
@click.option("--navigate-timeout", default=20.0, show_default=True, type=float, help="Navigation bound (s).")
@click.option(
    "--action-timeout",
    default=10.0,
    show_default=True,
    type=float,
    help="Bound on screenshot/execute/page_info (s).",
)
@click.option(
    "--recycle-after", default=200, show_default=True, type=int, help="Replace a browser after N sessions."
)
@click.option(
    "--max-browser-mib",
    default=2048.0,
    show_default=True,
    type=float,
    help="Replace a browser whose processes pass this PSS (MiB).",
)
@click.option(
    "--concurrency",
    multiple=True,
    help="Per-operation limit KIND=N (create, navigate, screenshot, execute, page_info); repeatable.",
)
@click.option(
    "--max-queue", default=256, show_default=True, type=int, help="Waiting operations per kind before 429."
)
@click.option(
    "--miniwob-max-time", default=60.0, show_default=True, type=float, help="MiniWoB episode limit (s)."
)
@click.option(
    "--chromium", default=None, help="Chromium binary (default: headless shell or $WEBGYM_CHROMIUM)."
)
def serve_command(
    host: str,
    port: int,
    token: str | None,
    allow_hosts: tuple[str, ...],
    browsers: int,
    contexts_per_browser: int,
    idle_timeout: float,
    navigate_timeout: float,
    action_timeout: float,
    recycle_after: int,
    max_browser_mib: float,
    concurrency: tuple[str, ...],
    max_queue: int,
    miniwob_max_time: float,
    chromium: str | None,
) -> None:
    """Run the browser environment server: a Chromium pool behind an HTTP API.

    \b
    Example:
      webgym-rollout serve-sites --port 8400 &
      webgym-rollout serve --port 8300 --allow-host 127.0.0.1:8400 --browsers 2 --contexts-per-browser 6
      curl http://127.0.0.1:8300/health
      # on a shared network, a token is required:
      webgym-rollout serve --host 0.0.0.0 --token "$WEBGYM_BROWSER_TOKEN"
    """
    import uvicorn

    try:
        check_bind(host, token)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if browsers < 1 or contexts_per_browser < 1:
        raise click.BadParameter("--browsers and --contexts-per-browser must be >= 1")
    pool = PoolSettings(
        browsers=browsers,
        contexts_per_browser=contexts_per_browser,
        allow_hosts=allow_hosts,
        idle_timeout_s=idle_timeout,
        navigate_timeout_s=navigate_timeout,
        action_timeout_s=action_timeout,
        recycle_after_sessions=recycle_after,
        max_browser_mib=max_browser_mib,
        concurrency=_parse_concurrency(concurrency),
        max_queue=max_queue,
        miniwob_max_time_s=miniwob_max_time,
    )
    if chromium:
        pool.executable_path = chromium
    app = create_app(ServerSettings(host=host, port=port, token=token, pool=pool))
    click.echo(
        f"browser server on http://{host}:{port} ({browsers} browsers x {contexts_per_browser} contexts)"
    )
    uvicorn.run(
        app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=10
    )
