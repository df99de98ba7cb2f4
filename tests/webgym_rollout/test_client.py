"""BrowserClient: action models, several servers (least-loaded first), retries and typed errors."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from pydantic import ValidationError

from tests.conftest import free_port
from webgym_rollout.browser import PoolSettings
from webgym_rollout.client import BrowserAction, BrowserClient
from webgym_rollout.errors import ServerBusy, ServerUnavailable, SessionNotFound
from webgym_rollout.server import ServerSettings, running_server
from webgym_rollout.sites import SiteServer


def test_actions_validate_per_kind():
    assert BrowserAction(kind="click", x=3, y=4) == BrowserAction.click(3, 4)
    assert BrowserAction.scroll_by("down", 500).model_dump(exclude_none=True) == {
        "kind": "scroll",
        "direction": "down",
        "amount": 500,
    }
    assert BrowserAction.model_validate({"kind": "type", "text": "hi", "press_enter": True}).press_enter
    for bad in (
        {"kind": "click", "x": 1},
        {"kind": "type"},
        {"kind": "key", "key": "a", "x": 1},
        {"kind": "scroll", "direction": "sideways"},
        {"kind": "teleport"},
        {"kind": "wait", "seconds": -1},
        {"kind": "select", "x": 1, "y": 2},
        {"kind": "scroll", "direction": "up", "x": 5},
    ):
        with pytest.raises(ValidationError):
            BrowserAction.model_validate(bad)
    for action in (
        BrowserAction.back(),
        BrowserAction.wait_for(0.5),
        BrowserAction.hover_at(1, 2),
        BrowserAction.select_option(1, 2, "v"),
        BrowserAction.press("Enter"),
        BrowserAction.type_text("x"),
    ):
        assert BrowserAction.model_validate(action.model_dump(exclude_none=True)) == action


def _settings(chromium_path: str, **pool) -> ServerSettings:
    base = dict(executable_path=chromium_path, browsers=1, contexts_per_browser=2, allow_hosts=("127.0.0.1",))
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
            running_server(_settings(chromium_path)) as (a, _),
            running_server(_settings(chromium_path)) as (b, _),
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


class _RawHttp:
    """A real HTTP/1.1 server on 127.0.0.1 that answers with scripted raw bytes, one reply per
    connection or several (keep-alive), and records how many connections it saw."""

    def __init__(self, replies: list[bytes], *, close_after_each: bool):
        self.replies, self.close_after_each = list(replies), close_after_each
        self.connections = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(self.replies.pop(0))
                await writer.drain()
                if self.close_after_each:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


_HEALTH = b'{"active_sessions": 1, "max_sessions": 4, "browsers": 1}'


def _reply(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + extra + b"\r\n" + body


async def test_client_reconnects_when_the_server_closed_a_kept_connection():
    # The server closes each connection after one reply without saying so: the client must notice
    # the closed idle connection and open a new one instead of failing the next call.
    raw = _RawHttp([_reply(_HEALTH)] * 3, close_after_each=True)
    async with raw as url, BrowserClient(url, retries=0) as client:
        for _ in range(3):
            (health,) = await client.health()
            await asyncio.sleep(0.05)  # let the loop see the server's FIN
            assert health.active_sessions == 1 and health.max_sessions == 4
    assert raw.connections == 3


async def test_client_reuses_connections_and_reads_chunked_replies():
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (_HEALTH[:10], _HEALTH[10:]))
        + b"0\r\n\r\n"
    )
    raw = _RawHttp([_reply(_HEALTH), chunked, _reply(_HEALTH)], close_after_each=False)
    async with raw as url, BrowserClient(url, retries=0) as client:
        for _ in range(3):
            assert (await client.health())[0].browsers == 1
    assert raw.connections == 1


async def test_client_turns_foreign_and_broken_replies_into_typed_errors():
    proxy_error = _reply(b"<html>bad gateway</html>", "502 Bad Gateway")
    busy = _reply(b'{"error": "server_busy", "message": "the create queue is full"}', "429 Too Many")
    truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}"
    for reply, error in (
        (proxy_error, ServerUnavailable),
        (busy, ServerBusy),
        (truncated, ServerUnavailable),
    ):
        raw = _RawHttp([reply], close_after_each=True)
        async with raw as url, BrowserClient(url, retries=0) as client:
            with pytest.raises(error):
                await client._call(url, "POST", "/sessions", json={"start_url": "http://127.0.0.1:1/"})
