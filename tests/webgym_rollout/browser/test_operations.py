"""The operations on real Chromium: actions proven by page state, screenshots, timeouts, retries."""

from __future__ import annotations

import io

import pytest
import pytest_asyncio
from PIL import Image
from playwright.async_api import Error as PlaywrightError

from webgym_rollout.browser import pages
from webgym_rollout.browser.pages import PageHooks, keeps_state, state_probe
from webgym_rollout.browser.pool import BrowserPool, PoolSettings
from webgym_rollout.browser.protocol import (
    ActRequest,
    BrowserAction,
    CreateSessionRequest,
    EnvState,
    PageInfoRequest,
    ScreenshotRequest,
)
from webgym_rollout.errors import BrowserError, OperationTimeout, SessionNotFound

pytestmark = pytest.mark.browser




@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pool(chromium_path, sites, faults):
    settings = PoolSettings(executable_path=chromium_path, browsers=2, contexts_per_browser=4,
                            allow_hosts=(f"{sites.host}:{sites.port}", faults.removeprefix("http://")),
                            navigate_timeout_s=3.0, action_timeout_s=3.0,
                            create_timeout_s=10.0)
    async with BrowserPool(settings) as pool:
        yield pool


async def _element(pool, sid, predicate) -> tuple[float, float]:
    info = await pool.page_info(sid, PageInfoRequest(elements=True))
    found = [e for e in info.elements if predicate(e)]
    assert found, f"no matching element among {info.elements}"
    e = found[0]
    return e.x + e.width / 2, e.y + e.height / 2


async def _text(pool, sid) -> str:
    """The page's visible text, read straight from the page."""
    return await pool._sessions[sid].page.inner_text("body")


async def test_actions_change_page_state(pool, sites):
    created = await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
    sid = created.session_id
    assert created.title == "Sandbox form"

    x, y = await _element(pool, sid, lambda e: e.tag == "input")
    assert (await pool.execute(sid, BrowserAction.click(x, y))).ok
    assert (await pool.execute(sid, BrowserAction.type_text("Adax"))).ok
    assert (await pool.execute(sid, BrowserAction.press("Backspace"))).ok
    x, y = await _element(pool, sid, lambda e: e.text == "Greet")
    await pool.execute(sid, BrowserAction.click(x, y))
    assert "Hello, Ada" in await _text(pool, sid)
    assert "Hello, Adax" not in await _text(pool, sid)

    x, y = await _element(pool, sid, lambda e: e.tag == "select")
    result = await pool.execute(sid, BrowserAction.select_option(x, y, "Blue"))
    assert result.ok, result.error
    assert "Picked: blue" in await _text(pool, sid)
    wrong = await pool.execute(sid, BrowserAction.select_option(5, 5, "Blue"))
    assert not wrong.ok and "select" in wrong.error

    bad_key = await pool.execute(sid, BrowserAction.press("NoSuchKey"))
    assert not bad_key.ok and bad_key.error

    before = await _element(pool, sid, lambda e: e.text == "Next page")
    assert (await pool.execute(sid, BrowserAction.scroll_by("down", 200))).ok
    after = await _element(pool, sid, lambda e: e.text == "Next page")
    assert after[1] == pytest.approx(before[1] - 200, abs=1)
    await pool.execute(sid, BrowserAction.scroll_by("up", 200))

    x, y = await _element(pool, sid, lambda e: e.text == "Next page")
    moved = await pool.execute(sid, BrowserAction.click(x, y))
    assert moved.url.endswith("/sandbox/next.html") and moved.title == "Sandbox next"
    back = await pool.execute(sid, BrowserAction.back())
    assert back.ok and back.url.endswith("/sandbox/form.html")
    waited = await pool.execute(sid, BrowserAction.wait_for(0.01))
    assert waited.ok and waited.title == "Sandbox form"
    await pool.close_session(sid)
    with pytest.raises(SessionNotFound):
        await pool.page_info(sid, PageInfoRequest())


async def test_go_back_without_history_is_an_agent_mistake(pool, sites):
    sid = (
        await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
    ).session_id
    result = await pool.execute(sid, BrowserAction.back())
    assert not result.ok and "no previous page" in result.error
    assert result.url.endswith("/sandbox/form.html")
    await pool.close_session(sid)


async def test_page_info_and_env_state_of_a_web_page(pool, sites):
    sid = (
        await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
    ).session_id
    plain = await pool.page_info(sid, PageInfoRequest())
    assert plain.title == "Sandbox form" and plain.elements == []
    info = await pool.page_info(sid, PageInfoRequest(elements=True))
    assert {"input", "button", "select", "a"} <= {e.tag for e in info.elements}
    assert all(e.width >= 1 and e.height >= 1 for e in info.elements)
    assert await pool.env_state(sid) == EnvState()  # a web page keeps no state of its own
    await pool.close_session(sid)


async def test_screenshot_hash_formats_and_scale(pool, sites):
    sid = (
        await pool.create(
            CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html", viewport=(800, 600))
        )
    ).session_id
    first = await pool.screenshot(sid, ScreenshotRequest())
    again = await pool.screenshot(sid, ScreenshotRequest())
    assert first.sha256 == again.sha256 and (first.width, first.height) == (800, 600)
    assert Image.open(io.BytesIO(first.data)).size == (800, 600)
    x, y = await _element(pool, sid, lambda e: e.tag == "input")
    await pool.execute(sid, BrowserAction.click(x, y))
    await pool.execute(sid, BrowserAction.type_text("changed"))
    changed = await pool.screenshot(sid, ScreenshotRequest())
    assert changed.sha256 != first.sha256

    jpeg = await pool.screenshot(sid, ScreenshotRequest(format="jpeg", quality=50))
    assert jpeg.data[:3] == b"\xff\xd8\xff" and jpeg.format == "jpeg"
    small = await pool.screenshot(sid, ScreenshotRequest(scale=0.5))
    assert Image.open(io.BytesIO(small.data)).size == (400, 300) == (small.width, small.height)
    small_jpeg = await pool.screenshot(sid, ScreenshotRequest(scale=0.5, format="jpeg"))
    assert small_jpeg.data[:3] == b"\xff\xd8\xff"
    assert Image.open(io.BytesIO(small_jpeg.data)).size == (400, 300)
    await pool.close_session(sid)


async def test_a_failed_capture_of_a_live_page_is_taken_again(pool, sites):
    """Chromium under load sometimes returns no frame for a live page; the pool asks again."""
    sid = (
        await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
    ).session_id
    page = pool._sessions[sid].page
    capture = page.screenshot
    failures = {"left": 1}
    retries = pool.capture_retries

    async def flaky_capture(**kwargs):  # Chromium's own failure, injected at Playwright's boundary
        if failures["left"]:
            failures["left"] -= 1
            raise PlaywrightError("Protocol error (Page.captureScreenshot): Unable to capture screenshot")
        return await capture(**kwargs)

    page.screenshot = flaky_capture
    shot = await pool.screenshot(sid, ScreenshotRequest())
    assert shot.data[:8] == b"\x89PNG\r\n\x1a\n" and pool.capture_retries == retries + 1
    assert f"webgym_screenshot_retries_total {retries + 1}" in pool.metrics_text()

    failures["left"] = 10  # a page that never captures: the error reaches the client, the session stays
    with pytest.raises(BrowserError, match="Unable to capture screenshot"):
        await pool.screenshot(sid, ScreenshotRequest())
    assert pool.capture_retries == retries + 3
    failures["left"] = 0
    assert (await pool.screenshot(sid, ScreenshotRequest())).sha256 == shot.sha256
    await pool.close_session(sid)


async def test_hung_page_and_endless_load_time_out(pool, faults, sites):
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    with pytest.raises(OperationTimeout) as endless:
        await pool.navigate(sid, f"{faults}/never")
    assert endless.value.session_closed is False
    # The message names the limit as configured (3 s here), not the internal bound behind it.
    assert "did not finish within its limit of 3 s (--navigate-timeout-s)" in str(endless.value)
    assert (await pool.page_info(sid, PageInfoRequest())).title == "never"  # still usable

    other = (
        await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
    ).session_id
    with pytest.raises(OperationTimeout) as hung:
        await pool.navigate(sid, f"{faults}/loop")
    assert hung.value.session_closed is True
    assert "within its limit of 3 s (--navigate-timeout-s)" in str(hung.value)
    with pytest.raises(SessionNotFound):
        await pool.page_info(sid, PageInfoRequest())
    assert (await pool.page_info(other, PageInfoRequest())).title == "Sandbox form"
    fresh = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    assert (await pool.page_info(fresh, PageInfoRequest())).title == "ok"
    for s in (other, fresh):
        await pool.close_session(s)


async def test_a_timed_out_action_names_its_limit(pool, faults):
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    await pool._sessions[sid].page.evaluate("() => setTimeout(() => { while (true) {} }, 0)")
    with pytest.raises(OperationTimeout) as hung:
        await pool.execute(sid, BrowserAction.click(5, 5))
    assert f"execute on session {sid} did not finish within its limit of 3 s (--action-timeout-s)" in str(
        hung.value)


class _PathPage(PageHooks):
    """A kind whose state a script reads: the page's path."""

    name = "path-test"
    state_script = "() => ({utterance: location.pathname})"


async def test_act_reads_a_scripted_state_in_the_navigation_check_and_after_a_navigation(pool, sites,
                                                                                          monkeypatch):
    monkeypatch.setitem(pages._HOOKS, _PathPage.name, _PathPage)
    created = await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html",
                                                     environment=_PathPage.name))
    sid = created.session_id
    link = await _element(pool, sid, lambda e: e.text == "Next page")
    cdp = pool._sessions[sid].navigation.cdp
    sent, send = [], cdp.send

    async def counted(method, params=None):
        sent.append(method)
        return await send(method, params)

    cdp.send = counted
    stay = await pool.act(sid, ActRequest(action=BrowserAction.click(3, 3), screenshot=None))
    assert stay.ok and stay.env_state == EnvState(utterance="/sandbox/form.html")
    assert sent == ["Runtime.evaluate"]  # the state came back from the navigation check itself
    moved = await pool.act(sid, ActRequest(action=BrowserAction.click(*link)))
    # The click navigated: the state is the new page's, read after the navigation, not before it.
    assert moved.url.endswith("/sandbox/next.html") and moved.title == "Sandbox next"
    assert moved.env_state == EnvState(utterance="/sandbox/next.html")
    assert moved.screenshot is not None and moved.screenshot.width == 1280
    scrolled = await pool.act(sid, ActRequest(action=BrowserAction.scroll_by("down", 50), env_state=False))
    assert scrolled.ok and scrolled.env_state is None
    await pool.close_session(sid)


async def test_act_keeps_the_screenshot_taken_beside_the_navigation_check_only_when_the_page_stayed(
        pool, sites, monkeypatch):
    form = CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html")
    sid = (await pool.create(form)).session_id
    link = await _element(pool, sid, lambda e: e.text == "Next page")
    observed = []
    observe = pool.operations._observe

    async def counted(session, request, act, read_state):
        observed.append(request.action.kind)
        return await observe(session, request, act, read_state)

    monkeypatch.setattr(pool.operations, "_observe", counted)
    stay = await pool.act(sid, ActRequest(action=BrowserAction.click(3, 3)))
    assert observed == []  # taken beside the check: no read after the action
    assert stay.screenshot is not None and stay.screenshot.sha256 == (
        await pool.screenshot(sid, ScreenshotRequest())).sha256
    moved = await pool.act(sid, ActRequest(action=BrowserAction.click(*link)))
    # The click navigated: the screenshot beside the check (of the page it left, or of no page)
    # is dropped and the new page is taken after the navigation.
    assert observed == ["click"] and moved.url.endswith("/sandbox/next.html")
    assert moved.screenshot is not None and moved.screenshot.sha256 == (
        await pool.screenshot(sid, ScreenshotRequest())).sha256
    assert moved.screenshot.sha256 != stay.screenshot.sha256
    await pool.close_session(sid)


def test_a_kind_that_reads_its_state_itself_is_not_probed():
    class OwnReader(_PathPage):
        @classmethod
        async def read_page(cls, page):
            return {"utterance": "read by hand"}

    assert state_probe(_PathPage) == _PathPage.state_script
    assert state_probe(OwnReader) is None and state_probe(PageHooks) is None
    assert keeps_state(_PathPage) and keeps_state(OwnReader) and not keeps_state(PageHooks)


async def test_the_title_is_read_on_the_pages_devtools_session_and_only_a_string_counts(pool, sites):
    form = CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html")
    sid = (await pool.create(form)).session_id
    navigation = pool._sessions[sid].navigation
    assert await navigation.read_title() == "Sandbox form"
    page = pool._sessions[sid].page
    await page.evaluate("() => { document.title = 'Renamed'; }")
    assert await navigation.read_title() == "Renamed"
    redefine = "getter => Object.defineProperty(document, 'title', {get: eval(getter), configurable: true})"
    await page.evaluate(redefine, "() => ({no: 'string'})")
    assert await navigation.read_title() == ""
    await page.evaluate(redefine, "() => { throw new Error('x'); }")
    assert await navigation.read_title() == ""
    await pool.close_session(sid)
