"""Pages cannot reach the control plane: the loop's own browser server (started by `LoopServices`
with the loop's settings) lets its pages reach the site server's ``host:port`` and nothing else on
this machine: not the browser server's API, not the CPU policy server, not another local port.

The hostile pages come from a site server standing in for the one a user passes as ``sites_url``
(the loop allowlists exactly its ``host:port``); they try fetch, XHR, an image, a form, a script
navigation, a redirect and a link the agent clicks. Every attempt is refused by the browser's guards
(counted in the browser server's ``/metrics``), the other local service accepts no connection and the
servers see no request (their own counters say so).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest

from tests.webgym_rl.loops import loop_settings
from tests.webgym_rollout.fault_pages import FaultPages
from webgym_rl.loop.services import LoopServices
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.protocol import BrowserAction
from webgym_rollout.errors import NavigationRefused

pytestmark = pytest.mark.browser

# Each attempt, as the body of a script with T (the target base URL) and done() (report that the
# attempt settled, as far as the page can tell). Those marked True navigate the page away.
_ATTEMPTS: dict[str, tuple[str, bool]] = {
    "fetch": ("fetch(T + '/sessions', {method: 'POST', mode: 'no-cors', body: '{}'})"
              ".then(done, done);", False),
    "xhr": ("const x = new XMLHttpRequest(); x.open('POST', T + '/reload'); x.onloadend = done;"
            "x.send('{}');", False),
    "img": ("const i = new Image(); i.onload = done; i.onerror = done; i.src = T + '/health';", False),
    "form": ("const f = document.createElement('form'); f.method = 'post'; f.action = T + '/sessions';"
             "document.body.appendChild(f); f.submit();", True),
    "navigate": ("location.href = T + '/info';", True),
    "redirect": ("location.href = '/redirect?to=' + encodeURIComponent(T + '/metrics');", True),
}


class _HostileSite:
    """A site server on 127.0.0.1 whose pages attack a target (``/attack/NAME?to=T``), with
    ``/redirect?to=U`` (302 to U) and ``/link?to=U`` (a link to U covering (0, 0)-(300, 100)).
    `hits` records every path asked for."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # noqa: A002 - stdlib signature
                pass

            def do_GET(self) -> None:
                site.hits.append(self.path)
                parts = urlsplit(self.path)
                to = parse_qs(parts.query).get("to", [""])[0]
                if parts.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if parts.path.startswith("/attack/"):
                    name = parts.path.removeprefix("/attack/")
                    attempt = _ATTEMPTS[name][0]
                    script = (f"const T = {json.dumps(to)}; const done = () => fetch('/done?attempt={name}');"
                              f"addEventListener('load', () => setTimeout(() => {{ {attempt} }}, 0));")
                    body = f"<title>attack {name}</title><body><script>{script}</script></body>"
                elif parts.path == "/link":
                    body = (f"<title>link</title><a href={json.dumps(to)} style='position:absolute;left:0;"
                            "top:0;width:300px;height:100px;display:block'>go</a>")
                else:
                    body = "<title>ok</title>"
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> _HostileSite:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def listener() -> Iterator[FaultPages]:
    """Another local service on another loopback port (Ray, a database): counts every connection."""
    with FaultPages() as found:
        yield found


def _metric(text: str, name: str) -> float:
    """The sum of the samples of metric `name` (every label set) in a Prometheus text."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and line[len(name)] in " {")


async def _get(url: str) -> str:
    async with httpx.AsyncClient(trust_env=False) as http:
        return (await http.get(url, timeout=10)).text


async def _until(condition: Callable[[], object], what: str) -> None:
    """Poll an async `condition` (at most 200 x 50 ms): the pages report through requests."""
    for _ in range(200):
        if await condition():  # type: ignore[misc]
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"never happened: {what}")


def _services(tmp_path, chromium_path: str, **changes) -> LoopServices:
    settings = loop_settings(tmp_path, tmp_path / "model", pool={"executable_path": chromium_path,
                                                                 "contexts_per_browser": 2}, **changes)
    return LoopServices(settings)


def test_a_whole_local_host_in_the_loops_pool_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"allow_hosts: '127\.0\.0\.1' would open every port"):
        loop_settings(tmp_path, tmp_path / "model", pool={"allow_hosts": ["127.0.0.1"]})


async def test_the_loop_allowlists_its_own_site_server_and_nothing_else(tmp_path, chromium_path, listener):
    from webgym_rollout.tasks.miniwob import task_url

    with _services(tmp_path, chromium_path) as services:
        (browser_url,) = services.browser_urls()  # starts the site server first
        sites_url = services.sites_url()
        info = json.loads(await _get(f"{browser_url}/info"))
        assert info["allow_hosts"] == [sites_url.removeprefix("http://")]
        async with BrowserClient(browser_url) as client:
            session = await client.create_session(task_url(sites_url, "click-test"),
                                                  environment="miniwob:click-test", seed=1)
            for target in (f"{browser_url}/health", f"{listener.url}/"):
                with pytest.raises(NavigationRefused, match="is loopback"):
                    await session.navigate(target)
            assert (await session.page_info()).url.startswith(f"{sites_url}/miniwob/")
            await session.close()
    assert listener.connections == 0


async def test_pages_cannot_reach_the_browser_api_the_policy_server_or_another_local_port(
        tmp_path, chromium_path, tiny_qwen2_vl, listener):
    from webgym_rl.policy_server import PolicyServerSettings, running_policy_server

    served = PolicyServerSettings(model=str(tiny_qwen2_vl), port=0, served_model_name="policy")
    with _HostileSite() as site, running_policy_server(served) as policy_url, \
            _services(tmp_path, chromium_path, sites_url=site.url) as services:
        (browser_url,) = services.browser_urls()
        policy = policy_url.removesuffix("/v1")
        info = json.loads(await _get(f"{browser_url}/info"))
        assert info["allow_hosts"] == [site.url.removeprefix("http://")]  # the given sites_url, exactly
        policy_before = await _get(f"{policy}/metrics")
        browser_before = await _get(f"{browser_url}/metrics")

        async def refusals() -> float:
            text = await _get(f"{browser_url}/metrics")
            return _metric(text, "webgym_guard_refused_total") + _metric(text, 'webgym_egress_requests_total'
                                                                              '{outcome="refused"}')

        attempts = 0
        async with BrowserClient(browser_url) as client:
            session = await client.create_session(f"{site.url}/")
            for target in (browser_url, policy, listener.url):
                for name, (_, navigates) in _ATTEMPTS.items():
                    page = f"{site.url}/attack/{name}?to={quote(target)}"
                    before = await refusals()
                    await session.navigate(page)
                    if navigates:  # the page stays where it was: the navigation was answered 204
                        await _until(lambda before=before: _more(refusals, before), f"{name} to {target}")
                        assert (await session.page_info()).url == page
                    else:
                        marker = f"/done?attempt={name}"
                        await _until(lambda marker=marker: _hit(site, marker), f"{name} to {target} settled")
                        site.hits.remove(marker)
                        assert await refusals() > before, f"{name} to {target} was not refused"
                    attempts += 1
                # Through the API: a redirect from the allowed site, and the target itself.
                for url in (f"{site.url}/redirect?to={quote(target + '/health')}", f"{target}/health"):
                    with pytest.raises(NavigationRefused, match="is loopback"):
                        await session.navigate(url)
                # A link the agent clicks.
                link = f"{site.url}/link?to={quote(target + '/info')}"
                await session.navigate(link)
                clicked = await session.execute(BrowserAction.click(150, 50))
                assert not clicked.ok and "is loopback" in clicked.error
                assert (clicked.url, clicked.title) == (link, "link")
                attempts += 1
            await session.close()
        policy_after = await _get(f"{policy}/metrics")
        browser_after = await _get(f"{browser_url}/metrics")

    assert listener.connections == 0
    # The policy server received our two /metrics reads and nothing else.
    requests = "webgym_policy_http_requests_total"
    assert _metric(policy_after, requests) == _metric(policy_before, requests) + 1
    assert _metric(policy_after, "webgym_policy_callers_refused_total") == 0
    assert _metric(policy_after, "webgym_policy_reloads_total") == 0
    # The browser server created our one session only, and no request reached it from a page (one
    # would carry Sec-Fetch-Site or Origin and be counted as refused).
    assert _metric(browser_after, "webgym_sessions_created_total") == 1
    assert _metric(browser_after, "webgym_callers_refused_total") == 0
    refused = _metric(browser_after, "webgym_guard_refused_total") + _metric(
        browser_after, 'webgym_egress_requests_total{outcome="refused"}')
    before = _metric(browser_before, "webgym_guard_refused_total") + _metric(
        browser_before, 'webgym_egress_requests_total{outcome="refused"}')
    assert refused - before >= attempts


async def _more(count: Callable[[], object], before: float) -> bool:
    return await count() > before  # type: ignore[misc]


async def _hit(site: _HostileSite, path: str) -> bool:
    return path in site.hits
