"""A real HTTP/1.1 server on 127.0.0.1 that answers with scripted raw bytes (client and transport tests).

``async with RawHttp(replies, close_after_each=...) as url:`` answers each request with the next
reply, closing the connection after each one or keeping it open (keep-alive); `connections` counts
the connections it accepted and `requests` holds the raw request heads it read.
"""

from __future__ import annotations

import asyncio

__all__ = ["RawHttp", "reply"]


def reply(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    """A complete HTTP/1.1 response with a JSON content type and a Content-Length."""
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + extra + b"\r\n" + body


class RawHttp:
    def __init__(self, replies: list[bytes], *, close_after_each: bool):
        self.replies, self.close_after_each = list(replies), close_after_each
        self.connections = 0
        self.requests: list[bytes] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
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
