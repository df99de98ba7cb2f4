"""The operations on a session's page, each in its kind's lane and under a timeout.

`Operations` runs ``navigate``, ``screenshot``, ``execute``, ``page_info`` and ``env_state`` (and a
new session's first page load, `open`), and ``act``: an agent step in one operation, the action in
the execute lane, then the next observation (screenshot, the page's own state, elements) in the
screenshot lane, under one hold of the session's lock; the screenshot (and a state a script reads)
is taken beside the action's check for a navigation and kept when nothing navigated, as a direct
Playwright caller would take it. Every operation holds its session's lock
(operations on one session run one at a time), then a slot of its kind's `Lane` (bounded queue +
concurrency limit: sessions never wait for each other except there), and runs under a timeout
(`run`). Failures stay with their session and come out typed:

- a timeout (a page stuck in ``while(true){}``, a load that never ends) raises `OperationTimeout`,
  whose message names the limit that ran out (``--navigate-timeout-s``, ...); if the page no longer
  answers, the session is discarded and its process checked;
- a dead page or browser process raises `BrowserCrashed` and the session is discarded;
- any other Playwright failure raises `BrowserError` and the session stays;
- agent mistakes (an unknown key, selecting on something that is not a ``<select>``, a click that
  leads to a refused URL) come back as ``ExecuteResult(ok=False, error=...)``; pages the action
  (or the page on its own) opened and the server closed come back in ``ExecuteResult.popups``.

A navigation the egress proxy refused (a name that resolves to a private address) is named as a
refusal like one the URL guard refused, and the page goes back to where it was: a refused
navigation leaves the page in place, and every URL returned is the page actually shown (after a
failed load, Chromium's error page). Page loads feed the `SiteBlocklist` (timeouts, network
failures, block pages such as captchas), keyed on origin: a session's start page counts for the
site, an agent's navigation for its session alone, and a replayed session's loads not at all (what
fails there is its recording, not the site); see `webgym_rollout.browser.blocklist`.
A screenshot that Chromium fails to capture on a live page is taken again after the next frame.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from webgym_rollout.browser.blocklist import SiteBlocklist
from webgym_rollout.browser.egress import EGRESS_HEADER, EGRESS_REASON_HEADER, EgressProxy
from webgym_rollout.browser.guard import UrlGuard
from webgym_rollout.browser.lanes import Lane
from webgym_rollout.browser.pages import keeps_state, state_probe
from webgym_rollout.browser.processes import ChromiumProcesses
from webgym_rollout.browser.protocol import (
    ActRequest,
    ActResult,
    AxNode,
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
)
from webgym_rollout.browser.session import Session
from webgym_rollout.browser.settings import PoolSettings
from webgym_rollout.browser.traffic import TrafficReplayer
from webgym_rollout.errors import (
    BrowserCrashed,
    BrowserError,
    InvalidRequest,
    NavigationRefused,
    OperationTimeout,
    ServerBusy,
)

__all__ = ["Operations"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# Reads the interactive elements in the viewport and, with `withTree`, the accessibility tree in one
# evaluation: a tree node that is one of the listed elements carries its 1-based id in that list.
_ELEMENTS_SCRIPT = """(withTree) => {
  const selector = 'a[href], button, input, select, textarea, summary, label[for], [role=button], ' +
    '[role=link], [role=checkbox], [role=radio], [role=tab], [role=menuitem], [role=option], ' +
    '[role=textbox], [role=combobox], [onclick], [contenteditable=""], [contenteditable=true], ' +
    '[tabindex]:not([tabindex="-1"])';
  const implicit = {A: 'link', BUTTON: 'button', INPUT: 'textbox', SELECT: 'combobox', TEXTAREA: 'textbox',
                    SUMMARY: 'button', LABEL: 'label'};
  const out = [];
  const ids = new Map();
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
    // A checkbox or radio button is named by its label (its value is often just "on").
    const choice = el.tagName === 'INPUT' && ['checkbox', 'radio'].includes(el.type);
    const label = choice ? ((el.labels && el.labels[0] && el.labels[0].innerText) || '') : '';
    const text = (label || el.innerText || el.value || el.getAttribute('aria-label')
                  || el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('alt')
                  || '').trim().replace(/\\s+/g, ' ');
    out.push({x: r.x, y: r.y, width: r.width, height: r.height, tag: el.tagName.toLowerCase(), role,
              text: text.slice(0, 200), name: (el.id || el.getAttribute('name') || '').slice(0, 100)});
    ids.set(el, out.length);
  }
  if (!withTree) return {elements: out, axtree: []};

  const MAX_NODES = 2000, MAX_DEPTH = 60, MAX_NAME = 200;
  const clean = (s) => (s || '').replace(/\\s+/g, ' ').trim().slice(0, MAX_NAME);
  const skipTags = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'svg', 'SVG']);
  const tagRoles = {A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox', SUMMARY: 'button',
    LABEL: 'label', IMG: 'img', H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading',
    H6: 'heading', UL: 'list', OL: 'list', LI: 'listitem', TABLE: 'table', TR: 'row', TD: 'cell',
    TH: 'columnheader', NAV: 'navigation', MAIN: 'main', FORM: 'form', HEADER: 'banner',
    FOOTER: 'contentinfo', ASIDE: 'complementary', OPTION: 'option', FIELDSET: 'group', LEGEND: 'legend',
    DIALOG: 'dialog', P: 'paragraph', PROGRESS: 'progressbar', HR: 'separator'};
  const inputRoles = {checkbox: 'checkbox', radio: 'radio', button: 'button', submit: 'button',
    reset: 'button', image: 'button', range: 'slider', number: 'spinbutton', search: 'searchbox'};
  // Roles whose name is their text content: their text is not repeated as text nodes below them.
  const fromContent = new Set(['link', 'button', 'heading', 'option', 'tab', 'menuitem', 'label', 'cell',
    'columnheader', 'checkbox', 'radio', 'legend']);
  const roleOf = (el) => {
    const explicit = (el.getAttribute('role') || '').trim().split(/\\s+/)[0];
    if (explicit) return explicit;
    if (el.tagName === 'INPUT') return inputRoles[el.type] || 'textbox';
    if (el.tagName === 'A' && !el.hasAttribute('href')) return '';
    // A label of nothing is just text.
    if (el.tagName === 'LABEL' && !el.htmlFor && !el.querySelector('input, select, textarea')) return '';
    return tagRoles[el.tagName] || '';
  };
  // A node's own text: its text nodes and those of its inline children without a role (a sentence
  // with a bold word stays one sentence); children with a role, elements and blocks are nodes of
  // their own. `plain` says which children the text took in, so they do not repeat it.
  const plain = (c) => !ids.has(c) && !roleOf(c) && !skipTags.has(c.tagName) && !hidden(c)
    && getComputedStyle(c).display.startsWith('inline');
  const rawText = (el) => Array.from(el.childNodes).map(n => n.nodeType === 3 ? n.textContent
    : (n.nodeType === 1 && plain(n) ? rawText(n) : ' ')).join('');
  const ownText = (el) => clean(rawText(el));
  const nameOf = (el, role) => {
    const aria = el.getAttribute('aria-label');
    if (aria && aria.trim()) return clean(aria);
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const named = by.split(/\\s+/).map(id => document.getElementById(id)).filter(Boolean)
        .map(n => n.innerText || n.textContent).join(' ');
      if (clean(named)) return clean(named);
    }
    if (el.id && ['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName)) {
      const label = document.querySelector('label[for="' + CSS.escape(el.id) + '"]');
      if (label && clean(label.innerText)) return clean(label.innerText);
    }
    if (['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName) && el.closest('label')) {
      const wrapping = clean(el.closest('label').innerText);
      if (wrapping) return wrapping;
    }
    for (const attr of ['alt', 'title', 'placeholder']) {
      const value = el.getAttribute(attr);
      if (value && value.trim()) return clean(value);
    }
    if (el.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes(el.type)) return clean(el.value);
    if (el.tagName === 'SELECT') return '';
    if (fromContent.has(role) || ids.has(el)) return clean(el.innerText || el.textContent);
    return '';
  };
  const hidden = (el) => {
    if (el.getAttribute('aria-hidden') === 'true' || el.hidden) return true;
    const style = getComputedStyle(el);
    return style.display === 'none' || style.visibility === 'hidden';
  };
  const nodes = [];
  const walk = (el, depth, named) => {
    if (nodes.length >= MAX_NODES || depth > MAX_DEPTH || skipTags.has(el.tagName)) return;
    if (el.tagName !== 'OPTION' && hidden(el)) return;
    const element = ids.get(el) || null;
    let role = roleOf(el);
    if (element !== null) role = out[element - 1].role || role || 'generic';
    let keep = Boolean(role), name = keep ? nameOf(el, role) : '', ownsText = false;
    if (!name && !named && !fromContent.has(role) && element === null) {
      name = ownText(el);
      ownsText = name !== '';
      if (name && !keep) { role = 'text'; keep = true; }
    }
    // Inside text already named, a node named by its content alone would only repeat it.
    if (keep && named && element === null && fromContent.has(role)) keep = false;
    if (keep) nodes.push({depth, role, name, element});
    const childDepth = keep ? depth + 1 : depth;
    // Text already in a name is not repeated by the nodes below (nodes with a role still follow).
    const childNamed = named || (keep && name !== '' && fromContent.has(role));
    for (const child of el.children) walk(child, childDepth, childNamed || (ownsText && plain(child)));
  };
  if (document.body) walk(document.body, 0, false);
  return {elements: out, axtree: nodes};
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
# How long a failed navigation may take to commit Chromium's error page (it usually takes ms; seconds
# on a loaded machine); within the navigation's own limit.
_ERROR_PAGE_COMMIT_S = 5.0
_GO_BACK_ATTEMPTS = 4
"""Tries at leaving the error page of a refused navigation, `_GO_BACK_PAUSE_S` longer apart each."""
_GO_BACK_PAUSE_S = 0.1
_NEXT_FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"
_BLOCK_TITLES = (
    "captcha",
    "access denied",
    "just a moment",
    "attention required",
    "are you a robot",
    "request blocked",
)


class _LimitReached(TimeoutError):
    """A Playwright call ran out of its own time limit: the message names that limit."""

    def __init__(self, seconds: float, flag: str):
        super().__init__(f"{seconds:g} s ({flag})")
        self.limit = str(self)


class Operations:
    """The operations of a `BrowserPool` (see the module docstring).

    `discard(session)` removes a session whose page or process is gone (the pool's session table);
    `capture_retries` counts screenshots taken again.
    """

    def __init__(
        self,
        settings: PoolSettings,
        *,
        lanes: Mapping[str, Lane],
        guard: UrlGuard,
        blocklist: SiteBlocklist,
        processes: ChromiumProcesses,
        egress: EgressProxy,
        discard: Callable[[Session], Awaitable[None]],
    ):
        self.settings = settings
        self.lanes, self.guard, self.blocklist, self.processes = lanes, guard, blocklist, processes
        self.egress = egress
        self._discard = discard
        self.capture_retries = 0

    # ------------------------------------------------------------------ lanes and failures

    async def run(self, session: Session, kind: str, work: Awaitable[T], timeout_s: float, limit: str) -> T:
        """Run `work` for `session` under its lane and `timeout_s`; turn failures into typed errors.
        `limit` names the configured limit for the timeout's message (``"10 s (--action-timeout-s)"``):
        `timeout_s` may hold some slack over it, so that Playwright's own timeout fires first."""
        if session.crashed or session.process.dead:
            _never_run(work)
            await self._discard(session)
            raise BrowserCrashed(f"the browser of session {session.id} died; open a new session")
        session.last_used = time.monotonic()
        try:
            async with self.lanes[kind].slot():
                # asyncio.timeout, not wait_for: no extra task per operation on the hot path.
                async with asyncio.timeout(timeout_s):
                    return await work
        except ServerBusy:  # the lane's queue is full: the work never started
            _never_run(work)
            raise
        except (TimeoutError, PlaywrightTimeout) as exc:
            alive = await self._responsive(session)
            url = session.page.url if alive else "(unresponsive page)"
            if not alive:
                await self._discard(session)
                self.processes.check_responsive(session.process)
            ran_out = exc.limit if isinstance(exc, _LimitReached) else limit
            error = OperationTimeout(
                f"{kind} on session {session.id} did not finish within its limit of {ran_out} "
                f"at {url}" + ("" if alive else "; the page hung and the session is closed")
            )
            error.session_closed = not alive
            raise error from exc
        except PlaywrightError as exc:
            if session.dead:
                await self._discard(session)
                raise BrowserCrashed(
                    f"the page or browser of session {session.id} died during {kind}: "
                    f"{str(exc).splitlines()[0]}"
                ) from exc
            raise BrowserError(f"{kind} on session {session.id} failed: {str(exc).splitlines()[0]}") from exc
        finally:
            session.last_used = time.monotonic()

    async def _responsive(self, session: Session) -> bool:
        if session.dead:
            return False
        try:
            await asyncio.wait_for(session.page.evaluate("1"), 1.0)
            return True
        except (TimeoutError, PlaywrightError):
            return False

    # ------------------------------------------------------------------ navigation

    async def open(self, session: Session, request: CreateSessionRequest, argument: str) -> PageState:
        """A new session's first page: its start URL, then its task kind's `start_page` (in the
        navigate lane, bounded by ``create_timeout_s``)."""
        async with session.lock:
            work = self._open_page(session, request, argument)
            limit = f"{self.settings.create_timeout_s:g} s (--create-timeout-s)"
            return await self.run(session, "navigate", work, self.settings.create_timeout_s, limit)

    async def _open_page(self, session: Session, request: CreateSessionRequest, argument: str) -> PageState:
        state = await self._goto(session, request.start_url, start=True)
        if state.error:
            raise BrowserError(f"could not load {request.start_url}: {state.error}")
        status = session.navigation.status
        if session.hooks.takes_argument and status is not None and status >= 400:
            # The kind's page is missing: waiting for it to start would only run out of time.
            raise InvalidRequest(f"environment {request.environment!r}: its start page {request.start_url} "
                                 f"answered HTTP {status} ({state.title!r}); the site server has no such "
                                 "page (check the task's environment string)")
        await session.hooks.start_page(
            session.page,
            argument,
            request.seed,
            max_time_s=self.settings.episode_max_time_s,
            timeout_s=self.settings.create_timeout_s,
        )
        return state

    async def navigate(self, session: Session, url: str) -> PageState:
        self.guard.check(url)
        self.blocklist.check(url, session.id)
        limit_s = self.settings.navigate_timeout_s
        async with session.lock:
            # Playwright's own timeout (limit_s) fires first; the slack only bounds a stuck call.
            return await self.run(session, "navigate", self._goto(session, url), limit_s + 2,
                                  f"{limit_s:g} s (--navigate-timeout-s)")

    def _count(self, session: Session, url: str, failure: tuple[str, str] | None, start: bool) -> None:
        """Tell the blocklist how loading `url` went: `failure` (kind, reason), or None for a success."""
        if isinstance(session.navigation.traffic, TrafficReplayer):
            return  # served from a recording: says nothing about the site
        if failure is None:
            self.blocklist.record_success(url, session.id)
        else:
            self.blocklist.record_failure(url, failure[1], kind=failure[0], session=session.id, start=start)

    async def _goto(self, session: Session, url: str, *, start: bool = False) -> PageState:
        """Load `url` in the session's page; `start`: it is the session's start page (its failures
        count against the site, an agent's navigation's against its session)."""
        navigation = session.navigation
        navigation.refused.clear()
        navigation.document_url = ""
        egress_seq, commits_before = self.egress.last_seq, navigation.commits
        page = session.page
        navigation.status = None
        started = time.monotonic()
        try:
            response = await page.goto(
                url, timeout=self.settings.navigate_timeout_s * 1000, wait_until="load"
            )
        except PlaywrightTimeout as exc:
            self._count(session, url, ("timeout", "navigation timeout"), start)
            raise _LimitReached(self.settings.navigate_timeout_s, "--navigate-timeout-s") from exc
        except PlaywrightError as exc:
            message = str(exc).splitlines()[0].removeprefix("Page.goto: ")
            if session.dead:
                raise
            if "net::ERR_ABORTED" not in message:
                # Chromium shows its error page: wait for its commit, so that the URL returned
                # is the page actually shown, not the one before.
                left = self.settings.navigate_timeout_s + 1.0 - (time.monotonic() - started)
                await navigation.wait_for_commit(commits_before, max(0.0, min(_ERROR_PAGE_COMMIT_S, left)))
            if navigation.refused:
                await self._back_to_previous_page(session, navigation.refused[-1][0], commits_before)
                raise navigation.refusal(url) from exc
            if "net::ERR_UNSAFE_REDIRECT" in message:  # Chromium itself refuses e.g. file: targets
                await self._back_to_previous_page(session, url, commits_before)
                raise NavigationRefused(f"refused {url}: it redirects to a URL whose scheme is not "
                                        "allowed (only http and https)", url=url) from exc
            final_url = navigation.document_url or url
            outcome = self.egress.outcome(final_url, after=egress_seq)
            if outcome is not None and outcome.kind == "refused":  # a tunnel the proxy refused
                await self._back_to_previous_page(session, final_url, commits_before)
                raise _egress_refusal(final_url, url, outcome.reason) from exc
            kind = "network"
            if outcome is not None and outcome.kind != "forwarded":
                kind, message = "egress", f"{message} (egress proxy: {outcome.reason})"
            self._count(session, url, (kind, message), start)
            return PageState(url=page.url, title=await navigation.read_title(), error=message)
        if navigation.refused:
            raise navigation.refusal(url)
        navigation.status = response.status if response is not None else None
        answered = response.headers.get(EGRESS_HEADER) if response is not None else None
        if answered is not None and response is not None:  # the egress proxy answered, not the site
            reason = response.headers.get(EGRESS_REASON_HEADER, answered)
            if answered == "refused":
                await self._back_to_previous_page(session, response.url, commits_before)
                raise _egress_refusal(response.url, url, reason)
            self._count(session, url, ("egress", reason), start)
            title = await navigation.read_title()
            return PageState(url=page.url, title=title, error=f"egress proxy: {reason}")
        title = navigation.title = await navigation.read_title()
        failure = None
        if response is not None and response.status in (403, 429) or _looks_blocked(title):
            kind = "block_page" if _looks_blocked(title) else "http_status"
            failure = (kind, f"HTTP {response.status if response else '?'}: {title!r}")
        self._count(session, url, failure, start)
        return PageState(url=page.url, title=title)

    async def _back_to_previous_page(self, session: Session, refused_url: str, commits_before: int) -> None:
        """After a refused navigation: if it still replaced the page (with the proxy's refusal page
        or Chromium's error page), go back to the page shown before, when there was one."""
        page = session.page
        if session.navigation.commits == commits_before or not (
                page.url.startswith("chrome-error:") or page.url == refused_url):
            return  # the page stayed in place (or moved on to a page that was allowed)
        # A new session's first page has only about:blank behind it: going back there is fine
        # (the session is closed anyway when its start URL is refused).
        # The error page's commit may still be settling (under load its history entry lags the
        # commit event): then going back does nothing or fails. Check where the page ended up.
        for attempt in range(_GO_BACK_ATTEMPTS):
            try:
                await page.go_back(timeout=self.settings.navigate_timeout_s * 1000)
            except PlaywrightError as exc:
                log.info("session %s: going back from a refused page failed (%s)", session.id,
                         str(exc).splitlines()[0])
            if not (page.url.startswith("chrome-error:") or page.url == refused_url):
                break
            if attempt + 1 < _GO_BACK_ATTEMPTS:
                await asyncio.sleep(_GO_BACK_PAUSE_S * (attempt + 1))
        else:
            log.warning("session %s: still on %s after a refused navigation", session.id, page.url)
        session.navigation.title = None

    # ------------------------------------------------------------------ screenshots

    async def screenshot(self, session: Session, request: ScreenshotRequest) -> Screenshot:
        async with session.lock:
            return await self.run(session, "screenshot", self._screenshot(session, request),
                                  self.settings.action_timeout_s, self._action_limit)

    async def _screenshot(self, session: Session, request: ScreenshotRequest) -> Screenshot:
        page = session.page
        clip = session.hooks.clip
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
                # to ask again after the page has painted; a dead page is left to `run`.
                if attempt + 1 == _CAPTURE_ATTEMPTS or session.dead:
                    raise
                log.info(
                    "screenshot of session %s failed (%s); retrying", session.id, str(exc).splitlines()[0]
                )
                self.capture_retries += 1
                await page.evaluate(_NEXT_FRAME)
        width, height = (clip["width"], clip["height"]) if clip else session.viewport
        if request.scale < 1.0:
            raw, width, height = await asyncio.to_thread(_downscale, raw, request)
        return Screenshot(
            data=raw,
            sha256=hashlib.sha256(raw).hexdigest(),
            width=width,
            height=height,
            format=request.format,
        )

    # ------------------------------------------------------------------ actions

    async def execute(self, session: Session, action: BrowserAction) -> ExecuteResult:
        if action.kind == "wait":
            # An agent's wait must not hold an execute slot: it only lets the page run.
            session.last_used = time.monotonic()
            await asyncio.sleep(action.seconds or 0)
        async with session.lock:  # (a wait has waited already: its bound starts after it)
            result, _, _ = await self.run(session, "execute", self._execute(session, action),
                                       self.settings.action_timeout_s, self._action_limit)
            return result

    async def act(self, session: Session, request: ActRequest) -> ActResult:
        """Execute `request.action`, then read the observation it asks for (see `ActRequest`). The
        action's own mistakes come back in the result; failures raise as for `execute`."""
        began = time.perf_counter()
        action = request.action
        if action.kind == "wait":
            session.last_used = time.monotonic()
            await asyncio.sleep(action.seconds or 0)
        # The page's state, where a script reads it, comes back from the action's own check for a
        # navigation (one round trip less per step); read after the action otherwise.
        probe = state_probe(session.hooks) if request.env_state else None
        async with session.lock:
            result, (probed, state), shot = await self.run(
                session, "execute", self._execute(session, action, probe, request.screenshot),
                self.settings.action_timeout_s, self._action_limit)
            observed = time.perf_counter()
            act = ActResult(**result.__dict__, execute_s=observed - began)
            act.screenshot = shot
            probed = probed and (state is None or isinstance(state, dict))  # else: read it the usual way
            if probed:
                act.env_state = EnvState(**state) if state is not None else None
            read_state = request.env_state and not probed and keeps_state(session.hooks)
            if (request.screenshot is not None and shot is None) or read_state or request.elements:
                await self.run(session, "screenshot", self._observe(session, request, act, read_state),
                               self.settings.action_timeout_s, self._action_limit)
        act.observe_s = time.perf_counter() - observed
        return act

    async def _observe(self, session: Session, request: ActRequest, act: ActResult, read_state: bool) -> None:
        """Fill `act` with the observation `request` asks for (the state only if `read_state`); the
        reads run side by side (each is a round trip to the renderer, none changes the page)."""
        reads = []
        shoot = request.screenshot is not None and act.screenshot is None  # not taken beside the action
        if shoot:
            reads.append(self._screenshot(session, request.screenshot))
        if read_state:
            reads.append(session.hooks.read_page(session.page))
        if request.elements:
            reads.append(self._page_info(session, PageInfoRequest(elements=True)))
        if len(reads) == 1:
            done = [await reads[0]]
        else:  # every read finishes (or fails) before the first failure is raised: none is left running
            done = list(await asyncio.gather(*reads, return_exceptions=True))
            failed = next((d for d in done if isinstance(d, BaseException)), None)
            if failed is not None:
                raise failed
        if shoot:
            act.screenshot = done.pop(0)
        if read_state:
            state = done.pop(0)
            act.env_state = EnvState(**state) if state is not None else None
        if request.elements:
            info = done.pop(0)
            act.elements, act.url, act.title = info.elements, info.url, info.title

    @property
    def _action_limit(self) -> str:
        return f"{self.settings.action_timeout_s:g} s (--action-timeout-s)"

    async def _execute(self, session: Session, action: BrowserAction, probe: str | None = None,
                       shot: ScreenshotRequest | None = None
                       ) -> tuple[ExecuteResult, tuple[bool, Any], Screenshot | None]:
        """The action; with `probe` (a state script), also ``(True, its value)`` when the page
        stayed where it was and the script could be read on the way (`NavigationTracker.settle`),
        else ``(False, None)``; with `shot`, the screenshot taken beside that check when the page
        stayed where it was (else None: take it again)."""
        page = session.page
        navigation = session.navigation
        requests_before, commits_before = navigation.begin_action()
        egress_seq = self.egress.last_seq
        opens_before, seen_before = navigation.window_opens, session.tabs.seen
        error = await self._perform(session, action, commits_before)
        probed: tuple[bool, Any] = (False, None)
        early = None
        try:
            if action.kind in ("click", "key", "type"):
                # The screenshot starts beside the check for a navigation (one round trip less per
                # step, as direct Playwright takes it) and is kept only if nothing navigated.
                if shot is not None:
                    early = asyncio.ensure_future(self._screenshot(session, shot))
                probed = await navigation.settle(requests_before, commits_before,
                                                 self.settings.action_timeout_s * 0.8, probe)
            if navigation.window_opens > opens_before:  # the action opened a page: report it now
                await session.tabs.wait_seen(seen_before + navigation.window_opens - opens_before,
                                             self.settings.action_timeout_s * 0.5)
            if not error:
                error = await self._refused_navigation(session, egress_seq, commits_before)
            # Reading the title costs a round trip to the renderer, so it is re-read only after the
            # page navigated (a commit or a history-API change); a title a script changes in place
            # shows up at the next navigation or page_info.
            if navigation.commits != commits_before or navigation.title is None:
                navigation.title = await navigation.read_title()
            moved = (navigation.commits != commits_before or navigation.refused
                     or navigation.document_requests != requests_before
                     or navigation.window_opens != opens_before)
            if moved:
                probed = (False, None)  # the page moved on after the probe: its state is read again
            screenshot = await _kept(early, keep=not moved)
            early = None
        finally:
            if early is not None:  # the action failed: the screenshot is not wanted
                await _kept(early, keep=False)
        result = ExecuteResult(ok=not error, error=error, url=page.url, title=navigation.title,
                               popups=session.tabs.take_popups())
        return result, probed, screenshot

    async def _perform(self, session: Session, action: BrowserAction, commits_before: int) -> str:
        """Send the action's input to the page; returns the agent's error ("" when none)."""
        page = session.page
        error = ""
        try:
            if action.kind == "click":
                await page.mouse.click(action.x, action.y)
            elif action.kind == "type":
                await page.keyboard.type(action.text or "")
                if action.press_enter:
                    await page.keyboard.press("Enter")
            elif action.kind == "key":
                await page.keyboard.press(action.key or "")
            elif action.kind == "scroll":
                await self._scroll(session, action)
            elif action.kind == "go_back":
                error = await self._go_back(session, commits_before)
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
        return error

    @staticmethod
    async def _scroll(session: Session, action: BrowserAction) -> None:
        """Wheel at the action's point (the viewport's middle by default), then wait a frame."""
        page = session.page
        width, height = session.viewport
        x = action.x if action.x is not None else width / 2
        y = action.y if action.y is not None else height / 2
        await page.mouse.move(x, y)
        amount = action.amount or 300
        await page.mouse.wheel(0, amount if action.direction == "down" else -amount)
        await page.evaluate(_NEXT_FRAME)

    async def _go_back(self, session: Session, commits_before: int) -> str:
        """Go back a page; returns the agent's error when there is none to go back to or it fails to load."""
        navigation = session.navigation
        history = await navigation.cdp.send("Page.getNavigationHistory")
        index, entries = history["currentIndex"], history["entries"]
        # Entry 0 of a new tab is the blank page it was opened with: not a page to go back to.
        if index <= 0 or (index == 1 and entries[0]["url"] == "about:blank"):
            return "there is no previous page"
        try:
            await session.page.go_back(timeout=self.settings.navigate_timeout_s * 1000)
        except PlaywrightTimeout as exc:
            raise _LimitReached(self.settings.navigate_timeout_s, "--navigate-timeout-s") from exc
        except PlaywrightError as exc:
            if session.dead:
                raise
            # The previous page does not load now (its site is down, its name does not
            # resolve): the agent's step failed, as a navigation to it would have; the
            # session is fine. Chromium commits its error page a moment later: wait for
            # it, so the URL returned is the page shown and no later operation races it.
            message = str(exc).splitlines()[0]
            if "net::ERR_ABORTED" not in message:
                await navigation.wait_for_commit(commits_before, _ERROR_PAGE_COMMIT_S)
            return f"going back failed: {message}"
        return ""

    async def _refused_navigation(self, session: Session, egress_seq: int, commits_before: int) -> str:
        """The error when the action's navigation was refused (by the URL guard or the egress
        proxy), after going back to the page it left; "" when none was."""
        navigation = session.navigation
        if navigation.refused:
            refused_url, why = navigation.refused[-1]
            await self._back_to_previous_page(session, refused_url, commits_before)
            return f"navigation to {refused_url} was refused: {why}"
        if navigation.document_url:
            # The URL guard let the navigation through; the egress proxy may have refused it.
            outcome = self.egress.outcome(navigation.document_url, after=egress_seq)
            if outcome is not None and outcome.kind == "refused":
                url = navigation.document_url
                await self._back_to_previous_page(session, url, commits_before)
                return f"navigation to {url} was refused: {outcome.reason}"
        return ""

    # ------------------------------------------------------------------ reading the page

    async def page_info(self, session: Session, request: PageInfoRequest) -> PageInfo:
        async with session.lock:
            return await self.run(session, "page_info", self._page_info(session, request),
                                  self.settings.action_timeout_s, self._action_limit)

    async def _page_info(self, session: Session, request: PageInfoRequest) -> PageInfo:
        page = session.page
        elements: list[Element] = []
        axtree: list[AxNode] = []
        if request.elements or request.axtree:
            read = await page.evaluate(_ELEMENTS_SCRIPT, request.axtree)
            if request.elements:
                elements = [Element(**e) for e in read["elements"]]
            # Without the element list a node's id would point at nothing the caller holds.
            axtree = [AxNode(**n) if request.elements else AxNode(**{**n, "element": None})
                      for n in read["axtree"]]
        title = session.navigation.title = await session.navigation.read_title()
        return PageInfo(url=page.url, title=title, elements=elements, axtree=axtree)

    async def env_state(self, session: Session) -> EnvState:
        async with session.lock:
            state = await self.run(session, "page_info", session.hooks.read_page(session.page),
                                   self.settings.action_timeout_s, self._action_limit)
        return EnvState(**state) if state is not None else EnvState()


def _egress_refusal(refused_url: str, url: str, reason: str) -> NavigationRefused:
    via = "" if refused_url == url else f" (reached from {url})"
    return NavigationRefused(f"refused {refused_url}{via}: {reason}", url=refused_url)


def _never_run(work: Awaitable[object]) -> None:
    """Close a coroutine that will never be awaited, so that it does not warn."""
    if hasattr(work, "close"):
        work.close()


async def _kept(early: asyncio.Future[Screenshot] | None, keep: bool) -> Screenshot | None:
    """The screenshot `early` took when it is to be kept and did not fail, else None (a failed or
    unwanted one is taken again after the action, the usual way); never leaves it running."""
    if early is None:
        return None
    if not keep:
        early.cancel()
    await asyncio.wait([early])  # not `await early`: a cancellation of the caller is not swallowed
    if early.cancelled() or early.exception() is not None:
        return None
    return early.result() if keep else None


def _looks_blocked(title: str) -> bool:
    lowered = title.lower()
    return any(marker in lowered for marker in _BLOCK_TITLES)


def _downscale(raw: bytes, request: ScreenshotRequest) -> tuple[bytes, int, int]:
    """The image scaled by ``request.scale`` and encoded again; runs in a worker thread."""
    from PIL import Image  # optional: pillow

    image = Image.open(io.BytesIO(raw)).convert("RGB")
    size = (max(1, round(image.width * request.scale)), max(1, round(image.height * request.scale)))
    image = image.resize(size, Image.Resampling.BILINEAR)
    out = io.BytesIO()
    if request.format == "jpeg":
        image.save(out, format="JPEG", quality=request.quality)
    else:
        image.save(out, format="PNG", compress_level=1)
    return out.getvalue(), image.width, image.height
