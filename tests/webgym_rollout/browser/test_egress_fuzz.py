"""The egress proxy fed malformed requests over raw sockets: garbage request lines, missing,
duplicate and huge headers, CONNECT without a port or with a bad one, IPv6 forms, NUL bytes,
absolute-form URLs with odd schemes and userinfo, truncated and endless heads. Each gets a 4xx or
a closed connection (never a forward), nothing reaches the forbidden listeners on 127.0.0.2 and
127.0.0.3 or a forbidden port of 127.0.0.1, and the proxy keeps serving the one allowed site.

The proxy runs on its own thread (as in the browser pool); the tests talk to it with blocking
sockets, so hypothesis drives them directly. Its guard is wrapped so that it never connects outside
127.0.0.0/8, whatever a generated request names (network safety)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webgym_rollout.browser import egress
from webgym_rollout.browser.egress import (
    EGRESS_HEADER,
    EgressProxy,
    MappingResolver,
    ResolutionFailed,
    system_resolver,
)
from webgym_rollout.browser.guard import IPAddress, UrlGuard

_ANSWERED = (400, 403, 408, 502)
"""What the proxy answers a request it does not forward."""


class _Listener(socketserver.ThreadingTCPServer):
    """A TCP server on `host` that counts connections; answers one HTTP 200 per connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str):
        self.connections = 0
        listener = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                listener.connections += 1
                self.request.settimeout(5)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = self.request.recv(65536)
                        if not chunk:
                            return
                        data += chunk
                    self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                         b"Connection: close\r\n\r\nok")
                except OSError:
                    pass

        super().__init__((host, 0), Handler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _LoopbackOnly(UrlGuard):
    """The real guard, plus a test-only net: never a connection outside 127.0.0.0/8 and ::1."""

    def connect_reason(self, host: str, port: int, address: IPAddress) -> str | None:
        if not address.is_loopback and address != ipaddress.ip_address("::ffff:127.0.0.1"):
            return f"test: {address} is not loopback"
        return super().connect_reason(host, port, address)


class _Setup:
    def __init__(self) -> None:
        self.site = _Listener("127.0.0.1")
        self.forbidden = [_Listener("127.0.0.2"), _Listener("127.0.0.3"), _Listener("127.0.0.1")]
        resolver = MappingResolver({"allowed.test": "127.0.0.1", "forbidden.test": "127.0.0.2",
                                    "both.test": ["127.0.0.3", "127.0.0.1"]})
        self.proxy = EgressProxy(_LoopbackOnly([f"127.0.0.1:{self.site.port}"]), resolver,
                                 connect_timeout_s=2, head_timeout_s=30)
        asyncio.run(self.proxy.start())

    @property
    def forbidden_connections(self) -> int:
        return sum(listener.connections for listener in self.forbidden)

    def close(self) -> None:
        asyncio.run(self.proxy.close())
        for listener in (self.site, *self.forbidden):
            listener.close()


@pytest.fixture(scope="module")
def setup() -> Iterator[_Setup]:
    found = _Setup()
    yield found
    found.close()


def _exchange(port: int, data: bytes, *, eof: bool = True,
              timeout: float = 10.0) -> tuple[int | None, bytes]:
    """Send `data` to the proxy (then end our side unless `eof` is False); (status or None when the
    proxy closed without an answer, everything it sent)."""
    chunks = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if eof:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the proxy answered and closed before it read everything
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    reply = b"".join(chunks)
    status = int(reply[9:12]) if reply.startswith(b"HTTP/1.1 ") and reply[9:12].isdigit() else None
    return status, reply


def _still_serving(setup: _Setup) -> None:
    """The allowed site still gets through, and no connection of the proxy is left open."""
    before = setup.site.connections
    request = f"GET http://127.0.0.1:{setup.site.port}/ HTTP/1.1\r\n\r\n"
    status, reply = _exchange(setup.proxy.port, request.encode())
    assert (status, reply.endswith(b"ok"), setup.site.connections) == (200, True, before + 1)
    for _ in range(200):
        if setup.proxy.stats().open == 0:
            break
        time.sleep(0.02)
    assert setup.proxy.stats().open == 0


def _forbidden_targets(setup: _Setup) -> list[str]:
    """host:port spellings of the forbidden listeners (and of 127.0.0.1's forbidden port)."""
    two, three, one = (listener.port for listener in setup.forbidden)
    return [f"127.0.0.2:{two}", f"[::ffff:127.0.0.2]:{two}", f"[::ffff:7f00:2]:{two}", f"2130706434:{two}",
            f"0x7f.2:{two}", f"0177.0.0.2:{two}", f"127.2:{two}", f"127.0.0.2.:{two}",
            f"forbidden.test:{two}", f"FORBIDDEN.TEST.:{two}", f"127.0.0.3:{three}", f"both.test:{three}",
            f"allowed.test:{one}",
            f"127.0.0.1:{one}", f"localhost:{one}", f"[::1]:{one}", f"[64:ff9b::7f00:2]:{two}",
            f"[0:0:0:0:0:ffff:7f00:2]:{two}", f"127.0.0.1:{setup.proxy.port}"]


_WEIRD_PORTS = ["", ":", ":0", ":65536", ":-1", ":+80", ":\xb2", ": 80", ":80 ", ":0x50",
                ":99999999999999999999", ":8O"]
_SCHEMES = ["http", "HTTP", "https", "ftp", "ws", "file", "", "javascript", "http:", "h\x00ttp"]


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_malformed_requests_get_a_4xx_or_a_close_and_never_reach_a_forbidden_host(setup, data):
    forbidden = data.draw(st.sampled_from(_forbidden_targets(setup)), "target")
    host = forbidden.rsplit(":", 1)[0]
    target = data.draw(st.sampled_from([
        forbidden,  # CONNECT host:port, or an absolute URL to it
        host,  # no port
        host + data.draw(st.sampled_from(_WEIRD_PORTS), "port"),
        f"{host}\x00.allowed.test:{setup.site.port}",
        f"127.0.0.1:{setup.site.port}@{forbidden}",
        f"127.0.0.1:{setup.site.port}\\@{forbidden}",
        forbidden.replace(".", "%2e"),
        data.draw(st.text(alphabet="0123456789abcdefx.:[]%@-_\x00 ", max_size=40), "random host"),
    ]), "authority")
    method = data.draw(st.sampled_from(["GET", "CONNECT", "POST", "connect", "G\x00T", "", "GET GET"]),
                       "method")
    scheme = data.draw(st.sampled_from(_SCHEMES), "scheme")
    request_target = target if method.upper() == "CONNECT" else f"{scheme}://{target}/path"
    version = data.draw(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "http/1.1", "", "HTTP/1.1 x"]))
    headers = data.draw(st.lists(st.sampled_from([
        f"Host: {forbidden}", f"Host: 127.0.0.1:{setup.site.port}", "Host:", "Host", "X: " + "y" * 70_000,
        "Proxy-Connection: keep-alive", "Content-Length: 5", "Content-Length: -1",
        "Transfer-Encoding: chunked", " folded", "\x00: \x00", "Connection: upgrade", "Upgrade: websocket",
    ]), max_size=4), "headers")
    ending = data.draw(st.sampled_from(["\r\n\r\n", "\r\n\r\nhello", "\n\n", "\r\n", ""]), "ending")
    raw = "\r\n".join([f"{method} {request_target} {version}", *headers]) + ending
    before = setup.forbidden_connections
    status, reply = _exchange(setup.proxy.port, raw.encode("latin-1"))
    assert setup.forbidden_connections == before, raw[:300]
    assert status is None or status in _ANSWERED, (raw[:300], reply[:300])
    if status is not None:
        assert EGRESS_HEADER.encode() in reply.lower()


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(garbage=st.binary(max_size=600), ending=st.sampled_from([b"\r\n\r\n", b"", b"\r\n"]))
def test_garbage_bytes_get_a_4xx_or_a_close(setup, garbage, ending):
    before = setup.forbidden_connections + setup.site.connections
    status, _ = _exchange(setup.proxy.port, garbage + ending)
    assert status is None or status in _ANSWERED
    assert setup.forbidden_connections + setup.site.connections == before


@pytest.mark.parametrize(("request_head", "status", "reason"), [
    ("CONNECT 127.0.0.2 HTTP/1.1\r\n\r\n", 403, "127.0.0.2 is loopback"),  # no port: 443
    ("CONNECT 127.0.0.2: HTTP/1.1\r\n\r\n", 400, "empty port"),
    ("CONNECT 127.0.0.2:0 HTTP/1.1\r\n\r\n", 400, "bad port"),
    ("CONNECT 127.0.0.2:65536 HTTP/1.1\r\n\r\n", 400, "bad port"),
    ("CONNECT 127.0.0.2:\xb2 HTTP/1.1\r\n\r\n", 400, "bad port"),  # a digit to str.isdigit, not to int()
    ("CONNECT ::1:80 HTTP/1.1\r\n\r\n", 400, "needs brackets"),
    ("CONNECT [::1:80 HTTP/1.1\r\n\r\n", 400, "bad IPv6"),
    ("CONNECT [fe80::1%25eth0]:80 HTTP/1.1\r\n\r\n", 400, "no zone"),
    ("CONNECT [127.0.0.2]:80 HTTP/1.1\r\n\r\n", 400, "IPv6"),
    ("CONNECT [::1]:80 HTTP/1.1\r\n\r\n", 403, "::1 is loopback"),
    ("CONNECT 127.0.0.2\x00.allowed.test:80 HTTP/1.1\r\n\r\n", 400, "not a host name"),
    ("CONNECT a..b.test:80 HTTP/1.1\r\n\r\n", 400, "not a host name"),
    ("CONNECT " + "x" * 64 + ".test:80 HTTP/1.1\r\n\r\n", 400, "not a host name"),
    ("CONNECT \xe9t\xe9.test:80 HTTP/1.1\r\n\r\n", 400, "not a host name"),
    ("GET ftp://127.0.0.1/ HTTP/1.1\r\n\r\n", 400, "absolute http:// URL"),
    ("GET https://127.0.0.1/ HTTP/1.1\r\n\r\n", 400, "absolute http:// URL"),
    ("GET http:///path HTTP/1.1\r\n\r\n", 400, "absolute http:// URL"),
    ("GET /path HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n", 400, "absolute http:// URL"),
    ("GET http://[::1/ HTTP/1.1\r\n\r\n", 400, "not a proxy request"),
    ("GET  http://127.0.0.2/ HTTP/1.1\r\n\r\n", 400, "bad request line"),
    ("GET http://127.0.0.2/ HTTP/2.0\r\n\r\n", 400, "bad request line"),
    ("\r\n\r\n", 400, "bad request line"),
    ("GET http://" + "a" * 70_000 + "/ HTTP/1.1\r\n\r\n", 400, "over 65536 bytes"),
    ("GET http://127.0.0.1/ HTTP/1.1\r\nX: " + "y" * 70_000 + "\r\n\r\n", 400, "over 65536 bytes"),
    ("GET http://127.0.0.1/ HTTP/1.1\r\n" + "X: y\r\n" * 20_000, 400, "over 65536 bytes"),  # never ends
])
def test_hand_made_malformed_requests(setup, request_head, status, reason):
    got, reply = _exchange(setup.proxy.port, request_head.encode("latin-1"))
    if got is None and "over 65536" in reason:
        pass  # answered while we were still sending: the close may reset the answer away
    else:
        assert got == status, reply[:300]
        assert reason.encode() in reply
    _still_serving(setup)


def test_a_truncated_head_is_closed_unanswered_and_a_stalled_one_times_out(setup):
    site = f"127.0.0.1:{setup.site.port}"
    before = setup.site.connections
    truncated = f"GET http://{site}/ HTTP/1.1\r\nHost: {site}\r\n"
    assert _exchange(setup.proxy.port, truncated.encode()) == (None, b"")
    setup.proxy.head_timeout_s = 0.3  # read when a connection opens
    try:
        for stalled in (f"GET http://{site}/ HTTP/1.1\r\n", "", f"GET http://{site}/ HTTP/1.1\n\n"):
            status, reply = _exchange(setup.proxy.port, stalled.encode(), eof=False)
            assert status == 408 and b"no complete request head" in reply
    finally:
        setup.proxy.head_timeout_s = 30
    assert setup.site.connections == before
    _still_serving(setup)


def test_what_follows_an_allowed_request_never_reaches_a_forbidden_host(setup):
    """A second request pipelined behind an allowed one goes to the allowed site (as its bytes), and
    a Host header or userinfo naming a forbidden host changes nothing."""
    site = f"127.0.0.1:{setup.site.port}"
    two = setup.forbidden[0].port
    before = setup.forbidden_connections
    pipelined = (f"GET http://{site}/ HTTP/1.1\r\nHost: {site}\r\n\r\n"
                 f"GET http://127.0.0.2:{two}/ HTTP/1.1\r\nHost: 127.0.0.2:{two}\r\n\r\n")
    assert _exchange(setup.proxy.port, pipelined.encode())[0] == 200
    lying = f"GET http://{site}/ HTTP/1.1\r\nHost: 127.0.0.2:{two}\r\nHost: 127.0.0.3\r\n\r\n"
    assert _exchange(setup.proxy.port, lying.encode())[0] == 200
    for userinfo in (f"http://{site}@127.0.0.2:{two}/", f"http://{site}\\@127.0.0.2:{two}/",
                     f"http://127.0.0.2:{two}#@{site}/"):
        status, reply = _exchange(setup.proxy.port, f"GET {userinfo} HTTP/1.1\r\n\r\n".encode())
        assert status in (400, 403), reply[:200]
    tunnel = f"CONNECT {site} HTTP/1.1\r\n\r\nGET http://127.0.0.2:{two}/ HTTP/1.1\r\n\r\n"
    status, reply = _exchange(setup.proxy.port, tunnel.encode())
    assert status == 200 and reply.endswith(b"ok")  # the tunnel's bytes went to the site, which answered
    assert setup.forbidden_connections == before
    _still_serving(setup)


def test_a_failure_nobody_foresaw_closes_the_connection_instead_of_leaving_it_hanging():
    async def broken(host: str, port: int):
        raise RuntimeError("a resolver bug")

    proxy = EgressProxy(UrlGuard(), broken)
    asyncio.run(proxy.start())
    try:
        status, reply = _exchange(proxy.port, b"GET http://somewhere.test/ HTTP/1.1\r\n\r\n")
        assert (status, reply) == (None, b"")  # closed at once (a hang would time the read out)
        assert _exchange(proxy.port, b"GET http://127.0.0.2:9/ HTTP/1.1\r\n\r\n")[0] == 403  # still serving
    finally:
        asyncio.run(proxy.close())


@pytest.mark.parametrize("name", ["a..b.test", "x" * 64 + ".test", "."])
async def test_names_the_idna_codec_refuses_are_resolution_failures(name):
    """``getaddrinfo`` raises UnicodeError (not gaierror) for these, before any lookup. (The real
    resolver, imported before conftest swaps the module's for one that fails closed.)"""
    assert system_resolver is not egress.system_resolver
    with pytest.raises(ResolutionFailed, match="cannot resolve .*idna"):  # refused by the codec
        await system_resolver(name, 80)
