"""The browser pool: a few Chromium processes, several contexts each, one context + page per session.

`BrowserPool` owns the browsers (Playwright async API, Debian's ``chromium-headless-shell`` through
``executable_path``) and the sessions. Every operation (`create`, `navigate`, `screenshot`,
`execute`, `page_info`, `env_state`) goes through the `Lane` of its kind (bounded queue + concurrency
limit, see `webgym_rollout.metrics`) and runs under a timeout. Operations on one session run one at
a time; sessions never wait for each other except through their lane.

Failures stay with their session:

- a timeout (a page stuck in ``while(true){}``, a load that never ends) raises `OperationTimeout`;
  if the page no longer answers, its context is thrown away and the session is closed;
- a dead page or browser process raises `BrowserCrashed`; a dead browser is replaced at once;
- agent mistakes (an unknown key, selecting on something that is not a ``<select>``, a click that
  leads to a refused URL) come back as ``ExecuteResult(ok=False, error=...)``.

Every request a session's page (and its workers) makes passes the `UrlGuard` through a CDP
``Fetch`` interception on the page, which (unlike Playwright routes) also sees each hop of a redirect
chain; a refused navigation is answered 204 so the current page stays. The page's WebSockets go
through a Playwright WebSocket route. Sites that fail repeatedly land on the `SiteBlocklist`.

Contexts are reused after their cookies, permissions and per-origin storage are cleared and their
page is closed (a new page has no history). A browser is recycled after `recycle_after_sessions`
sessions or when its process tree passes `max_browser_mib` of PSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import logging
import os
import secrets
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psutil
from playwright.async_api import Browser, BrowserContext, Page, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from webgym_rollout import miniwob
from webgym_rollout.client import (
    BrowserAction,
    CreateSessionRequest,
    Element,
    EnvState,
    ExecuteResult,
    PageInfo,
    PageInfoRequest,
    PageState,
    Screenshot,
    ScreenshotRequest,
    ServerHealth,
    SessionCreated,
)
from webgym_rollout.errors import (
    BrowserCrashed,
    BrowserError,
    NavigationRefused,
    OperationTimeout,
    ServerBusy,
    SessionNotFound,
)
from webgym_rollout.guard import SiteBlocklist, UrlGuard
from webgym_rollout.metrics import Lane, render_prometheus

__all__ = ["DEFAULT_CHROMIUM", "CHROMIUM_ARGS", "BrowserPool", "PoolSettings", "process_tree_pss_mib"]

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_CHROMIUM = "/usr/lib/chromium/chromium-headless-shell"
# Offline, sandboxed machines: no background requests; no smooth scrolling (a wheel scroll is done
# when its frame is drawn); iframes stay in their page's process so the page's request
# interception (the URL guard) sees their requests too.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-smooth-scrolling",
    "--disable-site-isolation-trials",
    "--disable-features=IsolateOrigins,site-per-process",
)
OP_KINDS = ("create", "navigate", "screenshot", "execute", "page_info")
# Popups would escape the page's request interception: open them in the same tab instead.
_SAME_TAB_SCRIPT = """
(() => {
  window.open = function (url) { if (url) { window.location.href = url; } return null; };
  document.addEventListener('click', (event) => {
    const link = event.target && event.target.closest ? event.target.closest('a[target]') : null;
    if (link) { link.target = '_self'; }
  }, true);
})();
"""
_ELEMENTS_SCRIPT = """() => {
  const selector = 'a[href], button, input, select, textarea, summary, label[for], [role=button], ' +
    '[role=link], [role=checkbox], [role=radio], [role=tab], [role=menuitem], [role=option], ' +
    '[role=textbox], [role=combobox], [onclick], [contenteditable=""], [contenteditable=true], ' +
    '[tabindex]:not([tabindex="-1"])';
  const implicit = {A: 'link', BUTTON: 'button', INPUT: 'textbox', SELECT: 'combobox', TEXTAREA: 'textbox',
                    SUMMARY: 'button', LABEL: 'label'};
  const out = [];
  const vw = window.innerWidth, vh = window.innerHeight;
  for (const el of document.querySelectorAll(selector)) {
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1 || r.bottom <= 0 || r.right <= 0 || r.top >= vh || r.left >= vw) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.display === 'none' || style.opacity === '0') continue;
    let role = el.getAttribute('role') || implicit[el.tagName] || '';
    if (el.tagName === 'INPUT' && ['checkbox', 'radio', 'button', 'submit'].includes(el.type)) {
      role = el.type === 'submit' ? 'button' : el.type;
    }
    const text = (el.innerText || el.value || el.getAttribute('aria-label') || el.getAttribute('placeholder')
                  || el.getAttribute('title') || el.getAttribute('alt') || '').trim().replace(/\\s+/g, ' ');
    out.push({x: r.x, y: r.y, width: r.width, height: r.height, tag: el.tagName.toLowerCase(), role,
              text: text.slice(0, 200)});
  }
  return out;
}"""
_SELECT_SCRIPT = """([x, y, value]) => {
  let el = document.elementFromPoint(x, y);
  while (el && el.tagName !== 'SELECT') { el = el.parentElement; }
  if (!el) { return 'no <select> element at (' + x + ', ' + y + ')'; }
  const option = Array.from(el.options).find(o => o.value === value || o.text.trim() === value);
  if (!option) { return 'the <select> has no option ' + JSON.stringify(value); }
  el.value = option.value;
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return '';
}"""
_CAPTURE_ATTEMPTS = 3
_NEXT_FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


@dataclass
class PoolSettings:
    """How the pool runs its browsers; every field is a CLI flag of ``webgym-rollout serve``."""

    executable_path: str = field(default_factory=lambda: os.environ.get("WEBGYM_CHROMIUM", DEFAULT_CHROMIUM))
    """Chromium binary (Debian's headless shell; `WEBGYM_CHROMIUM` overrides the default)."""
    browsers: int = 2
    """Browser processes kept running."""
    contexts_per_browser: int = 6
    """Sessions per browser (the measured sweet spot on 2 cores is 4-8)."""
    allow_hosts: tuple[str, ...] = ()
    """Hosts opened despite the URL guard's rules, e.g. ``127.0.0.1`` for local sites."""
    idle_timeout_s: float = 300.0
    """A session untouched this long is closed (a client that died leaks nothing)."""
    create_timeout_s: float = 30.0
    """Bound on opening a session, its first page load and MiniWoB episode start included."""
    navigate_timeout_s: float = 20.0
    """Bound on a navigation (until the page's load event)."""
    action_timeout_s: float = 10.0
    """Bound on screenshot, execute, page_info and env_state."""
    recycle_after_sessions: int = 200
    """A browser is replaced after hosting this many sessions."""
    max_browser_mib: float = 2048.0
    """A browser whose process tree passes this PSS is replaced once its sessions end."""
    memory_check_s: float = 10.0
    """How often the browsers' PSS is read (reading smaps costs a few ms per process)."""
    concurrency: dict[str, int] = field(
        default_factory=lambda: {"create": 4, "navigate": 8, "screenshot": 8, "execute": 8, "page_info": 8}
    )
    """Operations of each kind running at once. Screenshots are not held below the other kinds:
    measured with 8 sessions on 2 cores, a limit of 4 cost 10-15 % of the steps/s."""
    spare_contexts: int = 2
    """Cleared contexts each browser keeps for reuse (each costs ~23 MiB)."""
    max_queue: int = 256
    """Operations of one kind that may wait; beyond that the server answers `ServerBusy` (429)."""
    miniwob_max_time_s: float | None = 60.0
    """MiniWoB episode time limit (the pages' own default, 10 s, is too short for a slow policy)."""
    blocklist_threshold: int = 3
    """Failures (timeouts, crashes, block pages) after which a site is blocked."""
    blocklist_ttl_s: float = 3600.0
    """How long a site stays blocked."""
    extra_args: tuple[str, ...] = ()
    """More Chromium flags."""

    @property
    def max_sessions(self) -> int:
        return self.browsers * self.contexts_per_browser


@dataclass(eq=False)
class _Browser:
    browser: Browser
    pid: int | None
    sessions_served: int = 0
    active: set[str] = field(default_factory=set)
    spare: list[BrowserContext] = field(default_factory=list)
    draining: bool = False
    dead: bool = False


@dataclass(eq=False)
class _Session:
    id: str
    slot: _Browser
    context: BrowserContext
    page: Page
    env: miniwob.Environment
    viewport: tuple[int, int]
    cdp: Any = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    crashed: bool = False
    origins: set[str] = field(default_factory=set)
    main_frame_id: str = ""
    document_requests: int = 0
    """Main-frame navigations the renderer requested (link clicks, form submits, script)."""
    commits: int = 0
    """Main-frame navigations committed."""
    stops: int = 0
    """Main-frame loads that stopped (finished, or a navigation cancelled without commit)."""
    loading: bool = False
    """A main-frame load started since the current action began and has not stopped."""
    title: str | None = None
    """The page title as last read (None: read it again)."""
    committed: asyncio.Event = field(default_factory=asyncio.Event)
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(url, reason) of document requests the guard refused since the last operation began."""
    tasks: set[asyncio.Task] = field(default_factory=set)

    @property
    def dead(self) -> bool:
        """The page crashed or closed, or its browser died: nothing more can run on it."""
        return self.crashed or self.slot.dead or self.page.is_closed()


def process_tree_pss_mib(pid: int) -> float:
    """PSS of a process and all its descendants, in MiB (reads /proc/<pid>/smaps_rollup)."""
    total = 0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for proc in procs:
        try:
            total += proc.memory_full_info().pss
        except psutil.Error:
            continue
    return total / 2**20


def _find_browser_pid(marker: str) -> int | None:
    """The browser process launched with `marker` on its command line (not its helper processes)."""
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = proc.cmdline()
        except psutil.Error:
            continue
        if marker in cmdline and not any(arg.startswith("--type=") for arg in cmdline):
            return proc.pid
    return None


class BrowserPool:
    """Browsers, sessions and the per-kind operation lanes. Use as an async context manager."""

    def __init__(self, settings: PoolSettings | None = None):
        self.settings = settings or PoolSettings()
        self.guard = UrlGuard(self.settings.allow_hosts)
        self.blocklist = SiteBlocklist(
            threshold=self.settings.blocklist_threshold, ttl_s=self.settings.blocklist_ttl_s
        )
        self.lanes = {
            kind: Lane(kind, self.settings.concurrency.get(kind, 8), self.settings.max_queue)
            for kind in OP_KINDS
        }
        self.errors: Counter[str] = Counter()
        """Errors answered to clients, by kind (the server counts them)."""
        self.browser_restarts = 0
        self.sessions_created = 0
        self.sessions_expired = 0
        self.capture_retries = 0
        self.started_at = time.monotonic()
        self._playwright: Playwright | None = None
        self._browsers: list[_Browser] = []
        self._sessions: dict[str, _Session] = {}
        self._reserved = 0
        self._launch_lock = asyncio.Lock()
        self._maintenance: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self._closing = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> BrowserPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if not os.access(self.settings.executable_path, os.X_OK):
            raise BrowserError(
                f"Chromium not found at {self.settings.executable_path}; install "
                "chromium-headless-shell or pass --chromium / set WEBGYM_CHROMIUM"
            )
        self._playwright = await async_playwright().start()
        await self._ensure_browsers()
        self._maintenance = asyncio.create_task(self._maintain(), name="browser-pool-maintenance")

    async def close(self) -> None:
        """Close every session and browser, then Playwright."""
        self._closing = True
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        for task in list(self._background):
            task.cancel()
        for slot in list(self._browsers):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(slot.browser.close(), 10)
        self._browsers.clear()
        self._sessions.clear()
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _launch(self) -> _Browser:
        assert self._playwright is not None
        marker = f"--webgym-browser={secrets.token_hex(6)}"
        args = [*CHROMIUM_ARGS, *self.settings.extra_args, marker]
        browser = await self._playwright.chromium.launch(
            executable_path=self.settings.executable_path, args=args
        )
        slot = _Browser(browser=browser, pid=_find_browser_pid(marker))
        browser.on("disconnected", lambda _b: self._on_disconnected(slot))
        log.info("launched browser pid %s", slot.pid)
        return slot

    async def _ensure_browsers(self) -> None:
        """Launch browsers until `settings.browsers` healthy, non-draining ones run."""
        async with self._launch_lock:
            while not self._closing:
                usable = [b for b in self._browsers if not b.dead and not b.draining]
                missing = self.settings.browsers - len(usable)
                if missing <= 0:
                    return
                # In parallel: start-up time is what an operator waits for.
                self._browsers.extend(await asyncio.gather(*(self._launch() for _ in range(missing))))

    def _on_disconnected(self, slot: _Browser) -> None:
        if slot.dead or self._closing:
            return
        slot.dead = True
        self.browser_restarts += 1
        log.warning("browser pid %s died with %d sessions; replacing it", slot.pid, len(slot.active))
        for session_id in slot.active:
            session = self._sessions.get(session_id)
            if session is not None:
                session.crashed = True
        self._spawn(self._ensure_browsers())

    async def _retire(self, slot: _Browser) -> None:
        with contextlib.suppress(ValueError):
            self._browsers.remove(slot)
        slot.dead = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(slot.browser.close(), 10)
        if slot.pid is not None:  # a browser that would not close (stuck renderer) is killed
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(slot.pid)
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()

    async def _maintain(self) -> None:
        """Idle expiry, browser recycling and the memory bound, checked every second."""
        last_memory_check = 0.0
        while True:
            await asyncio.sleep(min(1.0, self.settings.idle_timeout_s / 4, self.settings.memory_check_s))
            try:
                now = time.monotonic()
                for session in list(self._sessions.values()):
                    if not session.lock.locked() and now - session.last_used > self.settings.idle_timeout_s:
                        log.info(
                            "session %s idle for %.0f s: closing it", session.id, now - session.last_used
                        )
                        self.sessions_expired += 1
                        await self._end_session(session, reuse=True)
                if now - last_memory_check > self.settings.memory_check_s:
                    last_memory_check = now
                    for slot in self._browsers:
                        # A browser that hosted no session yet is at its baseline: never recycle it.
                        if slot.pid and slot.sessions_served and not slot.draining and not slot.dead:
                            pss = await asyncio.to_thread(process_tree_pss_mib, slot.pid)
                            if pss > self.settings.max_browser_mib:
                                log.info("browser pid %s uses %.0f MiB: recycling it", slot.pid, pss)
                                slot.draining = True
                for slot in list(self._browsers):
                    if (slot.draining or slot.dead) and not slot.active:
                        if not slot.dead:
                            self.browser_restarts += 1
                        await self._retire(slot)
                await self._ensure_browsers()
            except Exception:  # the maintenance loop must outlive any one failure
                log.exception("browser pool maintenance failed")

    # ------------------------------------------------------------------ sessions

    @property
    def active_sessions(self) -> int:
        return len(self._sessions)

    def health(self) -> ServerHealth:
        return ServerHealth(
            status="ok" if any(not b.dead for b in self._browsers) else "degraded",
            active_sessions=len(self._sessions) + self._reserved,
            max_sessions=self.settings.max_sessions,
            browsers=sum(not b.dead for b in self._browsers),
            queue_depths={kind: lane.waiting for kind, lane in self.lanes.items()},
            uptime_s=time.monotonic() - self.started_at,
        )

    def metrics_text(self) -> str:
        return render_prometheus(
            lanes=self.lanes.values(),
            active_sessions=len(self._sessions),
            browsers=sum(not b.dead for b in self._browsers),
            browser_restarts=self.browser_restarts,
            errors=self.errors,
            sessions_created=self.sessions_created,
            sessions_expired=self.sessions_expired,
            capture_retries=self.capture_retries,
            blocked_sites=len(self.blocklist.entries()),
        )

    def browser_pids(self) -> list[int]:
        return [b.pid for b in self._browsers if b.pid is not None and not b.dead]

    def _pick_browser(self) -> _Browser:
        usable = [
            b
            for b in self._browsers
            if not b.dead and not b.draining and len(b.active) < self.settings.contexts_per_browser
        ]
        # Sessions of a dead browser wait for their client to hear BrowserCrashed: not counted.
        live = sum(not session.crashed for session in self._sessions.values())
        if not usable or live + self._reserved >= self.settings.max_sessions:
            raise ServerBusy(f"all {self.settings.max_sessions} session slots are in use; retry later")
        return min(usable, key=lambda b: len(b.active))

    async def _open_context(self, slot: _Browser, viewport: tuple[int, int]) -> tuple[BrowserContext, Page]:
        while slot.spare:
            context = slot.spare.pop()
            try:
                page = await context.new_page()
                await page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
                return context, page
            except PlaywrightError:
                with contextlib.suppress(Exception):
                    await context.close()
        context = await slot.browser.new_context(
            viewport={"width": viewport[0], "height": viewport[1]},
            device_scale_factor=1,
            service_workers="block",
            accept_downloads=False,
        )
        await context.add_init_script(_SAME_TAB_SCRIPT)
        await context.route_web_socket(self._refuses_web_socket, self._close_web_socket)
        return context, await context.new_page()

    def _refuses_web_socket(self, url: str) -> bool:
        # WebSockets never pass the page's request interception: Playwright routes those the
        # page opens (not those of workers), and only refused ones; allowed ones connect directly.
        return self.guard.reason(url.replace("ws", "http", 1)) is not None

    async def _close_web_socket(self, ws: Any) -> None:
        log.info("refused WebSocket %s (%s)", ws.url, self.guard.reason(ws.url.replace("ws", "http", 1)))
        await ws.close(code=1008, reason="refused by the URL guard")

    async def _install_guard(self, session: _Session) -> None:
        cdp = await session.context.new_cdp_session(session.page)
        session.cdp = cdp

        async def answer(event: dict, reason: str | None) -> None:
            request_id = event["requestId"]
            try:
                if reason is None:
                    await cdp.send("Fetch.continueRequest", {"requestId": request_id})
                elif event.get("resourceType") == "Document":
                    # A 204 answer cancels a navigation and leaves the current page in place
                    # (a failed request would replace it with an error page).
                    await cdp.send(
                        "Fetch.fulfillRequest",
                        {"requestId": request_id, "responseCode": 204, "responseHeaders": []},
                    )
                else:
                    await cdp.send(
                        "Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"}
                    )
            except PlaywrightError:
                pass  # the page went away while the request was paused

        def on_paused(event: dict) -> None:
            # Decided synchronously, as the event arrives, so that an operation waiting on this
            # page sees the refusal in order with the page's other events.
            url = event["request"]["url"]
            reason = None if url.startswith(("data:", "blob:")) else self.guard.reason(url)
            if event.get("resourceType") == "Document":
                if reason is None:
                    parts = urlsplit(url)
                    session.origins.add(f"{parts.scheme}://{parts.netloc}")
                else:
                    session.refused.append((url, reason))
                    session.committed.set()  # wake a waiting _settle: this navigation ends here
            if reason is not None:
                log.info("session %s: refused %s (%s)", session.id, url, reason)
            task = asyncio.ensure_future(answer(event, reason))
            session.tasks.add(task)
            task.add_done_callback(session.tasks.discard)

        def on_navigated(frame: Any) -> None:
            if frame == session.page.main_frame:
                session.commits += 1
                session.title = None
                session.committed.set()

        def on_requested(event: dict) -> None:
            # Sent by the renderer while it handles the input event, so it arrives before the
            # input call returns: after a click we know at once whether it started a navigation.
            if event.get("frameId") == session.main_frame_id:
                session.document_requests += 1

        session.main_frame_id = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]
        session.page.on("framenavigated", on_navigated)

        def on_started(event: dict) -> None:
            if event.get("frameId") == session.main_frame_id:
                session.loading = True

        def on_stopped(event: dict) -> None:
            # Only a stop that follows a start seen since the action began counts: a late stop
            # of the previous page load must not end the wait for a new navigation.
            if event.get("frameId") == session.main_frame_id and session.loading:
                session.loading = False
                session.stops += 1
                session.committed.set()

        cdp.on("Page.frameRequestedNavigation", on_requested)
        cdp.on("Page.frameStartedLoading", on_started)
        cdp.on("Page.frameStoppedLoading", on_stopped)
        await cdp.send("Page.enable")
        cdp.on("Fetch.requestPaused", on_paused)
        await cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]})

    async def create(self, request: CreateSessionRequest) -> SessionCreated:
        """Open a session on the least-busy browser and load its start URL (and MiniWoB episode)."""
        env = miniwob.parse_environment(request.environment)
        self.guard.check(request.start_url)
        self.blocklist.check(request.start_url)
        async with self.lanes["create"].slot():
            slot = self._pick_browser()
            self._reserved += 1
            slot_key = f"reserved-{secrets.token_hex(4)}"
            slot.active.add(slot_key)
            session: _Session | None = None
            try:
                context, page = await asyncio.wait_for(
                    self._open_context(slot, request.viewport), self.settings.create_timeout_s
                )
                session = _Session(
                    id=secrets.token_urlsafe(12),
                    slot=slot,
                    context=context,
                    page=page,
                    env=env,
                    viewport=request.viewport,
                )
                page.on("crash", lambda _p: setattr(session, "crashed", True))
                await self._install_guard(session)
                slot.sessions_served += 1
                if slot.sessions_served >= self.settings.recycle_after_sessions:
                    slot.draining = True
                    self._spawn(self._ensure_browsers())
                slot.active.add(session.id)
                self._sessions[session.id] = session
                self.sessions_created += 1
            except (TimeoutError, PlaywrightError) as exc:
                if session is not None:
                    await self._end_session(session, reuse=False)
                raise BrowserCrashed(f"could not open a browser context: {exc}") from exc
            finally:
                slot.active.discard(slot_key)
                self._reserved -= 1
        try:
            async with session.lock:
                state = await self._op(
                    session,
                    "navigate",
                    self._goto(session, request.start_url),
                    self.settings.create_timeout_s,
                )
                if state.error:
                    raise BrowserError(f"could not load {request.start_url}: {state.error}")
                if env.kind == "miniwob":
                    await self._op(
                        session,
                        "navigate",
                        miniwob.start_episode(
                            session.page,
                            request.seed,
                            max_time_s=self.settings.miniwob_max_time_s,
                            timeout_s=self.settings.create_timeout_s,
                        ),
                        self.settings.create_timeout_s,
                    )
        except BrowserError:
            if session.id in self._sessions:
                await self._end_session(session, reuse=False)
            raise
        return SessionCreated(
            session_id=session.id,
            environment=env.name,
            viewport=request.viewport,
            url=session.page.url,
            title=state.title,
            browser_pid=slot.pid,
        )

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(
                f"no session {session_id!r} (closed, expired after "
                f"{self.settings.idle_timeout_s:.0f} s idle, or never created)"
            )
        return session

    async def _end_session(self, session: _Session, *, reuse: bool) -> None:
        """Remove a session; keep its context for reuse when it is healthy and storage clears."""
        self._sessions.pop(session.id, None)
        slot = session.slot
        slot.active.discard(session.id)
        for task in list(session.tasks):
            task.cancel()
        keep = (
            reuse
            and not session.crashed
            and not slot.dead
            and not slot.draining
            and len(slot.spare) < self.settings.spare_contexts
        )
        try:
            if keep:
                await asyncio.wait_for(self._clear_context(session), 5)
                slot.spare.append(session.context)
                return
        except Exception as exc:
            log.info("context of session %s not reusable (%s); closing it", session.id, exc)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(session.context.close(), 5)

    async def _clear_context(self, session: _Session) -> None:
        if session.cdp is not None:
            await session.cdp.send("Fetch.disable")
            for origin in session.origins:
                await session.cdp.send(
                    "Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"}
                )
        await session.context.clear_cookies()
        await session.context.clear_permissions()
        await session.page.close()

    async def close_session(self, session_id: str) -> None:
        session = self._get(session_id)
        async with session.lock:
            await self._end_session(session, reuse=True)

    # ------------------------------------------------------------------ operations

    async def _op(self, session: _Session, kind: str, work: Awaitable[T], timeout_s: float) -> T:
        """Run `work` for `session` under its lane and timeout; turn failures into typed errors."""
        if session.crashed or session.slot.dead:
            if hasattr(work, "close"):
                work.close()  # never awaited: close the coroutine so it does not warn
            await self._end_session(session, reuse=False)
            raise BrowserCrashed(f"the browser of session {session.id} died; open a new session")
        session.last_used = time.monotonic()
        try:
            async with self.lanes[kind].slot():
                # asyncio.timeout, not wait_for: no extra task per operation on the hot path.
                async with asyncio.timeout(timeout_s):
                    return await work
        except (TimeoutError, PlaywrightTimeout) as exc:
            alive = await self._responsive(session)
            url = session.page.url if alive else "(unresponsive page)"
            if not alive:
                await self._end_session(session, reuse=False)
                self._check_browser(session.slot)
            error = OperationTimeout(
                f"{kind} on session {session.id} took longer than {timeout_s:g} s "
                f"at {url}" + ("" if alive else "; the page hung and the session is closed")
            )
            error.session_closed = not alive
            raise error from exc
        except PlaywrightError as exc:
            if session.dead:
                await self._end_session(session, reuse=False)
                raise BrowserCrashed(
                    f"the page or browser of session {session.id} died during {kind}: "
                    f"{str(exc).splitlines()[0]}"
                ) from exc
            raise BrowserError(f"{kind} on session {session.id} failed: {str(exc).splitlines()[0]}") from exc
        finally:
            session.last_used = time.monotonic()

    async def _responsive(self, session: _Session) -> bool:
        if session.dead:
            return False
        try:
            await asyncio.wait_for(session.page.evaluate("1"), 1.0)
            return True
        except (TimeoutError, PlaywrightError):
            return False

    def _check_browser(self, slot: _Browser) -> None:
        """After a hung page: make sure its browser still answers, else replace it."""

        async def probe() -> None:
            try:
                await asyncio.wait_for(slot.browser.new_browser_cdp_session(), 5)
            except (TimeoutError, PlaywrightError):
                if not slot.dead:
                    log.warning("browser pid %s does not answer: replacing it", slot.pid)
                    slot.draining = True
                    for session_id in list(slot.active):
                        if session_id in self._sessions:
                            self._sessions[session_id].crashed = True
                    self._spawn(self._ensure_browsers())

        self._spawn(probe())

    @staticmethod
    def _refusal(session: _Session, url: str) -> NavigationRefused:
        refused_url, why = session.refused[-1]
        via = "" if refused_url == url else f" (reached from {url})"
        return NavigationRefused(f"refused {refused_url}{via}: {why}", url=refused_url)

    async def _goto(self, session: _Session, url: str) -> PageState:
        session.refused.clear()
        page = session.page
        try:
            response = await page.goto(
                url, timeout=self.settings.navigate_timeout_s * 1000, wait_until="load"
            )
        except PlaywrightTimeout:
            self.blocklist.record_failure(url, "navigation timeout")
            raise
        except PlaywrightError as exc:
            message = str(exc).splitlines()[0]
            if session.refused:
                raise self._refusal(session, url) from exc
            if session.dead:
                raise
            self.blocklist.record_failure(url, message)
            return PageState(url=page.url, title=await _title(page), error=message)
        if session.refused:
            raise self._refusal(session, url)
        title = session.title = await _title(page)
        if response is not None and response.status in (403, 429) or _looks_blocked(title):
            self.blocklist.record_failure(url, f"HTTP {response.status if response else '?'}: {title!r}")
        else:
            self.blocklist.record_success(url)
        return PageState(url=page.url, title=title)

    async def navigate(self, session_id: str, url: str) -> PageState:
        session = self._get(session_id)
        self.guard.check(url)
        self.blocklist.check(url)
        async with session.lock:
            return await self._op(
                session, "navigate", self._goto(session, url), self.settings.navigate_timeout_s + 2
            )

    async def screenshot(self, session_id: str, request: ScreenshotRequest) -> Screenshot:
        session = self._get(session_id)
        async with session.lock:
            return await self._op(
                session, "screenshot", self._screenshot(session, request), self.settings.action_timeout_s
            )

    async def _screenshot(self, session: _Session, request: ScreenshotRequest) -> Screenshot:
        page = session.page
        clip = miniwob.MINIWOB_CLIP if session.env.kind == "miniwob" else None
        for attempt in range(_CAPTURE_ATTEMPTS):
            try:
                raw = await page.screenshot(
                    type=request.format,
                    clip=clip,
                    scale="css",
                    quality=request.quality if request.format == "jpeg" else None,
                    timeout=self.settings.action_timeout_s * 1000,
                )
                break
            except PlaywrightTimeout:
                raise
            except PlaywrightError as exc:
                # Under CPU load Chromium's compositor sometimes hands back no frame ("Unable to
                # capture screenshot") for a live page. A capture changes nothing, so it is safe
                # to ask again after the page has painted; a dead page is left to `_op`.
                if attempt + 1 == _CAPTURE_ATTEMPTS or session.dead:
                    raise
                log.info(
                    "screenshot of session %s failed (%s); retrying", session.id, str(exc).splitlines()[0]
                )
                self.capture_retries += 1
                await page.evaluate(_NEXT_FRAME)
        width, height = (clip["width"], clip["height"]) if clip else session.viewport
        marks: list[Element] = []
        if request.marks:
            marks = [Element(**e) for e in await page.evaluate(_ELEMENTS_SCRIPT)]
        if request.scale < 1.0 or marks:
            raw, width, height = await asyncio.to_thread(_rework_image, raw, request, marks)
        return Screenshot(
            data=raw,
            sha256=hashlib.sha256(raw).hexdigest(),
            width=width,
            height=height,
            format=request.format,
            marks=marks,
        )

    async def execute(self, session_id: str, action: BrowserAction) -> ExecuteResult:
        session = self._get(session_id)
        if action.kind == "wait":
            # An agent's wait must not hold an execute slot: it only lets the page run.
            session.last_used = time.monotonic()
            await asyncio.sleep(action.seconds or 0)
        async with session.lock:
            return await self._op(
                session,
                "execute",
                self._execute(session, action),
                self.settings.action_timeout_s + (action.seconds or 0),
            )

    async def _settle(self, session: _Session, requests_before: int, commits_before: int) -> None:
        """After an input event: if it started a navigation, wait for its DOMContentLoaded (no sleep)."""
        page = session.page
        if session.document_requests == requests_before:
            # Under load the renderer's navigation request can trail the input call's reply (the
            # input ack and the renderer's DevTools events travel different pipes): one round trip
            # through the renderer on the CDP session that carries those events lets it arrive
            # before we decide nothing navigates. A repeated Page.enable is the cheapest such trip
            # (Playwright's own barrier after input actions); page.evaluate cost more.
            with contextlib.suppress(PlaywrightError):
                await session.cdp.send("Page.enable")
            if session.document_requests == requests_before:
                return
        budget = self.settings.action_timeout_s * 0.8
        deadline = time.monotonic() + budget
        stops_before = session.stops
        while (
            session.commits == commits_before
            and session.stops == stops_before
            and not session.refused
            and time.monotonic() < deadline
        ):
            session.committed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(session.committed.wait(), deadline - time.monotonic())
        with contextlib.suppress(PlaywrightTimeout):
            await page.wait_for_load_state(
                "domcontentloaded", timeout=max(1.0, deadline - time.monotonic()) * 1000
            )

    async def _execute(self, session: _Session, action: BrowserAction) -> ExecuteResult:
        page = session.page
        session.refused.clear()
        requests_before, commits_before = session.document_requests, session.commits
        session.loading = False
        error = ""
        try:
            if action.kind == "click":
                await page.mouse.click(action.x, action.y)
            elif action.kind == "hover":
                await page.mouse.move(action.x, action.y)
            elif action.kind == "type":
                await page.keyboard.type(action.text or "")
                if action.press_enter:
                    await page.keyboard.press("Enter")
            elif action.kind == "key":
                await page.keyboard.press(action.key or "")
            elif action.kind == "scroll":
                width, height = session.viewport
                x = action.x if action.x is not None else width / 2
                y = action.y if action.y is not None else height / 2
                await page.mouse.move(x, y)
                amount = action.amount or 300
                await page.mouse.wheel(0, amount if action.direction == "down" else -amount)
                await page.evaluate(_NEXT_FRAME)
            elif action.kind == "go_back":
                history = await session.cdp.send("Page.getNavigationHistory")
                index, entries = history["currentIndex"], history["entries"]
                # Entry 0 of a new tab is the blank page it was opened with: not a page to go back to.
                if index <= 0 or (index == 1 and entries[0]["url"] == "about:blank"):
                    error = "there is no previous page"
                else:
                    await page.go_back(timeout=self.settings.navigate_timeout_s * 1000)
            elif action.kind == "select":
                error = await page.evaluate(_SELECT_SCRIPT, [action.x, action.y, action.value])
        except PlaywrightTimeout:
            raise
        except PlaywrightError as exc:
            if session.dead:
                raise
            message = str(exc).splitlines()[0]
            if "Unknown key" in message or action.kind in ("key", "type"):
                error = message  # an agent mistake, e.g. a key name Chromium does not know
            else:
                raise
        if action.kind in ("click", "key", "type"):
            await self._settle(session, requests_before, commits_before)
        if session.refused and not error:
            refused_url, why = session.refused[-1]
            error = f"navigation to {refused_url} was refused: {why}"
        # Reading the title costs a round trip to the renderer, so it is re-read only after the
        # page navigated (a commit or a history-API change); a title a script changes in place
        # shows up at the next navigation or page_info.
        if session.commits != commits_before or session.title is None:
            session.title = await _title(page)
        return ExecuteResult(ok=not error, error=error, url=page.url, title=session.title)

    async def page_info(self, session_id: str, request: PageInfoRequest) -> PageInfo:
        session = self._get(session_id)
        async with session.lock:
            return await self._op(
                session, "page_info", self._page_info(session, request), self.settings.action_timeout_s
            )

    async def _page_info(self, session: _Session, request: PageInfoRequest) -> PageInfo:
        page = session.page
        elements = [Element(**e) for e in await page.evaluate(_ELEMENTS_SCRIPT)] if request.elements else []
        tree = None
        if request.accessibility:
            tree = await page.locator("body").aria_snapshot(timeout=self.settings.action_timeout_s * 1000)
        session.title = await _title(page)
        return PageInfo(url=page.url, title=session.title, elements=elements, accessibility=tree)

    async def env_state(self, session_id: str) -> EnvState:
        session = self._get(session_id)
        if session.env.kind != "miniwob":
            return EnvState()
        async with session.lock:
            state = await self._op(
                session, "page_info", miniwob.read_state(session.page), self.settings.action_timeout_s
            )
        return EnvState(**state)


async def _title(page: Page) -> str:
    try:
        return await page.title()
    except PlaywrightError:
        return ""


_BLOCK_TITLES = (
    "captcha",
    "access denied",
    "just a moment",
    "attention required",
    "are you a robot",
    "request blocked",
)


def _looks_blocked(title: str) -> bool:
    lowered = title.lower()
    return any(marker in lowered for marker in _BLOCK_TITLES)


def _rework_image(raw: bytes, request: ScreenshotRequest, marks: list[Element]) -> tuple[bytes, int, int]:
    """Downscale and/or draw Set-of-Marks boxes (numbered by list index); runs in a worker thread."""
    from PIL import Image, ImageDraw

    image = Image.open(io.BytesIO(raw)).convert("RGB")
    if marks:
        draw = ImageDraw.Draw(image)
        for number, mark in enumerate(marks):
            box = (mark.x, mark.y, mark.x + mark.width, mark.y + mark.height)
            draw.rectangle(box, outline=(255, 0, 64), width=2)
            label = str(number)
            left, top = max(0, mark.x), max(0, mark.y - 12)
            draw.rectangle((left, top, left + 7 * len(label) + 4, top + 12), fill=(255, 0, 64))
            draw.text((left + 2, top), label, fill=(255, 255, 255))
    if request.scale < 1.0:
        size = (max(1, round(image.width * request.scale)), max(1, round(image.height * request.scale)))
        image = image.resize(size, Image.Resampling.BILINEAR)
    out = io.BytesIO()
    if request.format == "jpeg":
        image.save(out, format="JPEG", quality=request.quality)
    else:
        image.save(out, format="PNG", compress_level=1)
    return out.getvalue(), image.width, image.height
