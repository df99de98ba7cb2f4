"""A small HTTP/1.1 keep-alive connection pool: the client's transport to the browser servers.

httpx cost ~2.5 ms of client CPU per call here (request/cookie objects, anyio layers, an
is-readable probe of every idle connection per request); at 8 sessions that alone was a tenth of a
step. This pool does one write and a buffered read per call. Idle connections expire before
uvicorn's 5 s keep-alive timeout so the server does not close one we are about to reuse.

`HttpPool.request` raises `ServerUnavailable` when it cannot connect (the request cannot have run),
`OperationTimeout` after `timeout_s`, and `ConnectionBroke` when the connection failed after the
request was written (it may have reached the server: the caller decides whether to resend).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from webgym_rollout.errors import ConnectionBroke, OperationTimeout, ServerUnavailable

__all__ = ["ConnectionBroke", "HttpPool", "Response"]


@dataclass
class Response:
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


class HttpPool:
    """Keep-alive connections per origin; ``await pool.request(method, url, body)`` -> `Response`."""

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

    async def request(self, method: str, url: str, body: bytes | None = None) -> Response:
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
    ) -> tuple[Response, bool]:
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
            raise ConnectionBroke(f"{method} {url}: connection broke: {exc!r}") from exc
        except ValueError as exc:  # a malformed status line, size or length
            raise ConnectionBroke(f"{method} {url}: malformed HTTP response: {exc}") from exc
        return Response(method, url, status, headers, content), keep_alive

    async def aclose(self) -> None:
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
