"""BrowserPool against real Chromium: actions proven by page state, screenshots, guard, faults."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest
import pytest_asyncio
from playwright.async_api import Error as PlaywrightError

from webgym_rollout.browser import BrowserPool, PoolSettings
from webgym_rollout.client import (
    BrowserAction,
    CreateSessionRequest,
    PageInfoRequest,
    ScreenshotRequest,
)
from webgym_rollout.errors import (
    BrowserCrashed,
    BrowserError,
    NavigationRefused,
    OperationTimeout,
    ServerBusy,
    SessionNotFound,
    SiteBlocked,
)
from webgym_rollout.sites import SiteServer

pytestmark = pytest.mark.browser


class _FaultHandler(BaseHTTPRequestHandler):
    """Pages that misbehave: a JS loop, a load that never ends, redirects, a private subresource."""

    hits: list[str]
    forbidden_base = ""

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _html(self, body: str) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.server.hits.append(self.path)
        if self.path == "/loop":
            self._html("<title>loop</title><script>while (true) {}</script>")
        elif self.path == "/never":
            self._html("<title>never</title><p>almost</p><img src='/hang'>")
        elif self.path == "/hang":
            self.server.release.wait(30)
        elif self.path == "/redirect-private":
            self.send_response(302)
            self.send_header("Location", "/redirect-hop")
            self.end_headers()
        elif self.path == "/redirect-hop":
            self.send_response(302)
            self.send_header("Location", f"{self.server.forbidden_base}/secret")
            self.end_headers()
        elif self.path == "/captcha":
            self._html("<title>Just a moment...</title><p>Checking your browser</p>")
        elif self.path == "/private-ws":
            ws = self.server.forbidden_base.replace("http", "ws")
            self._html(
                "<title>waiting</title><script>"
                "let done = 0; const mark = () => { if (++done === 2) document.title = 'both refused'; };"
                f"const ws = new WebSocket('{ws}/ws'); ws.onclose = mark;"
                "const worker = new Worker('/worker.js'); worker.onmessage = mark;"
                "</script>"
            )
        elif self.path == "/worker.js":
            body = f"fetch('{self.server.forbidden_base}/from-worker').catch(() => postMessage('refused'));"
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/javascript")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.path == "/private-img":
            self._html(f"<title>img</title><img src='{self.server.forbidden_base}/pixel.png'>")
        elif self.path == "/private-link":
            self._html(
                f"<title>link</title><a id='l' href='{self.server.forbidden_base}/secret' "
                "style='display:block;width:300px;height:100px'>go</a>"
            )
        else:
            self._html("<title>ok</title><p>fine</p>")


@pytest.fixture(scope="module")
def sites() -> Iterator[SiteServer]:
    with SiteServer() as server:
        yield server


@pytest.fixture(scope="module")
def forbidden() -> Iterator[ThreadingHTTPServer]:
    """A server on 127.0.0.2 (loopback, never allowlisted) that records every request it gets."""
    server = ThreadingHTTPServer(("127.0.0.2", 0), _FaultHandler)
    server.daemon_threads = True
    server.hits, server.release = [], threading.Event()
    server.forbidden_base = ""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def faults(forbidden) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FaultHandler)
    server.daemon_threads = True
    server.hits, server.release = [], threading.Event()
    server.forbidden_base = f"http://127.0.0.2:{forbidden.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.release.set()
    server.shutdown()
    server.server_close()


def _settings(**overrides) -> PoolSettings:
    base = dict(
        browsers=2,
        contexts_per_browser=4,
        allow_hosts=("127.0.0.1",),
        navigate_timeout_s=3.0,
        action_timeout_s=3.0,
        create_timeout_s=10.0,
        idle_timeout_s=60.0,
    )
    base.update(overrides)
    return PoolSettings(**base)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pool(chromium_path):
    async with BrowserPool(_settings(executable_path=chromium_path)) as pool:
        yield pool


async def _element(pool, sid, predicate):
    info = await pool.page_info(sid, PageInfoRequest(elements=True))
    found = [e for e in info.elements if predicate(e)]
    assert found, f"no matching element among {info.elements}"
    e = found[0]
    return e.x + e.width / 2, e.y + e.height / 2


async def _text(pool, sid) -> str:
    return (await pool.page_info(sid, PageInfoRequest(accessibility=True))).accessibility or ""


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
    await pool.close_session(sid)
    with pytest.raises(SessionNotFound):
        await pool.page_info(sid, PageInfoRequest())


async def test_hover_and_go_back_without_history(pool, sites):
    sid = (
        await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
    ).session_id
    result = await pool.execute(sid, BrowserAction.back())
    assert not result.ok and "no previous page" in result.error
    info = await pool.page_info(sid, PageInfoRequest(accessibility=True))
    assert "hovered" not in (info.accessibility or "")
    x, y = await _element(pool, sid, lambda e: e.text == "hover me")
    await pool.execute(sid, BrowserAction.hover_at(x, y))
    assert "hovered" in await _text(pool, sid)
    await pool.close_session(sid)


async def test_screenshot_hash_formats_scale_and_marks(pool, sites):
    sid = (
        await pool.create(
            CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html", viewport=(800, 600))
        )
    ).session_id
    first = await pool.screenshot(sid, ScreenshotRequest())
    again = await pool.screenshot(sid, ScreenshotRequest())
    assert first.sha256 == again.sha256 and (first.width, first.height) == (800, 600)
    x, y = await _element(pool, sid, lambda e: e.tag == "input")
    await pool.execute(sid, BrowserAction.click(x, y))
    await pool.execute(sid, BrowserAction.type_text("changed"))
    changed = await pool.screenshot(sid, ScreenshotRequest())
    assert changed.sha256 != first.sha256

    jpeg = await pool.screenshot(sid, ScreenshotRequest(format="jpeg", quality=50))
    import io

    from PIL import Image

    assert jpeg.data[:3] == b"\xff\xd8\xff"
    small = await pool.screenshot(sid, ScreenshotRequest(scale=0.5))
    image = Image.open(io.BytesIO(small.data))
    assert image.size == (400, 300) == (small.width, small.height)
    marked = await pool.screenshot(sid, ScreenshotRequest(marks=True))
    assert {"input", "button", "select", "a"} <= {m.tag for m in marked.marks}
    assert marked.sha256 != changed.sha256
    await pool.close_session(sid)


async def test_a_failed_capture_of_a_live_page_is_taken_again(pool, sites):
    """Chromium under load sometimes returns no frame for a live page; the pool asks again."""
    sid = (
        await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
    ).session_id
    page = pool._sessions[sid].page
    capture = page.screenshot
    failures = {"left": 1}

    async def flaky_capture(**kwargs):  # Chromium's own failure, injected at Playwright's boundary
        if failures["left"]:
            failures["left"] -= 1
            raise PlaywrightError("Protocol error (Page.captureScreenshot): Unable to capture screenshot")
        return await capture(**kwargs)

    page.screenshot = flaky_capture
    shot = await pool.screenshot(sid, ScreenshotRequest())
    assert shot.data[:8] == b"\x89PNG\r\n\x1a\n" and pool.capture_retries == 1
    assert "webgym_screenshot_retries_total 1" in pool.metrics_text()

    failures["left"] = 10  # a page that never captures: the error reaches the client, the session stays
    with pytest.raises(BrowserError, match="Unable to capture screenshot"):
        await pool.screenshot(sid, ScreenshotRequest())
    assert pool.capture_retries == 3
    failures["left"] = 0
    assert (await pool.screenshot(sid, ScreenshotRequest())).sha256 == shot.sha256
    await pool.close_session(sid)


async def test_reused_context_keeps_no_storage(pool, sites):
    url = f"{sites.base_url}/sandbox/form.html"
    for _ in range(6):  # more sessions than browsers x spare contexts: some contexts are reused
        sid = (await pool.create(CreateSessionRequest(start_url=url))).session_id
        session = pool._sessions[sid]
        stored = await session.page.evaluate("() => [localStorage.getItem('k'), document.cookie]")
        assert stored == [None, ""]
        await session.page.evaluate("() => { localStorage.setItem('k', 'v'); document.cookie = 'c=1'; }")
        await pool.close_session(sid)


async def test_guard_refuses_private_targets_before_sending(pool, faults, forbidden):
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    forbidden_base = f"http://127.0.0.2:{forbidden.server_address[1]}"
    for url in (
        "file:///etc/passwd",
        f"{forbidden_base}/direct",
        "http://169.254.169.254/latest/meta-data",
        "chrome://settings",
        "data:text/html,<p>x</p>",
    ):
        with pytest.raises(NavigationRefused) as caught:
            await pool.navigate(sid, url)
        assert caught.value.url == url and url in str(caught.value)

    with pytest.raises(NavigationRefused) as caught:
        await pool.navigate(sid, f"{faults}/redirect-private")
    assert caught.value.url == f"{forbidden_base}/secret"

    state = await pool.navigate(sid, f"{faults}/private-img")
    assert state.title == "img"
    x, y = 150, 50
    await pool.navigate(sid, f"{faults}/private-link")
    clicked = await pool.execute(sid, BrowserAction.click(x, y))
    assert not clicked.ok and "refused" in clicked.error
    await pool.navigate(sid, f"{faults}/private-ws")  # a WebSocket and a worker's fetch
    for _ in range(50):
        if (await pool.page_info(sid, PageInfoRequest())).title == "both refused":
            break
        await asyncio.sleep(0.1)
    assert (await pool.page_info(sid, PageInfoRequest())).title == "both refused"
    assert forbidden.hits == []  # nothing ever reached 127.0.0.2
    await pool.close_session(sid)


async def test_hung_page_and_endless_load_time_out(pool, faults, sites):
    sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    with pytest.raises(OperationTimeout) as endless:
        await pool.navigate(sid, f"{faults}/never")
    assert endless.value.session_closed is False
    assert (await pool.page_info(sid, PageInfoRequest())).title == "never"  # still usable

    other = (
        await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
    ).session_id
    with pytest.raises(OperationTimeout) as hung:
        await pool.navigate(sid, f"{faults}/loop")
    assert hung.value.session_closed is True
    with pytest.raises(SessionNotFound):
        await pool.page_info(sid, PageInfoRequest())
    assert (await pool.page_info(other, PageInfoRequest())).title == "Sandbox form"
    fresh = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
    assert (await pool.page_info(fresh, PageInfoRequest())).title == "ok"
    for s in (other, fresh):
        await pool.close_session(s)


async def test_killed_browser_fails_only_its_sessions(chromium_path, sites):
    url = f"{sites.base_url}/sandbox/form.html"
    async with BrowserPool(_settings(executable_path=chromium_path)) as pool:
        a = await pool.create(CreateSessionRequest(start_url=url))
        b = await pool.create(CreateSessionRequest(start_url=url))
        assert a.browser_pid and b.browser_pid and a.browser_pid != b.browser_pid
        os.kill(a.browser_pid, signal.SIGKILL)
        with pytest.raises(BrowserCrashed):
            for _ in range(50):  # the death is noticed at the latest on the next operation
                await pool.screenshot(a.session_id, ScreenshotRequest())
        for _ in range(3):
            assert (await pool.screenshot(b.session_id, ScreenshotRequest())).width == 1280
        c = await pool.create(CreateSessionRequest(start_url=url))
        assert c.browser_pid != a.browser_pid and psutil.pid_exists(c.browser_pid)
        assert (await pool.page_info(c.session_id, PageInfoRequest())).title == "Sandbox form"
        assert pool.browser_restarts >= 1
        assert "webgym_browser_restarts_total 1" in pool.metrics_text()


async def test_blocklist_refuses_new_sessions_until_expiry(chromium_path, faults):
    async with BrowserPool(
        _settings(executable_path=chromium_path, blocklist_threshold=2, navigate_timeout_s=1.0)
    ) as pool:
        sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
        for _ in range(2):
            with pytest.raises(OperationTimeout):
                await pool.navigate(sid, f"{faults}/never")
        with pytest.raises(SiteBlocked):
            await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))
        pool.blocklist._clock = lambda: time.monotonic() + 10_000  # the entry expires
        again = await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))
        assert again.title == "ok"


async def test_idle_sessions_expire(chromium_path, sites):
    async with BrowserPool(_settings(executable_path=chromium_path, idle_timeout_s=0.5)) as pool:
        sid = (
            await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
        ).session_id
        for _ in range(100):
            if pool.active_sessions == 0:
                break
            await asyncio.sleep(0.1)
        assert pool.active_sessions == 0 and pool.sessions_expired == 1
        with pytest.raises(SessionNotFound):
            await pool.screenshot(sid, ScreenshotRequest())


async def test_block_page_counts_as_a_failure(chromium_path, faults):
    async with BrowserPool(_settings(executable_path=chromium_path, blocklist_threshold=1)) as pool:
        state = await pool.create(CreateSessionRequest(start_url=f"{faults}/captcha"))
        assert state.title == "Just a moment..."
        with pytest.raises(SiteBlocked, match="127.0.0.1"):
            await pool.navigate(state.session_id, f"{faults}/ok")


async def test_browser_over_memory_bound_is_replaced(chromium_path, sites):
    settings = _settings(executable_path=chromium_path, browsers=1, max_browser_mib=1.0, memory_check_s=0.1)
    async with BrowserPool(settings) as pool:
        first = await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
        await pool.close_session(first.session_id)
        for _ in range(100):
            if pool.browser_restarts and first.browser_pid not in pool.browser_pids():
                break
            await asyncio.sleep(0.1)
        assert pool.browser_restarts >= 1 and first.browser_pid not in pool.browser_pids()
        # A bound no browser can stay under recycles every replacement too: lift it, so that the
        # replacement keeps serving (otherwise create may find every browser draining).
        pool.settings.max_browser_mib = 100_000.0
        page = f"{sites.base_url}/sandbox/form.html"
        for _ in range(50):  # a replacement drained before the bound was lifted is itself replaced
            try:
                again = await pool.create(CreateSessionRequest(start_url=page))
                break
            except ServerBusy:
                await asyncio.sleep(0.1)
        assert again.browser_pid != first.browser_pid and again.title == "Sandbox form"
