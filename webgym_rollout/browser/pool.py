"""The browser pool: a few Chromium processes, several contexts each, one context + page per session.

`BrowserPool` is what the server drives. It holds the session table and composes the parts:

- `webgym_rollout.browser.egress`: the egress proxy every connection of every browser passes
  (started first, closed last);
- `webgym_rollout.browser.processes`: the Chromium processes (launch, replace, recycle, memory
  bound), the reuse of cleared contexts and the closing of popups;
- `webgym_rollout.browser.navigation`: the URL guard on every request of a page, and the tracking
  of its navigations;
- `webgym_rollout.browser.traffic`: a session created with ``record`` keeps its page's traffic;
  one created with ``replay`` is served from a recording (bodies uploaded to `BrowserPool.bodies`);
- `webgym_rollout.browser.operations`: navigate, screenshot, execute, act, page_info and env_state, each
  in the `Lane` of its kind (`webgym_rollout.browser.lanes`) and under a timeout, with failures
  mapped to the typed errors of `webgym_rollout.errors`.

`create` opens a session on the least-busy process and loads its start URL (the environment's page
hooks, e.g. MiniWoB's, prepare the page: `webgym_rollout.browser.pages`); `close_session` ends it and
keeps its context for reuse. A maintenance task closes sessions idle for ``idle_timeout_s`` and keeps
the processes healthy. Origins that fail repeatedly land on the `SiteBlocklist`
(`webgym_rollout.browser.blocklist`: a start page's failures count for the site, an agent's for its
session; the allowlist's ``host:port`` entries, e.g. the local site server, are never counted).
`health` and `metrics_text` report.

The resolver the egress proxy uses to look up names can be given (`BrowserPool(resolver=...)`):
tests pass a `webgym_rollout.browser.egress.MappingResolver` so that nothing does real DNS.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections import Counter
from collections.abc import Mapping

from playwright.async_api import Error as PlaywrightError

from webgym_rollout.browser.blocklist import BlockEntry, SiteBlocklist
from webgym_rollout.browser.egress import EgressProxy, Resolver
from webgym_rollout.browser.guard import UrlGuard
from webgym_rollout.browser.lanes import Lane
from webgym_rollout.browser.metrics import render_prometheus
from webgym_rollout.browser.navigation import NavigationTracker, guard_context, set_replaying
from webgym_rollout.browser.operations import Operations
from webgym_rollout.browser.pages import load_page_modules, page_hooks
from webgym_rollout.browser.processes import (
    CHROMIUM_ARGS,
    ChromiumProcess,
    ChromiumProcesses,
    clear_context,
    process_tree_pss_mib,
)
from webgym_rollout.browser.protocol import (
    ActRequest,
    ActResult,
    BrowserAction,
    CreateSessionRequest,
    EnvState,
    ExecuteResult,
    PageInfo,
    PageInfoRequest,
    PageState,
    RecordingIndex,
    Screenshot,
    ScreenshotRequest,
    ServerHealth,
    SessionCreated,
)
from webgym_rollout.browser.session import Session
from webgym_rollout.browser.settings import DEFAULT_CHROMIUM, OP_KINDS, PoolSettings
from webgym_rollout.browser.traffic import BodyStore, TrafficRecorder, TrafficReplayer
from webgym_rollout.errors import BrowserCrashed, BrowserError, InvalidRequest, ServerBusy, SessionNotFound

# CHROMIUM_ARGS and process_tree_pss_mib live in `processes`, PoolSettings in `settings`; they are named here
# too for the callers that start Chromium the way the pool does (test fixtures, benchmarks).
__all__ = ["CHROMIUM_ARGS", "DEFAULT_CHROMIUM", "OP_KINDS", "BrowserPool", "PoolSettings",
           "process_tree_pss_mib"]

log = logging.getLogger(__name__)

class BrowserPool:
    """Browsers, sessions and the per-kind operation lanes. Use as an async context manager."""

    def __init__(self, settings: PoolSettings | None = None, *, resolver: Resolver | None = None):
        self.settings = settings or PoolSettings()
        load_page_modules(self.settings.page_modules)  # the task kinds register their page hooks
        self.guard = UrlGuard(self.settings.allow_hosts)
        self.egress = EgressProxy(self.guard, resolver)
        """The forwarding proxy every browser connection passes (`webgym_rollout.browser.egress`)."""
        self.blocklist = SiteBlocklist(
            threshold=self.settings.blocklist_threshold, ttl_s=self.settings.blocklist_ttl_s,
            exempt=self.guard.allowlisted_port,
        )
        self.lanes = {
            kind: Lane(kind, limit, self.settings.max_queue)
            for kind, limit in self.settings.lane_limits.items()
        }
        self.errors: Counter[str] = Counter()
        """Errors answered to clients, by kind (the server counts them)."""
        self.sessions_created = 0
        self.sessions_expired = 0
        self.guard_refused = 0
        """Requests of pages the URL guard refused before they left the browser (the page's request
        interception and WebSocket route; the egress proxy counts its own refusals)."""
        self.started_at = time.monotonic()
        self.processes = ChromiumProcesses(
            self.settings,
            prepare_context=functools.partial(guard_context, guard=self.guard,
                                              on_refused=self._count_refusal),
            on_lost=self._on_process_lost,
            launch_args=lambda: self.egress.chromium_args,
        )
        self.operations = Operations(
            self.settings,
            lanes=self.lanes,
            guard=self.guard,
            blocklist=self.blocklist,
            processes=self.processes,
            egress=self.egress,
            discard=self._discard,
        )
        self.bodies = BodyStore(int(self.settings.replay_cache_mib * 2**20))
        """Recorded bodies uploaded for replays (`webgym_rollout.browser.traffic`)."""
        self._sessions: dict[str, Session] = {}
        self._reserved = 0
        self._maintenance: asyncio.Task | None = None

    @property
    def browser_restarts(self) -> int:
        """Browsers replaced after a crash, recycling or the memory bound."""
        return self.processes.restarts

    @property
    def capture_retries(self) -> int:
        """Screenshots Chromium failed to capture on a live page and that were taken again."""
        return self.operations.capture_retries

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> BrowserPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        await self.egress.start()
        try:
            await self.processes.start()
        except BaseException:
            await self.egress.close()
            raise
        self._maintenance = asyncio.create_task(self._maintain(), name="browser-pool-maintenance")

    async def close(self) -> None:
        """Close every session and browser, then Playwright."""
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        await self.processes.close()
        self._sessions.clear()
        await self.egress.close()

    def _count_refusal(self) -> None:
        self.guard_refused += 1

    def _on_process_lost(self, process: ChromiumProcess) -> None:
        for session_id in process.active:
            session = self._sessions.get(session_id)
            if session is not None:
                session.crashed = True

    async def _maintain(self) -> None:
        """Idle expiry and the processes' upkeep (`ChromiumProcesses.maintain`), every second."""
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
                await self.processes.maintain(now)
            except Exception:  # the maintenance loop must outlive any one failure
                log.exception("browser pool maintenance failed")

    # ------------------------------------------------------------------ reports

    @property
    def active_sessions(self) -> int:
        return len(self._sessions)

    def health(self) -> ServerHealth:
        browsers = self.processes.live
        return ServerHealth(
            status="ok" if browsers else "degraded",
            active_sessions=len(self._sessions) + self._reserved,
            max_sessions=self.settings.max_sessions,
            browsers=browsers,
            queue_depths={kind: lane.waiting for kind, lane in self.lanes.items()},
            uptime_s=time.monotonic() - self.started_at,
        )

    def tab_counts(self) -> dict[str, tuple[int, int]]:
        """Open pages and contexts of each live browser, by its process id: what Playwright sees,
        spare contexts (no page) included."""
        counts = {}
        for process in self.processes.live_processes():
            contexts = process.browser.contexts
            counts[str(process.pid)] = (sum(len(c.pages) for c in contexts), len(contexts))
        return counts

    def metrics_text(self, refused_callers: Mapping[str, int] | None = None) -> str:
        """``/metrics``; `refused_callers`: the server's refused requests by kind
        (`webgym_rollout.browser.callers`)."""
        return render_prometheus(
            lanes=self.lanes.values(),
            active_sessions=len(self._sessions),
            browsers=self.processes.live,
            browser_restarts=self.browser_restarts,
            errors=self.errors,
            sessions_created=self.sessions_created,
            sessions_expired=self.sessions_expired,
            capture_retries=self.capture_retries,
            blocklist=self.blocklist.stats(),
            tabs=self.tab_counts(),
            popups_closed=self.processes.popups_closed,
            egress=self.egress.stats(),
            guard_refused=self.guard_refused,
            refused_callers=refused_callers or {},
        )

    def browser_pids(self) -> list[int]:
        return self.processes.pids()

    # ------------------------------------------------------------------ sessions

    def _pick_process(self) -> ChromiumProcess:
        # Sessions of a dead browser wait for their client to hear BrowserCrashed: not counted.
        live = sum(not session.crashed for session in self._sessions.values())
        process = self.processes.least_busy()
        if process is None or live + self._reserved >= self.settings.max_sessions:
            raise ServerBusy(f"all {self.settings.max_sessions} session slots are in use; retry later")
        return process

    async def create(self, request: CreateSessionRequest) -> SessionCreated:
        """Open a session on the least-busy browser and load its start URL (and MiniWoB episode)."""
        hooks, argument = page_hooks(request.environment)
        self.guard.check(request.start_url)
        self.blocklist.check(request.start_url)
        traffic = (TrafficReplayer(request.replay, self.bodies) if request.replay is not None
                   else TrafficRecorder() if request.record else None)
        async with self.lanes["create"].slot():
            process = self._pick_process()
            self._reserved += 1
            reservation = f"reserved-{secrets.token_hex(4)}"
            process.active.add(reservation)
            session: Session | None = None
            try:
                tabs = await asyncio.wait_for(
                    self.processes.open_context(process, request.viewport), self.settings.create_timeout_s
                )
                page = tabs.page
                assert page is not None
                session_id = secrets.token_urlsafe(12)
                session = Session(
                    id=session_id,
                    process=process,
                    context=tabs.context,
                    page=page,
                    hooks=hooks,
                    viewport=request.viewport,
                    navigation=NavigationTracker(page, self.guard, session_id,
                                                 on_refused=self._count_refusal),
                    tabs=tabs,
                )
                page.on("crash", lambda _p: setattr(session, "crashed", True))
                session.navigation.traffic = traffic
                set_replaying(tabs.context, isinstance(traffic, TrafficReplayer))
                await session.navigation.install(tabs.context)
                self.processes.count_session(process)
                process.active.add(session.id)
                self._sessions[session.id] = session
                self.sessions_created += 1
            except (TimeoutError, PlaywrightError) as exc:
                if session is not None:
                    await self._end_session(session, reuse=False)
                raise BrowserCrashed(f"could not open a browser context: {exc}") from exc
            finally:
                process.active.discard(reservation)
                self._reserved -= 1
        try:
            state = await self.operations.open(session, request, argument)
        except BrowserError:
            if session.id in self._sessions:
                await self._end_session(session, reuse=False)
            raise
        return SessionCreated(
            session_id=session.id,
            environment=request.environment or hooks.name,
            viewport=request.viewport,
            url=session.page.url,
            title=state.title,
            browser_pid=process.pid,
        )

    def _get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(
                f"no session {session_id!r} (closed, expired after "
                f"{self.settings.idle_timeout_s:.0f} s idle, or never created)"
            )
        return session

    async def _discard(self, session: Session) -> None:
        await self._end_session(session, reuse=False)

    async def _end_session(self, session: Session, *, reuse: bool) -> None:
        """Remove a session; keep its context for reuse when it is healthy and storage clears."""
        self._sessions.pop(session.id, None)
        self.blocklist.forget(session.id)
        process = session.process
        process.active.discard(session.id)
        session.navigation.cancel()
        set_replaying(session.context, False)
        keep = reuse and not session.crashed and self.processes.takes_spare(process)
        try:
            if keep:
                await asyncio.wait_for(self._clear(session), 5)
                process.spare.append(session.tabs)
                return
        except Exception as exc:
            log.info("context of session %s not reusable (%s); closing it", session.id, exc)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(session.context.close(), 5)

    @staticmethod
    async def _clear(session: Session) -> None:
        navigation = session.navigation
        await navigation.stop()
        await clear_context(session.tabs, navigation.cdp, navigation.origins)

    def lift_block(self, origin: str) -> BlockEntry | None:
        """Lift the blocklist entry of `origin` (or of any URL of it); the entry, or None."""
        lifted = self.blocklist.lift(origin)
        if lifted is not None:
            log.info("blocklist entry of %s lifted (%s)", lifted.origin, lifted.reason)
        return lifted

    async def close_session(self, session_id: str) -> None:
        session = self._get(session_id)
        async with session.lock:
            await self._end_session(session, reuse=True)

    # ------------------------------------------------------------------ operations

    async def navigate(self, session_id: str, url: str) -> PageState:
        return await self.operations.navigate(self._get(session_id), url)

    async def screenshot(self, session_id: str, request: ScreenshotRequest) -> Screenshot:
        return await self.operations.screenshot(self._get(session_id), request)

    async def execute(self, session_id: str, action: BrowserAction) -> ExecuteResult:
        return await self.operations.execute(self._get(session_id), action)

    async def act(self, session_id: str, request: ActRequest) -> ActResult:
        return await self.operations.act(self._get(session_id), request)

    async def page_info(self, session_id: str, request: PageInfoRequest) -> PageInfo:
        return await self.operations.page_info(self._get(session_id), request)

    async def env_state(self, session_id: str) -> EnvState:
        return await self.operations.env_state(self._get(session_id))

    # ------------------------------------------------------------------ recording and replay

    async def recording(self, session_id: str) -> RecordingIndex:
        """What the session recorded, or (replaying) the requests its recording lacked."""
        traffic = self._get(session_id).navigation.traffic
        if isinstance(traffic, TrafficRecorder):
            return await traffic.index()
        if isinstance(traffic, TrafficReplayer):
            return traffic.index()
        raise InvalidRequest(f"session {session_id} neither records nor replays (create it with record)")

    def recorded_body(self, session_id: str, sha256: str) -> bytes:
        """One body the session recorded."""
        traffic = self._get(session_id).navigation.traffic
        body = traffic.bodies.get(sha256) if isinstance(traffic, TrafficRecorder) else None
        if body is None:
            raise InvalidRequest(f"session {session_id} recorded no body {sha256}")
        return body
