"""The URL guard on every request of a page, and navigation tracking, on real Chromium.

The forbidden host is another loopback address (127.0.0.2) that is never allowlisted: the test
proves that nothing reaches it, whatever way the page tries (navigation, redirect hop, image, link,
WebSocket, a worker's fetch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import pytest_asyncio

from tests.webgym_rollout.fault_pages import FaultPages
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
def faults(forbidden) -> Iterator[str]:
    with FaultPages(forbidden_base=forbidden.url) as pages:
        yield pages.url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pool(chromium_path):
    settings = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=4,
                            allow_hosts=("127.0.0.1",), navigate_timeout_s=3.0, action_timeout_s=3.0)
    async with BrowserPool(settings) as pool:
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
