"""The egress proxy: forwarding, tunnels, refusals and name resolution through an injected resolver
(never real DNS), first with a plain client, then as the only guard of a real Chromium.

Forbidden destinations are listeners on other loopback addresses (127.0.0.2, 127.0.0.3) that count
every connection they accept: "refused" means they counted none.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import ipaddress
import threading
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import pytest_asyncio

from tests.conftest import free_port
from tests.webgym_rollout.fault_pages import ESCAPE_ROUTES, FaultPages, UdpListener, until
from webgym_rollout.browser.egress import (
    EGRESS_HEADER,
    EgressProxy,
    MappingResolver,
    ResolutionFailed,
    system_resolver,
)
from webgym_rollout.browser.guard import UrlGuard
from webgym_rollout.browser.processes import CHROMIUM_ARGS


class _Recorder:
    """A TCP server on `host` that records what each connection sent and answers like HTTP/1.1
    (or echoes, for a tunnel test); counts connections."""

    def __init__(self, host: str):
        self.host = host
        self.heads: list[bytes] = []
        self.connections = 0
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    async def __aenter__(self) -> _Recorder:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            if head.startswith(b"ECHO"):  # a tunnelled test protocol: echo one line back, upper-cased
                writer.write(head.upper())
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello")
            await writer.drain()
            if b"connection: close" not in head.lower():
                await reader.read()  # until the proxy closes its side
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _ask(proxy: EgressProxy, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one request to the proxy; (status, headers, what followed the head until EOF)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = (line.partition(":") for line in lines[1:] if line)
    headers = {name.strip().lower(): value.strip() for name, _, value in fields}
    rest = b"" if request.startswith(b"CONNECT") and b" 200 " in head[:13] else await reader.read()
    writer.close()
    return int(lines[0].split()[1]), headers, rest


@pytest_asyncio.fixture(loop_scope="session")
async def proxy():
    """A proxy whose guard opens nothing; a test allowlists the host:ports it needs (`_allow`)."""
    resolver = MappingResolver({"intranet.test": "127.0.0.2", "rebind.test": "127.0.0.1",
                                "allowed.test": "127.0.0.3", "bare.test": "127.0.0.2"})
    egress = EgressProxy(UrlGuard(), resolver, connect_timeout_s=2)
    await egress.start()
    yield egress
    await egress.close()


def _allow(proxy: EgressProxy, *entries: str) -> None:
    """Allowlist `entries` (``host:port``, or a bare name) for the next requests."""
    proxy.guard = UrlGuard(entries)


async def test_plain_http_is_forwarded_in_origin_form_one_request_per_connection(proxy):
    async with _Recorder("127.0.0.1") as site:
        _allow(proxy, f"127.0.0.1:{site.port}")
        status, headers, body = await _ask(proxy, (
            f"GET http://127.0.0.1:{site.port}/path?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{site.port}\r\n"
            "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\n"
        ).encode())
        assert status == 200 and body == b"hello" and EGRESS_HEADER not in headers
        assert headers["connection"] == "close"  # the browser will not reuse it for another host
        sent = site.heads[0].decode()
        assert sent.startswith("GET /path?q=1 HTTP/1.1\r\n") and "Accept: */*" in sent
        assert "Connection: close" in sent and "Proxy-" not in sent
    outcome = proxy.outcome(f"http://127.0.0.1:{site.port}/other")
    assert outcome is not None and outcome.kind == "forwarded" and outcome.reason == "127.0.0.1"


async def test_connect_tunnels_bytes_without_looking_at_them(proxy):
    async with _Recorder("127.0.0.1") as site:
        _allow(proxy, f"127.0.0.1:{site.port}")
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT 127.0.0.1:{site.port} HTTP/1.1\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        writer.write(b"ECHO through the tunnel\r\n\r\n")
        assert await reader.readuntil(b"\r\n\r\n") == b"ECHO THROUGH THE TUNNEL\r\n\r\n"
        writer.close()
    assert site.connections == 1


@pytest.mark.parametrize(("target", "kind", "why"), [
    ("127.0.0.2:{port}", "refused", "address 127.0.0.2 is loopback"),
    ("intranet.test:{port}", "refused", "intranet.test resolves to 127.0.0.2"),
    ("rebind.test:{port}", "refused", "rebind.test resolves to 127.0.0.1"),  # allowlisted address, other name
    ("bare.test:{port}", "refused", "has no port: a whole host never opens this machine"),
    ("localhost:{port}", "refused", "names a local machine"),
    ("nowhere.test:{port}", "unresolved", "not in the test resolver's mapping"),
])
async def test_refusals_are_answered_and_never_connect(proxy, target, kind, why):
    async with _Recorder("127.0.0.2") as forbidden:
        host_port = target.format(port=forbidden.port)
        # 127.0.0.1 on that port is allowlisted, but only as spelled; bare.test by name, with no port.
        _allow(proxy, f"127.0.0.1:{forbidden.port}", "bare.test")
        for request in (f"CONNECT {host_port} HTTP/1.1\r\nHost: {host_port}\r\n\r\n",
                        f"GET http://{host_port}/x HTTP/1.1\r\nHost: {host_port}\r\n\r\n"):
            status, headers, body = await _ask(proxy, request.encode())
            assert status == (403 if kind == "refused" else 502)
            assert headers[EGRESS_HEADER] == kind and why in headers["x-webgym-egress-reason"]
            assert html.escape(why).encode() in body
        assert forbidden.connections == 0
    outcome = proxy.outcome(f"https://{host_port}/")
    assert outcome is not None and outcome.kind == kind and why in outcome.reason


async def test_an_allowlisted_name_goes_where_it_resolves_and_only_there(proxy):
    async with _Recorder("127.0.0.3") as intranet:
        _allow(proxy, f"allowed.test:{intranet.port}")
        request = f"GET http://allowed.test:{intranet.port}/ HTTP/1.1\r\n\r\n"
        status, _, body = await _ask(proxy, request.encode())
        assert (status, body, intranet.connections) == (200, b"hello", 1)
    assert proxy.resolver.asked.count("allowed.test") == 1  # one lookup, the address it checked


def _proxy_threads() -> int:
    return sum(t.name == "webgym-egress-proxy" and t.is_alive() for t in threading.enumerate())


async def test_only_the_allowlisted_port_of_a_host():
    threads = _proxy_threads()
    async with _Recorder("127.0.0.3") as open_port, _Recorder("127.0.0.3") as other_port:
        egress = EgressProxy(UrlGuard([f"127.0.0.3:{open_port.port}"]), MappingResolver({}))
        await egress.start()
        assert _proxy_threads() == threads + 1
        try:
            statuses = [(await _ask(egress, f"GET http://127.0.0.3:{port}/ HTTP/1.1\r\n\r\n".encode()))[0]
                        for port in (open_port.port, other_port.port)]
        finally:
            await egress.close()
    assert statuses == [200, 403] and (open_port.connections, other_port.connections) == (1, 0)
    assert _proxy_threads() == threads  # closing stops the proxy's thread


async def test_the_server_port_and_the_proxy_itself_are_never_destinations(proxy):
    async with _Recorder("127.0.0.1") as api:
        proxy.protect_port(api.port)
        _allow(proxy, f"127.0.0.1:{api.port}", f"127.0.0.1:{proxy.port}")
        for port in (api.port, proxy.port):  # both allowlisted, yet never destinations
            status, headers, _ = await _ask(proxy, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode())
            assert status == 403 and "browser server's own" in headers["x-webgym-egress-reason"]
        assert api.connections == 0


async def test_unreachable_and_malformed_requests(proxy):
    closed = free_port()
    _allow(proxy, f"127.0.0.1:{closed}")
    status, headers, _ = await _ask(proxy, f"GET http://127.0.0.1:{closed}/ HTTP/1.1\r\n\r\n".encode())
    assert status == 502 and headers[EGRESS_HEADER] == "unreachable"
    assert f"cannot connect to 127.0.0.1:{closed}" in headers["x-webgym-egress-reason"]
    status, headers, _ = await _ask(proxy, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not a proxy request
    assert status == 400
    stats = proxy.stats()
    assert stats.failed >= 1 and stats.cpu_s > 0


async def test_the_default_resolver_reads_addresses_and_the_tests_one_fails_closed():
    # An IP literal needs no lookup: getaddrinfo only parses it.
    assert await system_resolver("127.0.0.1", 80) == [ipaddress.ip_address("127.0.0.1")]
    egress = EgressProxy(UrlGuard())
    assert isinstance(egress.resolver, MappingResolver)  # conftest: no test does real DNS
    with pytest.raises(ResolutionFailed):
        await egress.resolver("example.com", 443)


def test_the_mapping_resolver_refuses_what_is_not_an_address():
    with pytest.raises(ValueError, match="intranet.test"):
        MappingResolver({"intranet.test": "not-an-address"})


# --------------------------------------------------------------------------- the proxy alone, on Chromium


@contextlib.contextmanager
def _listeners() -> Iterator[tuple[FaultPages, FaultPages, UdpListener]]:
    with FaultPages(host="127.0.0.2") as forbidden, FaultPages() as pages, UdpListener("127.0.0.2") as udp:
        yield forbidden, pages, udp


@pytest.fixture(scope="module")
def listeners():
    with _listeners() as found:
        yield found


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def proxied_browser(chromium_path, listeners):
    """A Chromium with nothing but the egress proxy in its way: no request interception, no
    same-tab script, service workers allowed; the pages' host:port is allowlisted."""
    from playwright.async_api import async_playwright

    pages = listeners[1]
    egress = EgressProxy(UrlGuard([pages.url.removeprefix("http://")]),
                         MappingResolver({"intranet.test": "127.0.0.2"}))
    await egress.start()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_path,
                                                   args=[*CHROMIUM_ARGS, *egress.chromium_args])
        try:
            yield browser, egress
        finally:
            await browser.close()
    await egress.close()



@pytest.mark.browser
@pytest.mark.parametrize("route", list(ESCAPE_ROUTES))
async def test_no_way_out_of_chromium_passes_the_proxy(proxied_browser, listeners, route):
    browser, egress = proxied_browser
    forbidden, pages, udp = listeners
    target = f"http://{udp.host}:{udp.port}" if route == "webrtc" else forbidden.url
    if route == "fetch":  # a name the resolver maps to the forbidden address
        target = forbidden.url.replace("127.0.0.2", "intranet.test")
    context = await browser.new_context()
    try:
        refused = egress.stats().refused
        page = await context.new_page()
        await page.goto(f"{pages.url}/escape/{route}?to={quote(target)}")
        await until(lambda: f"/done?route={route}" in pages.hits, f"the {route} page settled")
        if route != "webrtc":  # UDP never reaches an HTTP proxy: Chromium's WebRTC policy stops it
            await until(lambda: egress.stats().refused > refused, f"the proxy refused the {route} request")
    finally:
        await context.close()
    assert (forbidden.connections, forbidden.hits, udp.datagrams) == (0, [], 0)


@pytest.mark.browser
async def test_without_the_proxy_the_same_pages_do_get_out(chromium_path):
    """The control: the pages above really try. The same browser without the proxy reaches the
    listeners (WebRTC's UDP included)."""
    from playwright.async_api import async_playwright

    with _listeners() as (forbidden, pages, udp):
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium_path,
                                                       args=list(CHROMIUM_ARGS))
            try:
                context = await browser.new_context()
                page = await context.new_page()
                for route in ("shared-worker", "worker-websocket", "form-popup"):
                    before = forbidden.connections
                    await page.goto(f"{pages.url}/escape/{route}?to={quote(forbidden.url)}")
                    await until(lambda before=before: forbidden.connections > before,
                                 f"{route} reached the listener")
                webrtc = f"http://{udp.host}:{udp.port}"
                await page.goto(f"{pages.url}/escape/webrtc?to={quote(webrtc)}")
                await until(lambda: udp.datagrams > 0, "a STUN packet reached the UDP listener")
            finally:
                await browser.close()
    assert {"/shared", "/worker-websocket", "/form-popup"} <= set(forbidden.hits)

