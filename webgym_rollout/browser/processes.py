"""Chromium processes and their contexts: launching, replacing, recycling, reusing contexts.

`ChromiumProcesses` keeps ``settings.browsers`` healthy Chromium processes running (Playwright's
async API driving Debian's ``chromium-headless-shell`` through ``executable_path``, with
`CHROMIUM_ARGS`). Each `ChromiumProcess` hosts up to ``contexts_per_browser`` sessions, one
browser context each. The life of a process:

- it is launched at start and whenever fewer than ``browsers`` usable ones run (in parallel);
- a process that dies is replaced at once; its sessions are reported lost (``on_lost``);
- a process that no longer answers after a hung page (`check_responsive`) is drained and its
  sessions are reported lost;
- a process is recycled: drained (no new sessions) after ``recycle_after_sessions`` sessions or
  when its process tree passes ``max_browser_mib`` of PSS (read every ``memory_check_s``), then
  closed once its last session ended (`maintain`), or killed if it will not close.

Every connection of every process goes through the egress proxy: `ChromiumProcesses` launches
Chromium with the flags its ``launch_args`` callable returns (`webgym_rollout.browser.egress`).

A context holds one page, the session's own: any other page it opens (a popup a script opened
despite the same-tab script of `webgym_rollout.browser.navigation`, e.g. a form with
``target=_blank`` submitted by script) is closed at once and its URL kept for the session to
report (`Tabs`). A session's context is kept for the next session (up to ``spare_contexts`` per
process) once `clear_context` has cleared its cookies, permissions and per-origin storage and closed
every page of it (a new page has no history). A new context gets ``prepare_context`` (the URL
guard's hooks, see `webgym_rollout.browser.navigation`) before its first page opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil
from playwright.async_api import Browser, BrowserContext, CDPSession, Page, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError

from webgym_rollout.browser.settings import DEFAULT_CHROMIUM, PoolSettings
from webgym_rollout.errors import BrowserError

__all__ = [
    "CHROMIUM_ARGS",
    "DEFAULT_CHROMIUM",
    "ChromiumProcess",
    "ChromiumProcesses",
    "Tabs",
    "clear_context",
    "process_tree_pss_mib",
]

log = logging.getLogger(__name__)

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


class Tabs:
    """The pages of one context: the session's own page, and every other page the context opens,
    which is closed at once (its URL kept in `popups` until `take_popups`)."""

    def __init__(self, context: BrowserContext, on_popup: Callable[[], None] = lambda: None):
        self.context = context
        self._on_popup = on_popup
        self.page: Page | None = None
        """The session's own page (None between sessions)."""
        self.popups: list[str] = []
        """URLs of the pages closed at once since the last `take_popups`."""
        self.seen = 0
        """Pages the context opened on its own (closed at once) over its life."""
        self._seen_changed = asyncio.Event()
        self._opening = False
        self._closing: set[asyncio.Task] = set()
        context.on("page", self._on_page)

    async def new_page(self) -> Page:
        """Open the session's own page (the one page of the context that is not closed at once)."""
        self._opening = True
        try:
            self.page = await self.context.new_page()
        finally:
            self._opening = False
        return self.page

    def _on_page(self, page: Page) -> None:
        # Playwright emits "page" before new_page returns: the page being opened is the session's.
        if self._opening:
            return
        self.popups.append(page.url)
        self.seen += 1
        self._seen_changed.set()
        log.info("closing a page the context opened: %s", page.url)
        task = asyncio.ensure_future(_close_page(page, self._on_popup))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def wait_seen(self, count: int, budget_s: float) -> None:
        """Wait (at most `budget_s`) until `seen` reaches `count` and those pages are closed: a
        page the renderer asked for is announced a moment later, on another DevTools session."""
        deadline = time.monotonic() + budget_s
        while self.seen < count and time.monotonic() < deadline:
            self._seen_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._seen_changed.wait(), deadline - time.monotonic())
        if self._closing and time.monotonic() < deadline:
            await asyncio.wait(set(self._closing), timeout=deadline - time.monotonic())

    def take_popups(self) -> list[str]:
        """The URLs of the pages closed at once since the last call."""
        taken, self.popups = self.popups, []
        return taken

    async def close_all(self) -> None:
        """Close every page of the context (the session's own included)."""
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        for page in list(self.context.pages):
            await page.close()
        self.page = None
        self.popups.clear()


async def _close_page(page: Page, closed: Callable[[], None]) -> None:
    with contextlib.suppress(PlaywrightError):
        await page.close()
    closed()


@dataclass(eq=False)
class ChromiumProcess:
    """One Chromium browser process and the sessions it hosts."""

    browser: Browser
    pid: int | None
    sessions_served: int = 0
    active: set[str] = field(default_factory=set)
    """Ids of the sessions it hosts (and of places reserved for sessions being opened)."""
    spare: list[Tabs] = field(default_factory=list)
    """Cleared contexts (with no page) waiting for the next session."""
    draining: bool = False
    """Takes no new sessions; closed once the last one ends."""
    dead: bool = False


async def clear_context(tabs: Tabs, cdp: CDPSession | None, origins: Iterable[str]) -> None:
    """Make a used context fit for the next session: the storage of every origin its page visited,
    its cookies and permissions are cleared and every page of it is closed (a new page has no
    history)."""
    if cdp is not None:
        for origin in origins:
            await cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
    await tabs.context.clear_cookies()
    await tabs.context.clear_permissions()
    await tabs.close_all()


class ChromiumProcesses:
    """The running Chromium processes (see the module docstring); `start` first, `close` last.

    `prepare_context(context)` runs on every new context; `on_lost(process)` is called when a
    process died or stopped answering, so that its sessions can be marked as crashed;
    `launch_args()` gives the flags that route a new process through the egress proxy (required:
    no browser starts outside it).
    """

    def __init__(
        self,
        settings: PoolSettings,
        *,
        prepare_context: Callable[[BrowserContext], Awaitable[None]],
        on_lost: Callable[[ChromiumProcess], None],
        launch_args: Callable[[], Sequence[str]],
    ):
        self.settings = settings
        self._launch_args = launch_args
        self.restarts = 0
        """Processes replaced after a crash, recycling or the memory bound."""
        self.popups_closed = 0
        """Pages closed at once (and done closing) because a session's context opened them (`Tabs`)."""
        self._prepare_context = prepare_context
        self._on_lost = on_lost
        self._playwright: Playwright | None = None
        self._processes: list[ChromiumProcess] = []
        self._launch_lock = asyncio.Lock()
        self._background: set[asyncio.Task] = set()
        self._last_memory_check = 0.0
        self._closing = False

    def __len__(self) -> int:
        """Processes held, the dead and draining ones that are not retired yet included."""
        return len(self._processes)

    @property
    def live(self) -> int:
        """Processes that have not died."""
        return sum(not p.dead for p in self._processes)

    def live_processes(self) -> list[ChromiumProcess]:
        """The processes that have not died (draining ones included)."""
        return [p for p in self._processes if not p.dead]

    def pids(self) -> list[int]:
        """Process ids of the live processes."""
        return [p.pid for p in self._processes if p.pid is not None and not p.dead]

    async def start(self) -> None:
        if not os.access(self.settings.executable_path, os.X_OK):
            raise BrowserError(
                f"Chromium not found at {self.settings.executable_path}; install "
                "chromium-headless-shell or pass --executable-path / set WEBGYM_CHROMIUM"
            )
        self._playwright = await async_playwright().start()
        await self.ensure()

    async def close(self) -> None:
        """Close every process, then Playwright."""
        self._closing = True
        for task in list(self._background):
            task.cancel()
        for process in list(self._processes):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.browser.close(), 10)
        self._processes.clear()
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _launch(self) -> ChromiumProcess:
        assert self._playwright is not None
        marker = f"--webgym-browser={secrets.token_hex(6)}"
        args = [*CHROMIUM_ARGS, *self._launch_args(), *self.settings.extra_args, marker]
        browser = await self._playwright.chromium.launch(
            executable_path=self.settings.executable_path, args=args
        )
        process = ChromiumProcess(browser=browser, pid=_find_browser_pid(marker))
        browser.on("disconnected", lambda _b: self._on_disconnected(process))
        log.info("launched browser pid %s", process.pid)
        return process

    async def ensure(self) -> None:
        """Launch processes until `settings.browsers` healthy, non-draining ones run."""
        async with self._launch_lock:
            while not self._closing:
                usable = [p for p in self._processes if not p.dead and not p.draining]
                missing = self.settings.browsers - len(usable)
                if missing <= 0:
                    return
                # In parallel: start-up time is what an operator waits for.
                self._processes.extend(await asyncio.gather(*(self._launch() for _ in range(missing))))

    def _on_disconnected(self, process: ChromiumProcess) -> None:
        if process.dead or self._closing:
            return
        process.dead = True
        self.restarts += 1
        log.warning("browser pid %s died with %d sessions; replacing it", process.pid, len(process.active))
        self._on_lost(process)
        self._spawn(self.ensure())

    def check_responsive(self, process: ChromiumProcess) -> None:
        """After a hung page: make sure its process still answers, else replace it (in the background)."""

        async def probe() -> None:
            try:
                await asyncio.wait_for(process.browser.new_browser_cdp_session(), 5)
            except (TimeoutError, PlaywrightError):
                if not process.dead:
                    log.warning("browser pid %s does not answer: replacing it", process.pid)
                    process.draining = True
                    self._on_lost(process)
                    self._spawn(self.ensure())

        self._spawn(probe())

    async def _retire(self, process: ChromiumProcess) -> None:
        with contextlib.suppress(ValueError):
            self._processes.remove(process)
        process.dead = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.browser.close(), 10)
        if process.pid is not None:  # a browser that would not close (stuck renderer) is killed
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(process.pid)
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()

    async def maintain(self, now: float) -> None:
        """The memory bound (every ``memory_check_s``), retiring drained and dead processes that
        host no session, and replacements; the pool calls this about every second."""
        if now - self._last_memory_check > self.settings.memory_check_s:
            self._last_memory_check = now
            for process in self._processes:
                # A browser that hosted no session yet is at its baseline: never recycle it.
                if process.pid and process.sessions_served and not process.draining and not process.dead:
                    pss = await asyncio.to_thread(process_tree_pss_mib, process.pid)
                    if pss > self.settings.max_browser_mib:
                        log.info("browser pid %s uses %.0f MiB: recycling it", process.pid, pss)
                        process.draining = True
        for process in list(self._processes):
            if (process.draining or process.dead) and not process.active:
                if not process.dead:
                    self.restarts += 1
                await self._retire(process)
        await self.ensure()

    def least_busy(self) -> ChromiumProcess | None:
        """The usable process with the fewest sessions, or None when every one is full."""
        usable = [
            p
            for p in self._processes
            if not p.dead and not p.draining and len(p.active) < self.settings.contexts_per_browser
        ]
        return min(usable, key=lambda p: len(p.active)) if usable else None

    def count_session(self, process: ChromiumProcess) -> None:
        """A session opened on `process`: drain it once it has served ``recycle_after_sessions``."""
        process.sessions_served += 1
        if process.sessions_served >= self.settings.recycle_after_sessions:
            process.draining = True
            self._spawn(self.ensure())

    async def open_context(self, process: ChromiumProcess, viewport: tuple[int, int]) -> Tabs:
        """A context with one new page at `viewport`: a spare one when there is one, else a new one."""
        while process.spare:
            tabs = process.spare.pop()
            try:
                page = await tabs.new_page()
                await page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
                return tabs
            except PlaywrightError:
                with contextlib.suppress(Exception):
                    await tabs.context.close()
        context = await process.browser.new_context(
            viewport={"width": viewport[0], "height": viewport[1]},
            device_scale_factor=1,
            service_workers="block",
            accept_downloads=False,
        )
        await self._prepare_context(context)
        tabs = Tabs(context, self._count_popup)
        await tabs.new_page()
        return tabs

    def _count_popup(self) -> None:
        self.popups_closed += 1

    def takes_spare(self, process: ChromiumProcess) -> bool:
        """Whether `process` keeps another cleared context for reuse."""
        return not process.dead and not process.draining and len(process.spare) < self.settings.spare_contexts
