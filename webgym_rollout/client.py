"""Typed async client of the browser environment server, and the models both sides speak.

::

    async with BrowserClient(["http://10.0.0.5:8300", "http://10.0.0.6:8300"], token=t) as client:
        session = await client.create_session("http://127.0.0.1:8400/miniwob/click-button.html",
                                              environment="miniwob:click-button", seed=7)
        shot = await session.screenshot()
        result = await session.execute(BrowserAction.click(80, 120))
        state = await session.env_state()
        await session.close()

One keep-alive HTTP/1.1 connection pool (a small one of its own: httpx cost more client CPU per call
than the browser's work for a click) serves every session. New sessions go to the least-loaded
healthy server. Transient failures (`ServerBusy`, `ServerUnavailable`) are retried with backoff: always when
the request cannot have run (connection refused, queue full), and for read-only operations
(screenshot, page_info, env_state) also when the connection broke mid-request. Errors are the typed
tree of `webgym_rollout.errors`, rebuilt from the server's ``{"error": kind, "message": ...}`` body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, model_validator

from webgym_rollout.errors import (
    TRANSIENT_ERRORS,
    BrowserError,
    OperationTimeout,
    ServerBusy,
    ServerUnavailable,
    Unauthorized,
    error_for_kind,
)

__all__ = [
    "ActionKind",
    "BrowserAction",
    "BrowserClient",
    "BrowserSession",
    "CreateSessionRequest",
    "Element",
    "EnvState",
    "ErrorBody",
    "ExecuteResult",
    "NavigateRequest",
    "PageInfo",
    "PageInfoRequest",
    "PageState",
    "SCREENSHOT_MEDIA_TYPE",
    "Screenshot",
    "ScreenshotRequest",
    "ScreenshotResponse",
    "ServerHealth",
    "SessionCreated",
    "decode_screenshot",
    "encode_screenshot",
]

log = logging.getLogger(__name__)

ActionKind = Literal["click", "type", "key", "scroll", "go_back", "wait", "hover", "select"]
# Which fields each action kind needs; the others must stay unset.
_ACTION_FIELDS: dict[str, tuple[str, ...]] = {
    "click": ("x", "y"),
    "type": ("text",),
    "key": ("key",),
    "scroll": ("direction",),
    "go_back": (),
    "wait": ("seconds",),
    "hover": ("x", "y"),
    "select": ("x", "y", "value"),
}
_OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {"type": ("press_enter",), "scroll": ("amount", "x", "y")}


class BrowserAction(BaseModel):
    """One browser action, discriminated on `kind`; coordinates are viewport pixels.

    ``click(x, y) | type(text, press_enter=False) | key(key) | scroll(direction, amount=px, x?, y?) |
    go_back | wait(seconds) | hover(x, y) | select(x, y, value)``. Build with keywords
    (``BrowserAction(kind="click", x=3, y=4)``) or the helpers (``BrowserAction.click(3, 4)``).
    """

    model_config = {"extra": "forbid"}

    kind: ActionKind
    x: float | None = None
    y: float | None = None
    text: str | None = None
    press_enter: bool | None = None
    key: str | None = None
    direction: Literal["up", "down"] | None = None
    amount: int | None = Field(default=None, ge=1, le=100_000)
    seconds: float | None = Field(default=None, ge=0, le=60)
    value: str | None = None

    @model_validator(mode="after")
    def _fields_match_kind(self) -> BrowserAction:
        needed = _ACTION_FIELDS[self.kind]
        allowed = set(needed) | set(_OPTIONAL_FIELDS.get(self.kind, ()))
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"action '{self.kind}' needs {', '.join(missing)}")
        extra = [
            name for name in _all_action_fields() if name not in allowed and getattr(self, name) is not None
        ]
        if extra:
            raise ValueError(f"action '{self.kind}' does not take {', '.join(extra)}")
        if self.kind == "scroll" and (self.x is None) != (self.y is None):
            raise ValueError("action 'scroll' takes both x and y or neither")
        return self

    # Helpers so callers need not remember which fields a kind takes.
    @classmethod
    def click(cls, x: float, y: float) -> BrowserAction:
        return cls(kind="click", x=x, y=y)

    @classmethod
    def type_text(cls, text: str, press_enter: bool = False) -> BrowserAction:
        return cls(kind="type", text=text, press_enter=press_enter)

    @classmethod
    def press(cls, key: str) -> BrowserAction:
        return cls(kind="key", key=key)

    @classmethod
    def scroll_by(
        cls,
        direction: Literal["up", "down"],
        amount: int = 300,
        x: float | None = None,
        y: float | None = None,
    ) -> BrowserAction:
        return cls(kind="scroll", direction=direction, amount=amount, x=x, y=y)

    @classmethod
    def back(cls) -> BrowserAction:
        return cls(kind="go_back")

    @classmethod
    def wait_for(cls, seconds: float) -> BrowserAction:
        return cls(kind="wait", seconds=seconds)

    @classmethod
    def hover_at(cls, x: float, y: float) -> BrowserAction:
        return cls(kind="hover", x=x, y=y)

    @classmethod
    def select_option(cls, x: float, y: float, value: str) -> BrowserAction:
        return cls(kind="select", x=x, y=y, value=value)


def _all_action_fields() -> tuple[str, ...]:
    return ("x", "y", "text", "press_enter", "key", "direction", "amount", "seconds", "value")


# ---------------------------------------------------------------- wire models (server <-> client)


class CreateSessionRequest(BaseModel):
    start_url: str
    viewport: tuple[int, int] = (1280, 720)
    environment: str = "web"
    seed: int | None = None

    @model_validator(mode="after")
    def _viewport_sane(self) -> CreateSessionRequest:
        width, height = self.viewport
        if not (64 <= width <= 4096 and 64 <= height <= 4096):
            raise ValueError(f"viewport {width}x{height} is outside 64..4096 pixels")
        return self


class SessionCreated(BaseModel):
    session_id: str
    environment: str
    viewport: tuple[int, int]
    url: str
    title: str
    browser_pid: int | None = None
    """Process id of the Chromium browser hosting this session (for operators and fault tests)."""


class NavigateRequest(BaseModel):
    url: str


class PageState(BaseModel):
    url: str
    title: str
    error: str = ""
    """Network failure of the page load (e.g. ``net::ERR_CONNECTION_REFUSED``); "" when it loaded."""


class ScreenshotRequest(BaseModel):
    format: Literal["png", "jpeg"] = "png"
    quality: int = Field(default=80, ge=1, le=100)
    scale: float = Field(default=1.0, gt=0, le=1.0)
    marks: bool = False


class Element(BaseModel):
    """An interactive element's box in viewport pixels; its list index is its Set-of-Marks number."""

    x: float
    y: float
    width: float
    height: float
    tag: str
    role: str
    text: str


class ScreenshotResponse(BaseModel):
    data_b64: str
    sha256: str
    width: int
    height: int
    format: Literal["png", "jpeg"]
    marks: list[Element] = []


class Screenshot(BaseModel):
    """Image bytes; `sha256` is equal for pixel-identical pages shot with the same settings."""

    data: bytes
    sha256: str
    width: int
    height: int
    format: Literal["png", "jpeg"]
    marks: list[Element] = []


SCREENSHOT_MEDIA_TYPE = "application/vnd.webgym.screenshot"
"""Screenshot wire format: ``X-Webgym-Meta-Length: K``, then a body of K bytes of JSON metadata
(`Screenshot` without `data`) followed by the image bytes. No base64, no JSON string of the image:
both cost CPU on every step. A request with ``Accept: application/json`` gets `ScreenshotResponse`."""
_META_HEADER = "x-webgym-meta-length"


def encode_screenshot(shot: Screenshot) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a screenshot reply (`SCREENSHOT_MEDIA_TYPE`)."""
    meta = shot.model_dump_json(exclude={"data"}).encode()
    return meta + shot.data, {_META_HEADER: str(len(meta))}


def decode_screenshot(headers: dict[str, str], body: bytes) -> Screenshot:
    """Inverse of `encode_screenshot`; `headers` has lower-case names."""
    try:
        size = int(headers[_META_HEADER])
        meta = json.loads(body[:size])
    except (KeyError, ValueError) as exc:
        raise BrowserError(f"malformed screenshot reply (no valid {_META_HEADER} header): {exc}") from exc
    return Screenshot(data=body[size:], **meta)


class ExecuteResult(BaseModel):
    ok: bool
    error: str = ""
    """Agent-level failure text ("" when ok): no element to select, unknown key, refused navigation."""
    url: str
    title: str


class PageInfoRequest(BaseModel):
    elements: bool = False
    accessibility: bool = False


class PageInfo(BaseModel):
    url: str
    title: str
    elements: list[Element] = []
    accessibility: str | None = None
    """The page's ARIA snapshot (YAML text) when asked for."""


class EnvState(BaseModel):
    utterance: str = ""
    done: bool = False
    reward: float = 0.0
    raw_reward: float = 0.0
    reason: str = ""


class ServerHealth(BaseModel):
    url: str = ""
    status: str = "ok"
    active_sessions: int
    max_sessions: int
    browsers: int
    queue_depths: dict[str, int] = {}
    uptime_s: float = 0.0

    @property
    def load(self) -> float:
        return self.active_sessions / max(1, self.max_sessions)


class ErrorBody(BaseModel):
    error: str
    message: str
    url: str = ""
    session_closed: bool = False


# ---------------------------------------------------------------------------------- the client


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class _ConnectionBroke(Exception):
    """The connection failed after the request was written: it may have reached the server.
    (Failing to connect is `ServerUnavailable` at once: that request cannot have run.)"""


@dataclass
class _Response:
    method: str
    url: str
    status_code: int
    headers: dict[str, str]
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass(eq=False)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self, now: float, expiry_s: float) -> bool:
        # A connection the server closed shows EOF once the loop has seen its FIN.
        return (
            now - self.idle_since < expiry_s
            and not self.reader.at_eof()
            and not self.writer.transport.is_closing()
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class _HttpPool:
    """A small HTTP/1.1 keep-alive pool for the client's JSON calls.

    httpx cost ~2.5 ms of client CPU per call here (request/cookie objects, anyio layers, an
    is-readable probe of every idle connection per request); at 8 sessions that alone was a tenth of
    a step. This pool does one write and a buffered read per call. Idle connections expire before
    uvicorn's 5 s keep-alive timeout so the server does not close one we are about to reuse.
    """

    def __init__(self, headers: dict[str, str], *, timeout_s: float, connect_timeout_s: float):
        self.headers = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self.idle_expiry_s, self.max_idle = 4.0, 128
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._closed = False

    @staticmethod
    def _origin(url: str) -> tuple[tuple[str, str, int], str]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerUnavailable(f"{url}: not an http(s) URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        return (parts.scheme, parts.hostname, port), target

    async def _connect(self, origin: tuple[str, str, int]) -> _Connection:
        scheme, host, port = origin
        ssl_context = ssl.create_default_context() if scheme == "https" else None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context, limit=2**20)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ServerUnavailable(f"{scheme}://{host}:{port} is unreachable: {exc!r}") from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    def _take_idle(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.usable(now, self.idle_expiry_s):
                return connection
            connection.close()
        return None

    async def request(self, method: str, url: str, body: bytes | None = None) -> _Response:
        if self._closed:
            raise ServerUnavailable("the BrowserClient is closed")
        origin, target = self._origin(url)
        connection = self._take_idle(origin) or await self._connect(origin)
        host = origin[1] if ":" not in origin[1] else f"[{origin[1]}]"
        head = f"{method} {target} HTTP/1.1\r\nHost: {host}:{origin[2]}\r\n{self.headers}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        elif method in ("POST", "PUT"):
            head += "Content-Length: 0\r\n"
        data = (head + "\r\n").encode("latin-1") + (body or b"")
        done = False
        try:
            async with asyncio.timeout(self.timeout_s):
                response, keep_alive = await self._exchange(connection, method, url, data)
            done = keep_alive
            return response
        except TimeoutError as exc:
            raise OperationTimeout(f"{method} {url}: no answer within {self.timeout_s} s") from exc
        finally:
            if done and not self._closed and len(self._idle.get(origin, ())) < self.max_idle:
                connection.idle_since = time.monotonic()
                self._idle.setdefault(origin, []).append(connection)
            else:
                connection.close()

    async def _exchange(
        self, connection: _Connection, method: str, url: str, data: bytes
    ) -> tuple[_Response, bool]:
        reader = connection.reader
        try:
            connection.writer.write(data)
            await connection.writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            status = int(rest[:3])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                content = b""
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                chunks = []
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    if size == 0:
                        while (await reader.readuntil(b"\r\n")) != b"\r\n":
                            pass  # trailers
                        break
                    chunks.append(await reader.readexactly(size))
                    await reader.readexactly(2)
                content = b"".join(chunks)
            elif "content-length" in headers:
                content = await reader.readexactly(int(headers["content-length"]))
            else:
                content, keep_alive = await reader.read(), False
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise _ConnectionBroke(f"{method} {url}: connection broke: {exc!r}") from exc
        except ValueError as exc:  # a malformed status line, size or length
            raise _ConnectionBroke(f"{method} {url}: malformed HTTP response: {exc}") from exc
        return _Response(method, url, status, headers, content), keep_alive

    async def aclose(self) -> None:
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()


def _raise_for(response: _Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = ErrorBody.model_validate(response.json())
    except Exception:  # not our error body: a proxy, or a crash before our handlers ran
        body = None
    if response.status_code == 401:
        raise Unauthorized(body.message if body else f"{response.url}: 401 Unauthorized (wrong or no token)")
    if body is None:
        cls = ServerUnavailable if response.status_code >= 500 else BrowserError
        raise cls(f"{response.method} {response.url}: HTTP {response.status_code}")
    cls = error_for_kind(body.error)
    if body.error == "navigation_refused":
        raise cls(body.message, url=body.url)
    error = cls(body.message)
    error.session_closed = body.session_closed
    raise error


class BrowserClient:
    """Client of one or several browser servers; an async context manager."""

    def __init__(
        self, urls: str | Sequence[str], *, token: str | None = None, timeout_s: float = 60, retries: int = 2
    ):
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        if not self.urls:
            raise ValueError("BrowserClient needs at least one server URL")
        self.timeout_s, self.retries = timeout_s, retries
        headers = {"Accept": "*/*", "User-Agent": "webgym-browser-client"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Plain connections only: a loopback server is never reached through a proxy.
        self._http = _HttpPool(headers, timeout_s=timeout_s, connect_timeout_s=min(10.0, timeout_s))
        # Sessions this client placed on each server since its last health reading.
        self._health: dict[str, tuple[float, ServerHealth]] = {}

    async def __aenter__(self) -> BrowserClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self, base: str, method: str, path: str, *, json: Any = None, idempotent: bool = False
    ) -> _Response:
        """One API call with retries on transient errors; raises the typed error tree."""
        delay = 0.1
        body = None if json is None else _dumps(json)
        for attempt in range(self.retries + 1):
            may_have_run = False
            try:
                try:
                    response = await self._http.request(method, base + path, body)
                except _ConnectionBroke as exc:
                    may_have_run = True
                    raise ServerUnavailable(str(exc)) from exc
                may_have_run = response.status_code >= 500
                _raise_for(response)
                return response
            except TRANSIENT_ERRORS as exc:
                # A request that may have run (e.g. a click) is never sent twice.
                if attempt == self.retries or (may_have_run and not idempotent):
                    raise
                log.info("retrying %s %s%s after %s", method, base, path, exc)
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    async def _server_health(self, url: str) -> ServerHealth | None:
        try:
            response = await self._call(url, "GET", "/health", idempotent=True)
        except BrowserError as exc:
            if isinstance(exc, Unauthorized):
                raise
            return None
        health = ServerHealth.model_validate(response.json())
        health.url = url
        self._health[url] = (time.monotonic(), health)
        return health

    async def health(self) -> list[ServerHealth]:
        """Health of every server that answers (unreachable ones are left out)."""
        found = await asyncio.gather(*(self._server_health(url) for url in self.urls))
        return [h for h in found if h is not None]

    async def _servers_by_load(self) -> list[str]:
        if len(self.urls) == 1:
            return list(self.urls)
        now = time.monotonic()
        stale = [u for u in self.urls if u not in self._health or now - self._health[u][0] > 1.0]
        if stale:
            await asyncio.gather(*(self._server_health(url) for url in stale))
        known = [u for u in self.urls if u in self._health]
        ranked = sorted(known, key=lambda u: (self._health[u][1].load, self._health[u][1].active_sessions))
        return ranked + [u for u in self.urls if u not in known]

    async def create_session(
        self,
        start_url: str,
        *,
        viewport: tuple[int, int] = (1280, 720),
        environment: str = "web",
        seed: int | None = None,
    ) -> BrowserSession:
        """Open a session on the least-loaded server; transient failures move on to the next one."""
        request = CreateSessionRequest(
            start_url=start_url, viewport=viewport, environment=environment, seed=seed
        ).model_dump(mode="json")
        last: BrowserError | None = None
        for url in await self._servers_by_load():
            try:
                response = await self._call(url, "POST", "/sessions", json=request)
            except TRANSIENT_ERRORS as exc:
                # "Full" says more than "unreachable" when both happened.
                if last is None or isinstance(exc, ServerBusy):
                    last = exc
                continue
            created = SessionCreated.model_validate(response.json())
            if url in self._health:  # count it now so a burst of creates spreads over the servers
                self._health[url][1].active_sessions += 1
            return BrowserSession(self, url, created)
        assert last is not None
        raise last


class BrowserSession:
    """One browser tab on one server; every method is one HTTP call."""

    def __init__(self, client: BrowserClient, server_url: str, created: SessionCreated):
        self._client = client
        self.server_url = server_url
        self.session_id = created.session_id
        self.environment = created.environment
        self.viewport = tuple(created.viewport)
        self.browser_pid = created.browser_pid
        self.url, self.title = created.url, created.title

    def __repr__(self) -> str:
        return f"BrowserSession({self.session_id!r} on {self.server_url}, {self.environment})"

    async def _post(self, op: str, body: dict | None = None, *, idempotent: bool = False) -> dict:
        response = await self._client._call(
            self.server_url,
            "POST",
            f"/sessions/{self.session_id}/{op}",
            json=body or {},
            idempotent=idempotent,
        )
        return response.json()

    async def navigate(self, url: str) -> PageState:
        return PageState.model_validate(await self._post("navigate", {"url": url}))

    async def screenshot(
        self,
        *,
        format: str = "png",  # noqa: A002 - the contract's name
        quality: int = 80,
        scale: float = 1.0,
        marks: bool = False,
    ) -> Screenshot:
        body = ScreenshotRequest(format=format, quality=quality, scale=scale, marks=marks)
        response = await self._client._call(
            self.server_url,
            "POST",
            f"/sessions/{self.session_id}/screenshot",
            json=body.model_dump(),
            idempotent=True,
        )
        return decode_screenshot(response.headers, response.content)

    async def execute(self, action: BrowserAction) -> ExecuteResult:
        return ExecuteResult.model_validate(await self._post("execute", action.model_dump(exclude_none=True)))

    async def page_info(self, *, elements: bool = False, accessibility: bool = False) -> PageInfo:
        body = PageInfoRequest(elements=elements, accessibility=accessibility).model_dump()
        return PageInfo.model_validate(await self._post("page_info", body, idempotent=True))

    async def env_state(self) -> EnvState:
        return EnvState.model_validate(await self._post("env_state", idempotent=True))

    async def close(self) -> None:
        """Close the session; closing one that is already gone is not an error."""
        from webgym_rollout.errors import SessionNotFound

        try:
            await self._client._call(
                self.server_url, "DELETE", f"/sessions/{self.session_id}", idempotent=True
            )
        except SessionNotFound:
            pass
