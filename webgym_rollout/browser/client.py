"""Typed async client of the browser environment server.

::

    async with BrowserClient(["http://10.0.0.5:8300", "http://10.0.0.6:8300"], token=t) as client:
        session = await client.create_session("http://127.0.0.1:8400/miniwob/click-button.html",
                                              environment="miniwob:click-button", seed=7)
        shot = await session.screenshot()
        step = await session.act(BrowserAction.click(80, 120))  # the action, then the next observation
        step.ok, step.error, step.screenshot, step.env_state
        await session.close()

One keep-alive connection pool (`webgym_rollout.browser.http`) serves every session. New sessions go
to the least-loaded healthy server. Transient failures (`ServerBusy`, `ServerUnavailable`) are
retried with backoff: always when the request cannot have run (connection refused, queue full), and
for read-only operations (screenshot, page_info, env_state) also when the connection broke
mid-request. Errors are the typed tree of `webgym_rollout.errors`, rebuilt from the server's
``{"error": kind, "message": ...}`` body (`webgym_rollout.browser.protocol.ErrorBody`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from webgym_rollout.browser.http import ConnectionBroke, HttpPool, Response
from webgym_rollout.browser.protocol import (
    ActRequest,
    ActResult,
    BlocklistLifted,
    BodyHashes,
    BrowserAction,
    CreateSessionRequest,
    EnvState,
    ErrorBody,
    ExecuteResult,
    PageInfo,
    PageInfoRequest,
    PageState,
    RecordingIndex,
    ReplayOptions,
    Screenshot,
    ScreenshotRequest,
    ServerHealth,
    SessionCreated,
    decode_act,
    decode_bodies,
    decode_screenshot,
)
from webgym_rollout.errors import (
    TRANSIENT_ERRORS,
    BrowserError,
    ServerBusy,
    ServerUnavailable,
    SessionNotFound,
    Unauthorized,
    error_for_kind,
)

__all__ = ["BrowserClient", "BrowserSession"]

log = logging.getLogger(__name__)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _raise_for(response: Response) -> None:
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
        self._http = HttpPool(headers, timeout_s=timeout_s, connect_timeout_s=min(10.0, timeout_s))
        # Sessions this client placed on each server since its last health reading.
        self._health: dict[str, tuple[float, ServerHealth]] = {}

    async def __aenter__(self) -> BrowserClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self, base: str, method: str, path: str, *, json: Any = None, raw: bytes | None = None,
        idempotent: bool = False,
    ) -> Response:
        """One API call with retries on transient errors; raises the typed error tree. The body is
        `json` encoded, or `raw` bytes as they are."""
        delay = 0.1
        body = raw if raw is not None else None if json is None else _dumps(json)
        for attempt in range(self.retries + 1):
            may_have_run = False
            try:
                try:
                    response = await self._http.request(method, base + path, body)
                except ConnectionBroke as exc:
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

    async def unblock(self, origin: str) -> bool:
        """Lift the blocklist entry of `origin` (``http://127.0.0.1:8400``, or any URL of it) on every
        server; True when one of them had it blocked. The servers must run with a token (this
        client's): a server without one refuses (`Unauthorized`)."""
        lifted = False
        for url in self.urls:
            response = await self._call(url, "DELETE", f"/blocklist/{quote(origin, safe=':/[]')}",
                                        idempotent=True)
            lifted |= BlocklistLifted.model_validate(response.json()).lifted
        return lifted

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
        record: bool = False,
        replay: ReplayOptions | None = None,
        bodies: Callable[[str], bytes] | None = None,
    ) -> BrowserSession:
        """Open a session on the least-loaded server (`open_session` with the request these
        keywords make)."""
        request = CreateSessionRequest(start_url=start_url, viewport=viewport, environment=environment,
                                       seed=seed, record=record, replay=replay)
        return await self.open_session(request, bodies=bodies)

    async def open_session(
        self, request: CreateSessionRequest, *, bodies: Callable[[str], bytes] | None = None
    ) -> BrowserSession:
        """Open the session `request` describes on the least-loaded server; transient failures move
        on to the next one.

        ``request.record``: record the page's traffic (`BrowserSession.recording`).
        ``request.replay``: serve the page from a recording; `bodies(sha256)` gives each recorded
        body, uploaded to the server first when it does not hold it yet."""
        payload = request.model_dump_json().encode()
        last: BrowserError | None = None
        for url in await self._servers_by_load():
            try:
                if request.replay is not None:
                    await self._upload_bodies(url, request.replay, bodies)
                response = await self._call(url, "POST", "/sessions", raw=payload)
            except TRANSIENT_ERRORS as exc:
                # "Full" says more than "unreachable" when both happened.
                if last is None or isinstance(exc, ServerBusy):
                    last = exc
                continue
            created = SessionCreated.model_validate_json(response.content)
            if url in self._health:  # count it now so a burst of creates spreads over the servers
                self._health[url][1].active_sessions += 1
            return BrowserSession(self, url, created)
        assert last is not None
        raise last

    async def _upload_bodies(self, url: str, replay: ReplayOptions,
                             bodies: Callable[[str], bytes] | None) -> None:
        """Put the bodies `replay` needs on server `url` (only those it does not hold)."""
        wanted = BodyHashes(sha256=list(dict.fromkeys(e.body_sha256 for e in replay.exchanges
                                                      if e.body_sha256)))
        if not wanted.sha256:
            return
        response = await self._call(url, "POST", "/bodies/missing", json=wanted.model_dump(), idempotent=True)
        missing = BodyHashes.model_validate(response.json()).sha256
        if missing and bodies is None:
            raise ValueError("bodies: the replay needs recorded bodies the server lacks; pass bodies=")
        for sha in missing:
            await self._call(url, "PUT", f"/bodies/{sha}", raw=bodies(sha), idempotent=True)


_DEFAULT_SHOT = ScreenshotRequest()


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
    ) -> Screenshot:
        body = ScreenshotRequest(format=format, quality=quality, scale=scale)
        response = await self._client._call(
            self.server_url,
            "POST",
            f"/sessions/{self.session_id}/screenshot",
            json=body.model_dump(),
            idempotent=True,
        )
        return decode_screenshot(response.headers, response.content)

    async def execute(self, action: BrowserAction) -> ExecuteResult:
        """Run `action` on the page; an agent's mistake is ``ok=False`` with the error, not a raise."""
        response = await self._client._call(
            self.server_url, "POST", f"/sessions/{self.session_id}/execute",
            raw=action.model_dump_json(exclude_none=True).encode(),
        )
        return ExecuteResult.model_validate_json(response.content)

    async def act(
        self,
        action: BrowserAction,
        *,
        screenshot: ScreenshotRequest | None = _DEFAULT_SHOT,
        env_state: bool = True,
        elements: bool = False,
    ) -> ActResult:
        """One agent step in one call: run `action`, then read the next observation.

        Returns the action's `ExecuteResult` fields (an agent's mistake is ``ok=False`` with
        `error`, not a raise) and what the step observes after it: the screenshot (`screenshot`
        says how to take it; None takes none), the page's own state (`env_state`; None for
        environments that keep none) and, with `elements`, the interactive elements with the page's
        URL and title read again. Infrastructure failures raise the typed errors, as for `execute`;
        like `execute`, a call whose connection broke is not sent again (the action may have run)."""
        request = ActRequest(action=action, screenshot=screenshot, env_state=env_state, elements=elements)
        response = await self._client._call(
            self.server_url, "POST", f"/sessions/{self.session_id}/act",
            raw=request.model_dump_json().encode(),
        )
        return decode_act(response.headers, response.content)

    async def page_info(self, *, elements: bool = False, axtree: bool = False) -> PageInfo:
        """The page's URL and title and, when asked for, the interactive elements in the viewport and
        the accessibility tree (read together: an `AxNode.element` is an id into `PageInfo.elements`,
        filled only when `elements` is asked for too)."""
        body = PageInfoRequest(elements=elements, axtree=axtree).model_dump()
        return PageInfo.model_validate(await self._post("page_info", body, idempotent=True))

    async def env_state(self) -> EnvState:
        return EnvState.model_validate(await self._post("env_state", idempotent=True))

    async def recording(self) -> RecordingIndex:
        """What the session recorded (created with ``record=True``), or, replaying, the requests
        its recording lacked."""
        response = await self._client._call(
            self.server_url, "GET", f"/sessions/{self.session_id}/recording", idempotent=True
        )
        return RecordingIndex.model_validate(response.json())

    async def recorded_bodies(self, hashes: Sequence[str]) -> dict[str, bytes]:
        """Bodies the session recorded (by their SHA-256, from `recording`), in one call."""
        if not hashes:
            return {}
        response = await self._client._call(
            self.server_url, "POST", f"/sessions/{self.session_id}/recording/bodies",
            json=BodyHashes(sha256=list(hashes)).model_dump(), idempotent=True,
        )
        return decode_bodies(response.headers, response.content)

    async def close(self) -> None:
        """Close the session; closing one that is already gone is not an error."""
        try:
            await self._client._call(
                self.server_url, "DELETE", f"/sessions/{self.session_id}", idempotent=True
            )
        except SessionNotFound:
            pass
