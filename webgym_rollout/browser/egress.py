"""The egress proxy: every connection Chromium opens passes here, and only allowed ones go further.

The browser pool starts one `EgressProxy` on 127.0.0.1 (a free port) before its browsers and
launches Chromium with `EgressProxy.chromium_args`: ``--proxy-server`` pointing here and
``--proxy-bypass-list=<-loopback>``, so that loopback destinations (allowlisted local sites) pass
the proxy too. Pages, popups, every kind of worker, WebSockets, beacons and prefetches all use
Chromium's network stack, hence the proxy, whatever the page-level interception saw.

For each request the proxy

1. parses the target: ``CONNECT host:port`` (HTTPS and WebSockets: tunnelled, TLS never
   intercepted) or an absolute-form ``GET http://host:port/path`` (plain HTTP: forwarded in
   origin form with ``Connection: close``, one request per connection, so a reused connection
   can never carry a request to another host);
2. resolves the name itself through the `Resolver` it was given (production: the event loop's
   ``getaddrinfo``; tests: a `MappingResolver` that fails closed and never does DNS);
3. decides with the guard's rules (`UrlGuard.host_reason`, then `UrlGuard.connect_reason` for
   each address: `webgym_rollout.browser.guard`) and connects to an address it checked, never
   looking the name up a second time (DNS rebinding cannot swap the address);
4. answers what it does not forward with a status and the ``X-Webgym-Egress`` header the server
   can name: ``refused`` (403), ``unresolved`` or ``unreachable`` (502), with the reason in
   ``X-Webgym-Egress-Reason`` and a small HTML page.

A request it cannot read gets 400 (``bad_request``) and the connection is closed: a request line
that is not ``METHOD TARGET HTTP/1.x``, a target that is not ``CONNECT host:port`` or an absolute
``http://`` URL, a host that is not a DNS name (labels of letters, digits, ``-`` and ``_``, at most
63 characters each, 253 in all), an IP literal, or an IPv6 address in brackets (no zone), a port
outside 1..65535, or a head over 64 KiB. A head not complete within ``head_timeout_s`` gets 408.

The proxy runs on its own event loop in a thread, so that its CPU time can be read on its own
(`EgressStats.cpu_s`, in ``/metrics``) and a busy server loop never delays a page's bytes. It keeps
the last outcome per ``host:port`` (`EgressProxy.outcome`) so that a navigation the browser only
reports as ``net::ERR_TUNNEL_CONNECTION_FAILED`` can be named. It never forwards to a loopback
address on its own port or on a port given to `EgressProxy.protect_port` (the browser server's
own API), allowlisted or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import itertools
import logging
import re
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from webgym_rollout.browser.guard import IPAddress, UrlGuard, ip_literal
from webgym_rollout.errors import BrowserError, ResolutionFailed

__all__ = [
    "EGRESS_HEADER",
    "EgressOutcome",
    "EgressProxy",
    "EgressStats",
    "MappingResolver",
    "Resolver",
    "ResolutionFailed",
    "system_resolver",
]

log = logging.getLogger(__name__)

EGRESS_HEADER = "x-webgym-egress"
"""Response header of an answer the proxy gave itself: ``refused``, ``unresolved``, ``unreachable``."""
EGRESS_REASON_HEADER = "x-webgym-egress-reason"
"""Response header with the reason, in words."""
_MAX_HEAD = 64 * 1024
_CONNECT_TIMEOUT_S = 10.0
_HEAD_TIMEOUT_S = 30.0
_NAME_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
_RESOLVE_TIMEOUT_S = 10.0
_OUTCOMES_KEPT = 1024
_HOP_BY_HOP = (b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"te",
               b"trailer", b"upgrade")


Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
"""``await resolver(host, port)`` -> the addresses of a name; raises `ResolutionFailed` (an
OSError) when there are none."""


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The addresses of `host` from the operating system's resolver (``getaddrinfo``), in its order."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise ResolutionFailed(f"cannot resolve {host}: {exc.strerror}") from exc
    except (UnicodeError, ValueError) as exc:  # a name the IDNA codec refuses (empty or long label)
        raise ResolutionFailed(f"cannot resolve {host}: {exc}") from exc
    found: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = ip_literal(str(sockaddr[0]).split("%")[0])
        if address is not None and address not in found:
            found.append(address)
    return found


class MappingResolver:
    """Names resolved from a fixed mapping (``{"intranet.test": "127.0.0.2"}``, a value may be a
    list); any other name fails. For tests, which must never do real DNS."""

    def __init__(self, mapping: Mapping[str, str | Iterable[str]]):
        self.mapping: dict[str, list[IPAddress]] = {}
        for name, value in mapping.items():
            values = [value] if isinstance(value, str) else list(value)
            addresses = [ip_literal(v) for v in values]
            if any(a is None for a in addresses):
                raise ValueError(f"MappingResolver: {name} -> {value!r} is not a list of IP addresses")
            self.mapping[name.lower().rstrip(".")] = addresses  # type: ignore[assignment]
        self.asked: list[str] = []
        """Every name asked for, in order."""

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        try:
            return list(self.mapping[host.lower().rstrip(".")])
        except KeyError:
            raise ResolutionFailed(f"cannot resolve {host}: not in the test resolver's mapping") from None


@dataclass(frozen=True)
class EgressOutcome:
    """What the proxy did with a request for a ``host:port``, for the server to name a failure."""

    kind: str
    """``refused``, ``unresolved``, ``unreachable`` or ``forwarded``."""
    reason: str
    seq: int
    """Position among all outcomes (increasing): tells outcomes after a point in time."""


@dataclass
class EgressStats:
    """Counters of the proxy (read by ``/metrics``)."""

    connections: int = 0
    """Requests forwarded (tunnels and plain HTTP requests)."""
    refused: int = 0
    """Requests refused by the guard's rules."""
    failed: int = 0
    """Requests whose name did not resolve or whose destination did not answer."""
    open: int = 0
    """Connections from the browsers open now."""
    cpu_s: float = 0.0
    """CPU seconds of the proxy's thread (filled when read)."""


class EgressProxy:
    """The forwarding proxy of the module docstring. ``await start()`` before the browsers launch,
    ``await close()`` after they closed; `chromium_args` are the flags that route Chromium here."""

    def __init__(self, guard: UrlGuard, resolver: Resolver | None = None, *,
                 connect_timeout_s: float = _CONNECT_TIMEOUT_S, head_timeout_s: float = _HEAD_TIMEOUT_S):
        self.guard = guard
        self.resolver: Resolver = resolver or system_resolver
        self.connect_timeout_s = connect_timeout_s
        self.head_timeout_s = head_timeout_s
        """A connection that has not sent a whole request head by then gets 408 and is closed."""
        self.port = 0
        self._protected: set[int] = set()
        self._stats = EgressStats()
        self._outcomes: OrderedDict[tuple[str, int], EgressOutcome] = OrderedDict()
        self._seq = itertools.count(1)
        self._last_seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._clients: set[_Client] = set()

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def chromium_args(self) -> list[str]:
        """Chromium flags that send every connection through this proxy, loopback included."""
        if not self.port:
            raise BrowserError("the egress proxy is not started")
        return [
            f"--proxy-server={self.url}",
            "--proxy-bypass-list=<-loopback>",
            # A second layer: Chromium resolves no name itself (the proxy does), so a connection
            # that ever bypassed the proxy could not find a host by name.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            # WebRTC sends UDP (STUN, TURN, peer connections) outside any HTTP proxy: forbid it.
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        ]

    async def start(self) -> None:
        """Listen on 127.0.0.1 and a free port, on the proxy's own thread and event loop."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        caller = asyncio.get_running_loop()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                self._server = loop.run_until_complete(
                    loop.create_server(lambda: _Client(self), "127.0.0.1", 0, backlog=1024)
                )
                self.port = self._server.sockets[0].getsockname()[1]
                self._protected.add(self.port)
            except BaseException as exc:  # reported to the starting coroutine
                caller.call_soon_threadsafe(_settle, ready, exc)
                loop.close()
                return
            caller.call_soon_threadsafe(_settle, ready, None)
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="webgym-egress-proxy", daemon=True)
        self._thread.start()
        await ready
        log.info("egress proxy on %s", self.url)

    async def close(self) -> None:
        """Stop listening, close every connection and the proxy's loop."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for client in list(self._clients):
                client.abort()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(RuntimeError):
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(shutdown(), loop))
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 10)

    def protect_port(self, port: int) -> None:
        """Never forward to a loopback address on `port` (the browser server's own API), even where
        ``--allow-hosts`` opens the host."""
        self._protected.add(port)

    # ------------------------------------------------------------------ reports

    def stats(self) -> EgressStats:
        """A copy of the counters, with the proxy thread's CPU seconds."""
        cpu = 0.0
        thread = self._thread
        if thread is not None and thread.is_alive() and thread.ident is not None:
            with contextlib.suppress(OSError, AttributeError):
                cpu = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        return EgressStats(self._stats.connections, self._stats.refused, self._stats.failed,
                           self._stats.open, cpu)

    @property
    def last_seq(self) -> int:
        """The position of the latest outcome (see `EgressOutcome.seq`)."""
        return self._last_seq

    def outcome(self, url: str, *, after: int = 0) -> EgressOutcome | None:
        """The last outcome for the host and port of `url`, if it is later than `after`."""
        try:
            parts = urlsplit(url)
            port = parts.port or {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(parts.scheme, 0)
        except ValueError:
            return None
        found = self._outcomes.get(((parts.hostname or "").rstrip(".").lower(), port))
        return found if found is not None and found.seq > after else None

    def _record(self, host: str, port: int, kind: str, reason: str) -> None:
        seq = next(self._seq)
        key = (host, port)
        self._outcomes.pop(key, None)
        self._outcomes[key] = EgressOutcome(kind, reason, seq)
        if len(self._outcomes) > _OUTCOMES_KEPT:
            self._outcomes.popitem(last=False)
        self._last_seq = seq
        if kind == "refused":
            self._stats.refused += 1
            log.info("egress refused %s:%d: %s", host, port, reason)
        elif kind != "forwarded":
            self._stats.failed += 1
            log.info("egress %s %s:%d: %s", kind, host, port, reason)

    # ------------------------------------------------------------------ one request

    async def _open(self, client: _Client, head: bytes) -> None:
        """Decide on the request in `head` and connect its client to the destination, or answer;
        a failure nobody foresaw closes the connection (and is logged), never leaves it hanging."""
        try:
            await self._decide(client, head)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("egress proxy: unexpected failure on a request (%r); closing it", head[:200])
            client.abort()

    async def _decide(self, client: _Client, head: bytes) -> None:
        try:
            method, host, port, upstream_head = _parse_head(head)
        except ValueError as exc:
            client.answer(400, "bad_request", f"not a proxy request: {exc}", "")
            return
        key_host = host.strip("[]").rstrip(".").lower()
        why = self.guard.host_reason(key_host, port)
        if why is not None:
            self._record(key_host, port, "refused", why)
            client.answer(403, "refused", why, f"{key_host}:{port}")
            return
        literal = ip_literal(key_host)
        try:
            if literal is not None:
                addresses: Sequence[IPAddress] = [literal]
            else:
                async with asyncio.timeout(_RESOLVE_TIMEOUT_S):
                    addresses = await self.resolver(key_host, port)
                if not addresses:
                    raise ResolutionFailed(f"cannot resolve {key_host}: no address")
        except (OSError, TimeoutError) as exc:
            reason = str(exc) or f"cannot resolve {key_host}: timed out"
            self._record(key_host, port, "unresolved", reason)
            client.answer(502, "unresolved", reason, f"{key_host}:{port}")
            return
        allowed, refusals = [], []
        for address in addresses:
            why = self.guard.connect_reason(key_host, port, address)
            if why is None and address.is_loopback and port in self._protected:
                why = f"port {port} on {address} is the browser server's own"
            (refusals if why else allowed).append(why or address)
        if not allowed:
            self._record(key_host, port, "refused", refusals[0])
            client.answer(403, "refused", refusals[0], f"{key_host}:{port}")
            return
        errors = []
        for address in allowed:  # only addresses checked above: no second lookup
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    await client.connect(str(address), port, upstream_head if method != "CONNECT" else None)
                self._stats.connections += 1
                self._record(key_host, port, "forwarded", str(address))
                return
            except (OSError, TimeoutError) as exc:
                errors.append(f"{address}: {exc.strerror if isinstance(exc, OSError) else 'timed out'}")
        reason = f"cannot connect to {key_host}:{port} ({'; '.join(errors)})"
        self._record(key_host, port, "unreachable", reason)
        client.answer(502, "unreachable", reason, f"{key_host}:{port}")


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _split_host_port(authority: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` or ``[v6][:port]`` -> (host, port); ValueError for anything else."""
    if authority.startswith("["):
        host, bracket, rest = authority[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"bad IPv6 authority {authority[:200]!r}")
        port = rest.removeprefix(":")
        address = ip_literal(host) if ":" in host and "%" not in host else None
        if address is None or address.version != 6:
            raise ValueError(f"{authority[:200]!r}: brackets hold an IPv6 address (no zone)")
    else:
        host, colon, port = authority.partition(":")
        if ":" in port:
            raise ValueError(f"{authority[:200]!r}: an IPv6 address needs brackets")
        if not _valid_host(host):
            raise ValueError(f"{authority[:200]!r}: not a host name or an IP address")
        if colon and not port:
            raise ValueError(f"empty port in {authority[:200]!r}")
    if port and not (port.isascii() and port.isdigit()):
        raise ValueError(f"bad port in {authority[:200]!r}")
    number = int(port) if port else default_port
    if not 0 < number < 65536:
        raise ValueError(f"bad port in {authority[:200]!r}")
    return host, number


def _valid_host(host: str) -> bool:
    """A DNS name (labels of letters, digits, ``-`` and ``_``; a trailing dot allowed) or an IPv4
    literal, as a browser sends it; nothing a resolver could choke on (NUL, spaces, empty labels)."""
    name = host.lower().removesuffix(".")
    if not name or len(name) > 253 or not name.isascii():
        return False
    return all(_NAME_LABEL.fullmatch(label) for label in name.split("."))


def _parse_head(head: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, the head to send upstream) of a proxy request head."""
    request_line, _, rest = head.partition(b"\r\n")
    parts = request_line.decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"bad request line {request_line[:200]!r}")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _split_host_port(target, 443)
        return method, host, port, b""
    url = urlsplit(target)
    if url.scheme.lower() != "http" or not url.netloc:
        raise ValueError(f"{method} {target[:200]}: the target must be an absolute http:// URL")
    host, port = _split_host_port(url.netloc.rpartition("@")[2], 80)
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    lines = [f"{method} {path} {version}".encode("latin-1")]
    for line in rest.split(b"\r\n"):
        if line and line.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP:
            lines.append(line)
    lines.append(b"Connection: close")
    return method, host, port, b"\r\n".join(lines) + b"\r\n\r\n"


def _answer_bytes(status: int, kind: str, reason: str, target: str) -> bytes:
    title = {"refused": "Refused by the egress guard", "unresolved": "Name not resolved",
             "unreachable": "Destination unreachable"}.get(kind, "Bad request")
    body = (f"<!doctype html><title>{title}</title><h1>{title}</h1>"
            f"<p>{html.escape(target)}</p><p>{html.escape(reason)}</p>").encode()
    phrase = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 502: "Bad Gateway"}[status]
    header_reason = reason.encode("latin-1", "replace").replace(b"\r", b" ").replace(b"\n", b" ")
    return (f"HTTP/1.1 {status} {phrase}\r\n".encode()
            + f"{EGRESS_HEADER}: {kind}\r\n".encode()
            + f"{EGRESS_REASON_HEADER}: ".encode() + header_reason[:1000] + b"\r\n"
            + b"Content-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)


class _Side(asyncio.Protocol):
    """One socket of a relayed pair: what it reads goes to its peer, with flow control both ways."""

    transport: asyncio.Transport | None = None
    peer: _Side | None = None
    eof = False

    def forward(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)

    def pause_writing(self) -> None:  # our socket's buffer is full: stop reading from the peer
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is None or peer.transport is None:
            return False
        if peer.eof or not peer.transport.can_write_eof():
            peer.transport.close()
            return False
        peer.transport.write_eof()
        return True  # keep our writing half open for the peer's answer

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()  # flushes what is buffered first


class _Client(_Side):
    """The browser's connection to the proxy: one request head, then relayed bytes."""

    def __init__(self, proxy: EgressProxy):
        self.proxy = proxy
        self.buffer = bytearray()
        self.task: asyncio.Task | None = None
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.proxy._clients.add(self)
        self.proxy._stats.open += 1
        self.head_timer = asyncio.get_running_loop().call_later(self.proxy.head_timeout_s, self._head_late)

    def _head_late(self) -> None:
        if self.task is None and self.peer is None:
            self.answer(408, "bad_request",
                        f"no complete request head within {self.proxy.head_timeout_s:g} s", "")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
        self.proxy._clients.discard(self)
        self.proxy._stats.open -= 1
        if self.task is not None and not self.task.done():
            self.task.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.forward(data)
            return
        self.buffer += data
        if self.task is not None:
            return  # deciding: the rest waits in the buffer
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 and len(self.buffer) <= _MAX_HEAD:
            return  # the head goes on
        if end < 0 or end + 4 > _MAX_HEAD:
            self.answer(400, "bad_request", f"request head over {_MAX_HEAD} bytes", "")
            return
        head = bytes(self.buffer[: end + 4])
        del self.buffer[: end + 4]
        if self.head_timer is not None:
            self.head_timer.cancel()
        assert self.transport is not None
        self.transport.pause_reading()
        self.task = asyncio.get_running_loop().create_task(self.proxy._open(self, head))

    async def connect(self, host: str, port: int, upstream_head: bytes | None) -> None:
        """Connect to the checked address; a tunnel gets ``200``, a plain request its head."""
        loop = asyncio.get_running_loop()
        server = _Server(plain=upstream_head is not None)
        await loop.create_connection(lambda: server, host, port)
        assert self.transport is not None and server.transport is not None
        if self.transport.is_closing():
            server.transport.close()
            return
        server.peer, self.peer = self, server
        with contextlib.suppress(OSError):
            server.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if upstream_head is None:
            self.transport.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            server.transport.write(upstream_head)
        if self.buffer:
            server.transport.write(bytes(self.buffer))
            self.buffer.clear()
        self.transport.resume_reading()

    def answer(self, status: int, kind: str, reason: str, target: str) -> None:
        """Answer the request for `target` (``host:port``) ourselves and close the connection."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_answer_bytes(status, kind, reason, target))
            self.transport.close()

    def abort(self) -> None:
        for side in (self, self.peer):
            if side is not None and side.transport is not None:
                side.transport.abort()


class _Server(_Side):
    """The proxy's connection to the destination. For plain HTTP the response heads are rewritten
    to ``Connection: close`` (informational 1xx heads pass as they are)."""

    def __init__(self, *, plain: bool):
        self.plain = plain
        self.buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.plain:
            self.forward(data)
            return
        self.buffer += data
        while self.plain:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > _MAX_HEAD:
                    self.plain = False  # not HTTP we understand: relay it as it is
                    break
                return
            head, rest = bytes(self.buffer[: end + 4]), self.buffer[end + 4:]
            status = head[9:12]
            informational = status[:1] == b"1" and status != b"101"
            if not informational:
                head = _close_response_head(head)
                self.plain = False
            self.forward(head)
            self.buffer = bytearray(rest)
        if self.buffer:
            self.forward(bytes(self.buffer))
            self.buffer.clear()


def _close_response_head(head: bytes) -> bytes:
    lines = [line for line in head[:-4].split(b"\r\n")
             if line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive",
                                                                b"proxy-connection")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"
