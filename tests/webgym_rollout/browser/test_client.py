"""BrowserClient: several servers (least-loaded first), retries, and errors rebuilt as their classes."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tests.conftest import free_port
from tests.webgym_rollout.raw_http import RawHttp, reply
from webgym_rollout.browser.client import BrowserClient, BrowserSession
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.browser.protocol import (
    ActRequest,
    ActResult,
    BrowserAction,
    CreateSessionRequest,
    EnvState,
    ErrorBody,
    Screenshot,
    ScreenshotRequest,
    SessionCreated,
    encode_act,
)
from webgym_rollout.browser.server import ServerSettings, running_server
from webgym_rollout.errors import (
    BrowserCrashed,
    InvalidRequest,
    NavigationRefused,
    OperationTimeout,
    ServerBusy,
    ServerUnavailable,
    SessionNotFound,
    SiteBlocked,
    Unauthorized,
)
from webgym_rollout.tasks.sites import SiteServer


def _settings(chromium_path: str, sites: SiteServer, **pool) -> ServerSettings:
    base = dict(executable_path=chromium_path, browsers=1, contexts_per_browser=2,
                allow_hosts=(f"{sites.host}:{sites.port}",))
    base.update(pool)
    return ServerSettings(port=0, pool=PoolSettings(**base))


async def test_unreachable_server_is_a_typed_transient_error():
    async with BrowserClient(f"http://127.0.0.1:{free_port()}", retries=1) as client:
        with pytest.raises(ServerUnavailable):
            await client.create_session("http://127.0.0.1:1/")
        assert await client.health() == []


@pytest.mark.browser
async def test_sessions_spread_over_servers_and_skip_dead_ones(chromium_path):
    dead = f"http://127.0.0.1:{free_port()}"
    with SiteServer() as sites:
        form = f"{sites.base_url}/sandbox/form.html"
        async with (
            running_server(_settings(chromium_path, sites)) as (a, _),
            running_server(_settings(chromium_path, sites)) as (b, _),
            BrowserClient([dead, a, b], retries=0) as client,
        ):
            sessions = [await client.create_session(form) for _ in range(4)]
            assert Counter(s.server_url for s in sessions) == {a: 2, b: 2}
            healths = await client.health()
            assert {h.url for h in healths} == {a, b} and all(h.active_sessions == 2 for h in healths)
            # Both servers are full now: a fifth session is refused with a transient error.
            with pytest.raises(ServerBusy):
                await client.create_session(form)
            # ...and retried: a slot that frees up while the client backs off is taken.
            asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(sessions[0].close()))
            client.retries = 4
            fifth = await client.create_session(form)
            assert fifth.server_url == sessions[0].server_url
            result = await fifth.execute(BrowserAction.wait_for(0.05))
            assert result.ok and result.title == "Sandbox form"
            await fifth.close()
            with pytest.raises(SessionNotFound):
                await fifth.page_info()


_HEALTH = b'{"active_sessions": 1, "max_sessions": 4, "browsers": 1}'


async def test_health_reads_every_answering_server():
    raw = RawHttp([reply(_HEALTH)] * 2, close_after_each=False)
    dead = f"http://127.0.0.1:{free_port()}"
    async with raw as url, BrowserClient([url, dead], retries=0, token="t") as client:
        (health,) = await client.health()
        assert (health.url, health.active_sessions, health.max_sessions, health.load) == (url, 1, 4, 0.25)
    assert b"Authorization: Bearer t\r\n" in raw.requests[0]


@pytest.mark.parametrize("cls", [SessionNotFound, BrowserCrashed, OperationTimeout, NavigationRefused,
                                 SiteBlocked, ServerBusy, Unauthorized, InvalidRequest])
async def test_every_error_the_server_sends_is_raised_as_its_class(cls):
    body = ErrorBody(error=cls.kind, message=f"the {cls.kind} message", url="http://127.0.0.2/x",
                     session_closed=True).model_dump_json().encode()
    raw = RawHttp([reply(body, f"{cls.status_code} Whatever")], close_after_each=True)
    async with raw as url, BrowserClient(url, retries=0) as client:
        with pytest.raises(cls) as caught:
            await client._call(url, "POST", "/sessions/x/execute", json={"kind": "go_back"})
    assert type(caught.value) is cls and str(caught.value) == f"the {cls.kind} message"
    if cls is NavigationRefused:
        assert caught.value.url == "http://127.0.0.2/x"
    elif cls is not Unauthorized:
        assert caught.value.session_closed is True


async def test_a_request_that_may_have_run_is_not_sent_twice():
    """A connection that breaks after the request was written: a click is not resent, a screenshot is."""
    truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}"
    raw = RawHttp([truncated, truncated], close_after_each=True)
    async with raw as url, BrowserClient(url, retries=3) as client:
        with pytest.raises(ServerUnavailable):
            await client._call(url, "POST", "/sessions/x/execute", json={"kind": "go_back"})
        assert raw.connections == 1
        ok = reply(_HEALTH)
        raw.replies = [truncated, ok]
        await client._call(url, "POST", "/sessions/x/screenshot", json={}, idempotent=True)
        assert raw.connections == 3


async def test_client_turns_foreign_and_broken_replies_into_typed_errors():
    proxy_error = reply(b"<html>bad gateway</html>", "502 Bad Gateway")
    busy = reply(b'{"error": "server_busy", "message": "the create queue is full"}', "429 Too Many")
    truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}"
    for answer, error in (
        (proxy_error, ServerUnavailable),
        (busy, ServerBusy),
        (truncated, ServerUnavailable),
    ):
        raw = RawHttp([answer], close_after_each=True)
        async with raw as url, BrowserClient(url, retries=0) as client:
            with pytest.raises(error):
                await client._call(url, "POST", "/sessions", json={"start_url": "http://127.0.0.1:1/"})


def _body(raw_request: bytes) -> bytes:
    return raw_request.split(b"\r\n\r\n", 1)[1]


async def test_act_sends_its_typed_request_once_and_decodes_the_reply():
    result = ActResult(ok=False, error="no <select> element at (1, 2)", url="http://127.0.0.1:1/",
                       title="t", env_state=EnvState(done=True, raw_reward=1.0),
                       screenshot=Screenshot(data=b"\x89PNG raw", sha256="ab" * 32, width=8, height=9,
                                             format="png"))
    content, headers = encode_act(result)
    answer = reply(content, extra=f"X-Webgym-Meta-Length: {headers['x-webgym-meta-length']}\r\n".encode())
    truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}"
    raw = RawHttp([truncated, answer], close_after_each=True)
    async with raw as url, BrowserClient(url, retries=3) as client:
        session = BrowserSession(client, url, SessionCreated(session_id="s1", environment="web",
                                                             viewport=(1280, 720), url=url, title=""))
        action = BrowserAction.select_option(1, 2, "Blue")
        with pytest.raises(ServerUnavailable):  # the action may have run: not sent again
            await session.act(action)
        assert raw.connections == 1
        got = await session.act(action, screenshot=ScreenshotRequest(format="jpeg", quality=50))
    assert got == result  # an agent's mistake is data on the result, not a raise
    assert raw.requests[-1].startswith(b"POST /sessions/s1/act ")
    sent = ActRequest.model_validate_json(_body(raw.requests[-1]))
    assert sent == ActRequest(action=action, screenshot=ScreenshotRequest(format="jpeg", quality=50))


async def test_open_session_sends_the_typed_request_as_it_is():
    created = SessionCreated(session_id="s2", environment="miniwob:click-button", viewport=(160, 210),
                             url="http://127.0.0.1:1/m", title="M", browser_pid=7)
    raw = RawHttp([reply(created.model_dump_json().encode())], close_after_each=True)
    request = CreateSessionRequest(start_url="http://127.0.0.1:1/m", viewport=(800, 600),
                                   environment="miniwob:click-button", seed=5, record=True)
    async with raw as url, BrowserClient(url, retries=0) as client:
        session = await client.open_session(request)
    assert (session.session_id, session.environment, session.viewport, session.browser_pid) == (
        "s2", "miniwob:click-button", (160, 210), 7)
    assert CreateSessionRequest.model_validate_json(_body(raw.requests[0])) == request
