"""Both guards of the browser pool on real Chromium: the URL guard on every request of a page (and
navigation tracking) in front, the egress proxy behind it; popups closed with their session.

The forbidden hosts are other loopback addresses that are never allowlisted (127.0.0.2, and
127.0.0.3 but for one port) with listeners that count every connection: the tests prove that
nothing reaches them, whatever way the page tries (navigation, redirect hop, image, link, popups,
every kind of worker, WebSockets, beacons, prefetch, WebRTC, a name that resolves to them). Names
resolve through the test's own mapping, never DNS.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import pytest_asyncio

from tests.support.prometheus import sample
from tests.webgym_rollout.fault_pages import ESCAPE_ROUTES, FaultPages, UdpListener, until
from webgym_rollout.browser.egress import MappingResolver
from webgym_rollout.browser.pool import BrowserPool, PoolSettings
from webgym_rollout.browser.protocol import BrowserAction, CreateSessionRequest, PageInfoRequest
from webgym_rollout.errors import NavigationRefused

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def forbidden() -> Iterator[FaultPages]:
    """A server on 127.0.0.2 (loopback, never allowlisted) that records every request it gets."""
    with FaultPages(host="127.0.0.2") as pages:
        yield pages


@pytest.fixture(scope="module")
def intranet() -> Iterator[tuple[FaultPages, FaultPages]]:
    """Two servers on 127.0.0.3: the first one's port is allowlisted, the second one's is not."""
    with FaultPages(host="127.0.0.3") as allowed, FaultPages(host="127.0.0.3") as other:
        yield allowed, other


@pytest.fixture(scope="module")
def udp() -> Iterator[UdpListener]:
    with UdpListener("127.0.0.2") as listener:
        yield listener


@pytest.fixture(scope="module")
def faults_server(forbidden) -> Iterator[FaultPages]:
    with FaultPages(forbidden_base=forbidden.url) as pages:
        yield pages


@pytest.fixture(scope="module")
def faults(faults_server) -> str:
    return faults_server.url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pool(chromium_path, intranet, faults_server):
    allowed, _ = intranet
    settings = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=4,
                            allow_hosts=(faults_server.url.removeprefix("http://"),
                                         allowed.url.removeprefix("http://")),
                            navigate_timeout_s=3.0, action_timeout_s=3.0)
    async with BrowserPool(settings, resolver=MappingResolver({"intranet.test": "127.0.0.2"})) as pool:
        yield pool



async def test_guard_refuses_private_targets_before_sending(pool, faults, forbidden):
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    for url in (
        "file:///etc/passwd",
        f"{forbidden.url}/direct",
        "http://169.254.169.254/latest/meta-data",
        "chrome://settings",
        "data:text/html,<p>x</p>",
    ):
        with pytest.raises(NavigationRefused) as caught:
            await pool.navigate(sid, url)
        assert caught.value.url == url and url in str(caught.value)

    with pytest.raises(NavigationRefused) as caught:  # refused at the second hop of a redirect
        await pool.navigate(sid, f"{faults}/redirect-private")
    assert caught.value.url == f"{forbidden.url}/secret"

    state = await pool.navigate(sid, f"{faults}/private-img")
    assert state.title == "img"
    await pool.navigate(sid, f"{faults}/private-link")
    clicked = await pool.execute(sid, BrowserAction.click(150, 50))
    assert not clicked.ok and "refused" in clicked.error
    assert clicked.url == f"{faults}/private-link"  # the refused navigation left the page in place
    await pool.navigate(sid, f"{faults}/private-ws")  # a WebSocket and a worker's fetch
    for _ in range(50):
        if (await pool.page_info(sid, PageInfoRequest())).title == "both refused":
            break
        await asyncio.sleep(0.1)
    assert (await pool.page_info(sid, PageInfoRequest())).title == "both refused"
    assert forbidden.hits == []  # nothing ever reached 127.0.0.2
    await pool.close_session(sid)


async def test_a_popup_an_action_opens_is_closed_and_reported_on_that_action(pool, faults):
    """A form with target=_blank, submitted by the click's handler, opens a new page despite the
    same-tab script: the server closes it at once and the click's result names it."""
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/popup-form"))).session_id
    result = await pool.execute(sid, BrowserAction.click(150, 50))
    assert result.ok and result.popups == [f"{faults}/ok?"]
    assert (result.url, result.title) == (f"{faults}/popup-form", "popup form")  # the session's page stays
    assert len(pool._sessions[sid].context.pages) == 1
    await pool.close_session(sid)


@pytest.mark.parametrize("page", ["popup-link", "popup-open"])
async def test_popups_open_in_the_same_tab(pool, faults, page):
    """A new tab would escape the page's request interception: it opens in the page's own tab."""
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/{page}"))).session_id
    result = await pool.execute(sid, BrowserAction.click(150, 50))
    assert result.ok, result.error
    assert (result.url, result.title) == (f"{faults}/ok", "ok")  # the click waited for the navigation
    assert len(pool._sessions[sid].context.pages) == 1
    await pool.close_session(sid)


async def test_an_action_waits_only_for_the_navigation_it_started(pool, faults):
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/private-link"))).session_id
    tracker = pool._sessions[sid].navigation
    commits = tracker.commits
    still = await pool.execute(sid, BrowserAction.click(600, 400))  # on nothing: no navigation
    assert still.ok and tracker.commits == commits and still.title == "link"
    await pool.navigate(sid, f"{faults}/popup-link")
    moved = await pool.execute(sid, BrowserAction.click(150, 50))
    assert moved.ok and tracker.commits > commits and moved.title == "ok"
    assert tracker.origins == {faults}  # the origins whose storage is cleared when the context is reused
    await pool.close_session(sid)


def _refusals(pool: BrowserPool, sid: str) -> int:
    """Requests refused so far for the session: by its page's URL guard, or by the egress proxy."""
    return pool._sessions[sid].navigation.refusals + pool.egress.stats().refused


@pytest.mark.parametrize("route", list(ESCAPE_ROUTES))
async def test_no_way_out_reaches_a_forbidden_listener(pool, faults_server, forbidden, intranet, udp, route):
    """Each page tries one way out; whichever guard stops it, nothing arrives."""
    faults = faults_server.url
    target = f"http://{udp.host}:{udp.port}" if route == "webrtc" else forbidden.url
    before = pool.egress.stats().refused  # and the new session's page has refused nothing yet
    created = await pool.create(CreateSessionRequest(start_url=f"{faults}/escape/{route}?to={quote(target)}"))
    sid = created.session_id
    await until(lambda: f"/done?route={route}" in faults_server.hits, f"the {route} page settled")
    if route not in ("webrtc", "service-worker"):  # UDP is stopped by Chromium's policy; service
        # workers by the context (their registration fails): neither sends a request to refuse
        await until(lambda: _refusals(pool, sid) > before, f"the {route} request was refused")
    if route == "form-popup":  # a new page opened despite the same-tab script (which keeps
        # window.open and links, in frames too, in their tab): closed at once, reported by the next action
        await until(lambda: pool._sessions[sid].tabs.popups, "the popup was closed")
        assert (await pool.execute(sid, BrowserAction.wait_for(0))).popups == [f"{forbidden.url}/{route}"]
    else:
        assert (await pool.execute(sid, BrowserAction.wait_for(0))).popups == []
    await pool.close_session(sid)
    assert (forbidden.connections, forbidden.hits, udp.datagrams) == (0, [], 0)
    assert intranet[0].connections == 0 and intranet[1].connections == 0


async def test_a_name_resolving_to_a_forbidden_address_is_refused_and_the_page_stays(
        pool, faults_server, forbidden):
    faults = faults_server.url
    port = forbidden.url.rsplit(":", 1)[1]
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    for url in (f"http://intranet.test:{port}/secret", f"https://intranet.test:{port}/secret"):
        with pytest.raises(NavigationRefused) as caught:
            await pool.navigate(sid, url)
        assert caught.value.url == url and "intranet.test resolves to 127.0.0.2" in str(caught.value)
        info = await pool.page_info(sid, PageInfoRequest())
        assert (info.url, info.title) == (f"{faults}/ok", "ok")  # the page shown is the one before
    # The same name from a page: a fetch, and a link the agent clicks.
    await pool.navigate(sid, f"{faults}/escape/fetch?to={quote(f'http://intranet.test:{port}')}")
    await until(lambda: "/done?route=fetch" in faults_server.hits, "the fetch settled")
    link = f"{faults}/link?to={quote(f'http://intranet.test:{port}/link')}"
    await pool.navigate(sid, link)
    clicked = await pool.execute(sid, BrowserAction.click(150, 50))
    assert not clicked.ok and "intranet.test resolves to 127.0.0.2" in clicked.error
    assert (clicked.url, clicked.title) == (link, "link")  # back on the page that was shown
    await pool.close_session(sid)
    assert (forbidden.connections, forbidden.hits) == (0, [])


async def test_an_allowlisted_host_is_open_on_its_port_only(pool, faults_server, intranet):
    allowed, other = intranet
    faults = faults_server.url
    sid = (await pool.create(CreateSessionRequest(start_url=f"{allowed.url}/ok"))).session_id
    assert (await pool.page_info(sid, PageInfoRequest())).title == "ok"
    with pytest.raises(NavigationRefused):
        await pool.navigate(sid, f"{other.url}/ok")
    await pool.navigate(sid, f"{faults}/escape/fetch?to={quote(other.url)}")
    await until(lambda: "/done?route=fetch" in faults_server.hits, "the fetch settled")
    await pool.close_session(sid)
    assert allowed.hits == ["/ok"] and other.connections == 0


async def test_a_refused_redirect_reports_the_page_actually_shown(pool, faults):
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    with pytest.raises(NavigationRefused) as caught:
        await pool.navigate(sid, f"{faults}/redirect-file")
    assert "scheme is not allowed" in str(caught.value) and "--allow-hosts" not in str(caught.value)
    info = await pool.page_info(sid, PageInfoRequest())
    shown = await pool._sessions[sid].page.evaluate("() => location.href")
    assert info.url == shown == f"{faults}/ok" and info.title == "ok"
    await pool.close_session(sid)


async def test_popups_are_closed_and_no_page_outlives_its_session(pool, faults_server):
    """A page that pings its server every 50 ms and opens two popups that would do the same: the
    popups are closed at once (and reported), the page with its session; then nothing pings."""
    faults = faults_server.url
    browser = str(pool.browser_pids()[0])
    baseline, closed = pool.tab_counts()[browser], pool.processes.popups_closed
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ping-loop"))).session_id
    await until(lambda: faults_server.hits.count("/ping?from=main") >= 2, "the page pings")
    await until(lambda: pool.processes.popups_closed == closed + 2, "both popups were closed")
    assert pool.tab_counts()[browser][0] == baseline[0] + 1  # the session's page, no popup
    result = await pool.execute(sid, BrowserAction.wait_for(0))
    assert result.popups == [f"{faults}/ping-popup?"] * 2  # a form GET with no fields
    assert (await pool.execute(sid, BrowserAction.wait_for(0))).popups == []  # reported once
    assert sample(pool.metrics_text(), "webgym_browser_pages", browser=browser) == baseline[0] + 1

    await pool.close_session(sid)
    assert pool.tab_counts()[browser][0] == baseline[0]
    assert sample(pool.metrics_text(), "webgym_browser_pages", browser=browser) == baseline[0]
    # Let time pass, measured in requests of another page: 20 ticks, 50 ms apart. (A ping sent
    # before the close may still be on its way: the count starts at the first tick.)
    clock = (await pool.create(CreateSessionRequest(start_url=f"{faults}/clock"))).session_id
    await until(lambda: "/tick?n=1" in faults_server.hits, "the clock page ticked")
    pings = [h for h in faults_server.hits if h.startswith("/ping?")]
    await until(lambda: "/tick?n=20" in faults_server.hits, "the clock page ticked 20 times")
    await pool.close_session(clock)
    assert [h for h in faults_server.hits if h.startswith("/ping?")] == pings
