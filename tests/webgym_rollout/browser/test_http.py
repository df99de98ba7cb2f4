"""HttpPool, the client's keep-alive transport, against real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import free_port
from tests.webgym_rollout.raw_http import RawHttp, reply
from webgym_rollout.browser.http import ConnectionBroke, HttpPool
from webgym_rollout.errors import OperationTimeout, ServerUnavailable

_BODY = b'{"answer": 42}'


def _pool(timeout_s: float = 10.0) -> HttpPool:
    return HttpPool({"User-Agent": "test"}, timeout_s=timeout_s, connect_timeout_s=5.0)


async def test_reuses_one_connection_and_sends_the_request_as_written():
    raw = RawHttp([reply(_BODY)] * 3, close_after_each=False)
    pool = _pool()
    async with raw as url:
        first = await pool.request("POST", f"{url}/sessions?x=1", b'{"a":1}')
        assert (first.status_code, first.json(), first.method) == (200, {"answer": 42}, "POST")
        assert first.headers["content-type"] == "application/json"
        for _ in range(2):
            assert (await pool.request("GET", f"{url}/health")).content == _BODY
    await pool.aclose()
    assert raw.connections == 1
    head = raw.requests[0].decode()
    assert head.startswith("POST /sessions?x=1 HTTP/1.1\r\n") and "User-Agent: test\r\n" in head
    assert "Content-Length: 7\r\n" in head and head.endswith('{"a":1}')
    assert "Content-Length: 0" not in raw.requests[2].decode()  # a GET has no body


async def test_reads_chunked_replies_with_trailers():
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n" for part in (_BODY[:5], _BODY[5:]))
        + b"0\r\nX-Trailer: yes\r\n\r\n"
    )
    raw = RawHttp([chunked, reply(_BODY)], close_after_each=False)
    pool = _pool()
    async with raw as url:
        assert (await pool.request("GET", f"{url}/a")).content == _BODY
        assert (await pool.request("GET", f"{url}/b")).content == _BODY
    await pool.aclose()
    assert raw.connections == 1  # the chunked reply was read to its end: the connection stayed usable


async def test_reconnects_when_the_server_closed_a_kept_connection():
    # The server closes each connection after one reply without saying so: the pool must notice
    # the closed idle connection and open a new one instead of failing the next call.
    raw = RawHttp([reply(_BODY)] * 3, close_after_each=True)
    pool = _pool()
    async with raw as url:
        for _ in range(3):
            assert (await pool.request("GET", f"{url}/health")).content == _BODY
            await asyncio.sleep(0.05)  # let the loop see the server's FIN
    await pool.aclose()
    assert raw.connections == 3


async def test_connection_close_and_replies_without_length_are_not_kept():
    raw = RawHttp([reply(_BODY, extra=b"Connection: close\r\n"), reply(_BODY)], close_after_each=False)
    pool = _pool()
    async with raw as url:
        await pool.request("GET", f"{url}/a")
        await pool.request("GET", f"{url}/b")
    await pool.aclose()
    assert raw.connections == 2

    until_close = b"HTTP/1.1 200 OK\r\n\r\n" + _BODY  # no length: the body ends with the connection
    raw = RawHttp([until_close], close_after_each=True)
    pool = _pool()
    async with raw as url:
        assert (await pool.request("GET", f"{url}/c")).content == _BODY
    await pool.aclose()


@pytest.mark.parametrize("broken", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}",  # cut short
    b"HTTP/1.1 OK\r\n\r\n",  # no status code
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # a bad chunk size
])
async def test_a_broken_reply_is_connection_broke(broken):
    raw = RawHttp([broken], close_after_each=True)
    pool = _pool()
    async with raw as url:
        with pytest.raises(ConnectionBroke, match=url):
            await pool.request("POST", f"{url}/sessions", b"{}")
    await pool.aclose()


async def test_unreachable_and_silent_servers_and_bad_urls():
    pool = _pool(timeout_s=0.2)
    port = free_port()
    with pytest.raises(ServerUnavailable, match=str(port)):  # nothing listens: the request cannot have run
        await pool.request("GET", f"http://127.0.0.1:{port}/health")
    with pytest.raises(ServerUnavailable, match="not an http"):
        await pool.request("GET", "ftp://127.0.0.1/x")

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.read()  # never answers; returns when the client gives up

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    with pytest.raises(OperationTimeout, match="no answer"):
        await pool.request("GET", f"{url}/health")
    server.close()
    await pool.aclose()
    with pytest.raises(ServerUnavailable, match="closed"):
        await pool.request("GET", f"{url}/health")
