"""Where a session's page goes: every request passes the URL guard, every navigation is tracked.

This is the fast layer, in front of the egress proxy (`webgym_rollout.browser.egress`) that every
connection of Chromium passes: it refuses early, with clear errors, what the URL alone tells. Every
request the page (and its dedicated workers) makes is paused by a CDP ``Fetch`` interception on the
page, which (unlike Playwright routes) also sees each hop of a redirect chain, and is decided by
the `UrlGuard` as it arrives: a refused navigation is answered 204 so that the current page stays,
a refused subresource fails. The page's WebSockets go through a Playwright WebSocket route
(`guard_context`), and ``window.open`` and links with a target open in the same tab, where the
interception runs. What this layer does not see (shared and service workers, workers'
WebSockets, a form with a target submitted by script, names that resolve to private addresses)
the egress proxy refuses; a page a script opens anyway is closed at once
(`webgym_rollout.browser.processes.Tabs`).

The same interception records a page's traffic or serves the page from a recording when its
session asks for it (`NavigationTracker.traffic`, `webgym_rollout.browser.traffic`): a request
the guard allows is then answered from the recording instead of continuing, and the guard's
refusals stay as they are.

`NavigationTracker` also counts the main frame's navigations from the page's DevTools events, so
that after an input event an action knows at once whether it started a navigation and can wait for
exactly that one (`NavigationTracker.settle`), with no sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from playwright.async_api import BrowserContext, CDPSession, Page
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from webgym_rollout.browser.guard import UrlGuard
from webgym_rollout.browser.traffic import TrafficRecorder, TrafficReplayer
from webgym_rollout.errors import NavigationRefused

__all__ = ["NavigationTracker", "guard_context", "set_replaying"]

log = logging.getLogger(__name__)

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


_NETWORK_BUFFERS = {"maxTotalBufferSize": 256 * 2**20, "maxResourceBufferSize": 64 * 2**20}
"""Response bodies a recorded page's DevTools session keeps for the recorder to read."""

_REPLAYING: weakref.WeakSet[BrowserContext] = weakref.WeakSet()
"""Contexts whose session replays a recording: their pages' WebSockets are refused."""


def set_replaying(context: BrowserContext, replaying: bool) -> None:
    """Mark `context` as serving a replay (its WebSockets are refused) or not (contexts are reused)."""
    if replaying:
        _REPLAYING.add(context)
    else:
        _REPLAYING.discard(context)


async def guard_context(context: BrowserContext, guard: UrlGuard,
                        on_refused: Callable[[], None] | None = None) -> None:
    """The guard's hooks on a new context: popups stay in their tab; refused WebSockets close
    (each counted by `on_refused`)."""

    def refuses(url: str) -> bool:
        # WebSockets never pass the page's request interception: Playwright routes those the
        # page opens (not those of workers), and only refused ones; allowed ones connect directly.
        # A replayed page has no live WebSocket: a recording holds none.
        return context in _REPLAYING or guard.reason(url.replace("ws", "http", 1)) is not None

    async def close(ws: Any) -> None:
        why = "replay: WebSockets are not recorded" if context in _REPLAYING else guard.reason(
            ws.url.replace("ws", "http", 1))
        log.info("refused WebSocket %s (%s)", ws.url, why)
        if on_refused is not None:
            on_refused()
        await ws.close(code=1008, reason="refused by the URL guard")

    await context.add_init_script(_SAME_TAB_SCRIPT)
    await context.route_web_socket(refuses, close)


class NavigationTracker:
    """The URL guard on one page's requests and the count of its main-frame navigations.

    `install` starts both; until then the counters stay at zero and `cdp` is None.
    """

    def __init__(self, page: Page, guard: UrlGuard, session_id: str,
                 on_refused: Callable[[], None] | None = None):
        self.page, self.guard, self.session_id = page, guard, session_id
        self._on_refused = on_refused
        """Called for each request the guard refuses (the pool's ``/metrics`` counter)."""
        self.cdp: CDPSession | None = None
        """The page's DevTools session (the interception and the navigation events arrive on it)."""
        self.origins: set[str] = set()
        """Origins of the documents the page was allowed to load (their storage is cleared on reuse)."""
        self.main_frame_id = ""
        self.document_requests = 0
        """Main-frame navigations the renderer requested (link clicks, form submits, script)."""
        self.commits = 0
        """Main-frame navigations committed."""
        self.stops = 0
        """Main-frame loads that stopped (finished, or a navigation cancelled without commit)."""
        self.loading = False
        """A main-frame load started since the current action began and has not stopped."""
        self.title: str | None = None
        """The page title as last read (None: read it again; a navigation resets it)."""
        self.committed = asyncio.Event()
        """Set on a commit, a stopped load or a refused navigation: wakes a waiting `settle`."""
        self.refused: list[tuple[str, str]] = []
        """(url, reason) of document requests the guard refused since the last operation began."""
        self.refusals = 0
        """Requests of the page the guard refused over the session's life (documents and others)."""
        self.window_opens = 0
        """New windows (popups, new tabs) the page asked for over the session's life."""
        self.status: int | None = None
        """The HTTP status of the last page load the operations made (None: no response, e.g. a
        network error)."""
        self.document_url = ""
        """The last main-frame document request the guard let through (the egress proxy may still
        refuse it: `webgym_rollout.browser.egress.EgressProxy.outcome`)."""
        self.traffic: TrafficRecorder | TrafficReplayer | None = None
        """Records the page's traffic, or serves the page from a recording (set before `install`;
        `webgym_rollout.browser.traffic`)."""
        self._answers: set[asyncio.Task] = set()

    def begin_action(self) -> tuple[int, int]:
        """Forget the last operation's refusals and loads before an input event; returns the
        (document requests, commits) counters to hand to `settle` afterwards."""
        self.refused.clear()
        self.document_url = ""
        self.loading = False
        return self.document_requests, self.commits

    def refusal(self, url: str) -> NavigationRefused:
        """The error for the last refused navigation, reached by loading `url`."""
        refused_url, why = self.refused[-1]
        via = "" if refused_url == url else f" (reached from {url})"
        return NavigationRefused(f"refused {refused_url}{via}: {why}", url=refused_url)

    async def install(self, context: BrowserContext) -> None:
        """Open the page's DevTools session, follow its navigations and intercept its requests."""
        cdp = self.cdp = await context.new_cdp_session(self.page)
        self.main_frame_id = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]
        self.page.on("framenavigated", self._on_navigated)
        cdp.on("Page.windowOpen", self._on_window_open)
        cdp.on("Page.frameRequestedNavigation", self._on_requested)
        cdp.on("Page.frameStartedLoading", self._on_started)
        cdp.on("Page.frameStoppedLoading", self._on_stopped)
        await cdp.send("Page.enable")
        cdp.on("Fetch.requestPaused", self._on_paused)
        if self.traffic is not None:
            await self._follow_traffic(cdp)
        await cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]})

    async def _follow_traffic(self, cdp: CDPSession) -> None:
        """Record the page's traffic, or prepare to answer it from a recording."""
        # A recorded page must fetch everything it shows (the HTTP cache, shared by the
        # context's sessions, would hide responses from the recording); a replayed one must
        # be answered from its recording, not from what an earlier session cached.
        recording = isinstance(self.traffic, TrafficRecorder)
        if recording:
            self.traffic.attach(cdp)
        # Chromium keeps the bodies the recorder reads until then (the defaults are smaller).
        await cdp.send("Network.enable", _NETWORK_BUFFERS if recording
                       else {"maxTotalBufferSize": 0, "maxResourceBufferSize": 0})
        await cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})

    async def _answer(self, event: dict, reason: str | None) -> None:
        """Let a paused request through, or refuse it (`reason`)."""
        cdp = self.cdp
        request_id = event["requestId"]
        try:
            if reason is None:
                await cdp.send(*self._pass(event))
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

    def _on_paused(self, event: dict) -> None:
        # Decided synchronously, as the event arrives, so that an operation waiting on this
        # page sees the refusal in order with the page's other events.
        url = event["request"]["url"]
        reason = None if url.startswith(("data:", "blob:")) else self.guard.reason(url)
        if event.get("resourceType") == "Document":
            if reason is None:
                parts = urlsplit(url)
                self.origins.add(f"{parts.scheme}://{parts.netloc}")
                if event.get("frameId") == self.main_frame_id:
                    self.document_url = url
            else:
                self.refused.append((url, reason))
                self.committed.set()  # wake a waiting settle: this navigation ends here
        if reason is not None:
            self.refusals += 1
            if self._on_refused is not None:
                self._on_refused()
            log.info("session %s: refused %s (%s)", self.session_id, url, reason)
        task = asyncio.ensure_future(self._answer(event, reason))
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)

    def _on_navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.commits += 1
            self.title = None
            self.committed.set()

    def _on_requested(self, event: dict) -> None:
        # Sent by the renderer while it handles the input event, so it arrives before the
        # input call returns: after a click we know at once whether it started a navigation.
        if event.get("frameId") == self.main_frame_id:
            self.document_requests += 1

    def _on_started(self, event: dict) -> None:
        if event.get("frameId") == self.main_frame_id:
            self.loading = True

    def _on_stopped(self, event: dict) -> None:
        # Only a stop that follows a start seen since the action began counts: a late stop
        # of the previous page load must not end the wait for a new navigation.
        if event.get("frameId") == self.main_frame_id and self.loading:
            self.loading = False
            self.stops += 1
            self.committed.set()

    def _on_window_open(self, _event: dict) -> None:
        # Sent while the renderer opens the window, before the new page is announced: an
        # action that opened one waits for it to be closed and reported (`Tabs.wait_seen`).
        self.window_opens += 1

    def _pass(self, event: dict) -> tuple[str, dict]:
        """The CDP command that lets an allowed request through: on to the network, or, in a
        replay, answered from the recording (or failed, when the recording lacks it)."""
        request_id = event["requestId"]
        replay = self.traffic
        if not isinstance(replay, TrafficReplayer) or event["request"]["url"].startswith(("data:", "blob:")):
            return "Fetch.continueRequest", {"requestId": request_id}
        exchange = replay.take(event["request"])
        if exchange is not None:
            return "Fetch.fulfillRequest", replay.fulfill_params(request_id, exchange)
        request = event["request"]
        replay.misses.append(f"{request.get('method', 'GET')} {request['url']}")
        if replay.live_fallback:
            replay.live += 1
            return "Fetch.continueRequest", {"requestId": request_id}
        log.info("session %s: replay has no %s; failing it", self.session_id, replay.misses[-1])
        return "Fetch.failRequest", {"requestId": request_id, "errorReason": "InternetDisconnected"}

    async def settle(self, requests_before: int, commits_before: int, budget_s: float,
                     probe: str | None = None) -> tuple[bool, Any]:
        """After an input event: if it started a navigation, wait (at most `budget_s`) for its
        DOMContentLoaded; return at once when it started none.

        `probe`: a JavaScript function (source) to evaluate in the page as the round trip that
        decides whether the event navigated (see below). Returns ``(True, its value)`` when the
        event started no navigation (the value is what the page holds after the event), else
        ``(False, None)`` (also without a probe, or when it failed): read the page again then."""
        if self.document_requests == requests_before:
            # Under load the renderer's navigation request can trail the input call's reply (the
            # input ack and the renderer's DevTools events travel different pipes): one round trip
            # through the renderer on the CDP session that carries those events lets it arrive
            # before we decide nothing navigates (the renderer sends a session's pending events
            # before any reply on it). A repeated Page.enable is the cheapest such trip
            # (Playwright's own barrier after input actions; page.evaluate cost more); with a
            # probe, the probe's own evaluation is the trip, and a read the caller needs anyway.
            value: tuple[bool, Any] = (False, None)
            with contextlib.suppress(PlaywrightError):
                value = await self._round_trip(probe)
            if self.document_requests == requests_before:
                return value
        deadline = time.monotonic() + budget_s
        stops_before = self.stops
        while (
            self.commits == commits_before
            and self.stops == stops_before
            and not self.refused
            and time.monotonic() < deadline
        ):
            self.committed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.committed.wait(), deadline - time.monotonic())
        with contextlib.suppress(PlaywrightTimeout):
            await self.page.wait_for_load_state(
                "domcontentloaded", timeout=max(1.0, deadline - time.monotonic()) * 1000
            )
        return False, None

    async def _round_trip(self, probe: str | None) -> tuple[bool, Any]:
        """One round trip through the renderer on `cdp`: `probe` evaluated in the page's main
        world (``(True, value)``; ``(False, None)`` when it threw), or a repeated Page.enable."""
        if probe is None:
            await self.cdp.send("Page.enable")
            return False, None
        reply = await self.cdp.send("Runtime.evaluate", {"expression": f"({probe})()", "returnByValue": True,
                                                         "awaitPromise": True})
        if "exceptionDetails" in reply:
            return False, None
        return True, reply.get("result", {}).get("value")

    async def read_title(self) -> str:
        """The page's title, read in one round trip on the page's DevTools session ("" when the
        page is between documents, or its script made the title something other than a string).

        Cheaper than Playwright's ``page.title()`` (measured 2.2 against 4.2 ms per read beside a
        page load): it is read in the page's own script world, so a page that redefines
        ``document.title`` is believed, as it would be for the title it shows anyway."""
        if self.cdp is None:
            return ""
        try:
            reply = await self.cdp.send("Runtime.evaluate", {"expression": "document.title",
                                                             "returnByValue": True})
        except PlaywrightError:
            return ""
        value = reply.get("result", {}).get("value")
        return value if isinstance(value, str) and "exceptionDetails" not in reply else ""

    async def wait_for_commit(self, commits_before: int, budget_s: float) -> None:
        """Wait (at most `budget_s`) until a main-frame commit after `commits_before` was seen (a
        failed navigation commits Chromium's error page a moment after Playwright reports it)."""
        deadline = time.monotonic() + budget_s
        while self.commits == commits_before and time.monotonic() < deadline:
            self.committed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.committed.wait(), deadline - time.monotonic())

    async def stop(self) -> None:
        """Stop intercepting the page's requests (before its context is cleared for reuse)."""
        if self.cdp is not None:
            await self.cdp.send("Fetch.disable")

    def cancel(self) -> None:
        """Drop the answers to paused requests still in flight (the session ends)."""
        for task in list(self._answers):
            task.cancel()
