"""BrowserPool: settings, the session table (create, close, slots, idle expiry), the blocklist, reports."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.prometheus import sample
from webgym_rollout.browser.pool import OP_KINDS, BrowserPool, PoolSettings
from webgym_rollout.browser.protocol import CreateSessionRequest, PageInfoRequest, ScreenshotRequest
from webgym_rollout.errors import (
    BrowserError,
    InvalidRequest,
    NavigationRefused,
    OperationTimeout,
    ServerBusy,
    SessionNotFound,
    SiteBlocked,
)


def _settings(chromium_path: str, *sites: str, **overrides) -> PoolSettings:
    """Pool settings whose pages may reach the local `sites` (base URLs) and no other local port."""
    base = dict(
        executable_path=chromium_path,
        browsers=1,
        contexts_per_browser=2,
        allow_hosts=tuple(url.removeprefix("http://") for url in sites),
        navigate_timeout_s=3.0,
        action_timeout_s=3.0,
        create_timeout_s=10.0,
    )
    base.update(overrides)
    return PoolSettings(**base)


@pytest.mark.parametrize(("field", "value"), [
    ("browsers", 0), ("contexts_per_browser", 0), ("recycle_after_sessions", 0), ("blocklist_threshold", 0),
    ("max_queue", -1), ("spare_contexts", -1), ("idle_timeout_s", 0.0), ("navigate_timeout_s", -1.0),
    ("episode_max_time_s", 0.0)])
def test_settings_name_the_field_they_refuse(field, value):
    with pytest.raises(ValueError, match=f"^{field}: must be"):
        PoolSettings(**{field: value})


def test_concurrency_names_operation_kinds_and_keeps_defaults_for_the_rest():
    settings = PoolSettings(concurrency={"navigate": 2})
    assert settings.lane_limits == {**PoolSettings().lane_limits, "navigate": 2}
    assert list(settings.lane_limits) == list(OP_KINDS)
    with pytest.raises(ValueError, match="^concurrency: unknown operation kind 'teleport'"):
        PoolSettings(concurrency={"teleport": 1})
    with pytest.raises(ValueError, match="^concurrency: navigate must be an integer >= 1"):
        PoolSettings(concurrency={"navigate": 0})
    assert PoolSettings(browsers=3, contexts_per_browser=5).max_sessions == 15
    assert PoolSettings(episode_max_time_s=None).episode_max_time_s is None


async def test_a_missing_chromium_is_named(tmp_path):
    with pytest.raises(BrowserError, match="--executable-path"):
        async with BrowserPool(PoolSettings(executable_path=str(tmp_path / "no-chromium"))):
            pass


@pytest.mark.browser
async def test_sessions_fill_their_slots_and_free_them(chromium_path, sites):
    form = f"{sites.base_url}/sandbox/form.html"
    async with BrowserPool(_settings(chromium_path, sites.base_url)) as pool:
        with pytest.raises(InvalidRequest, match="teleport"):
            await pool.create(CreateSessionRequest(start_url=form, environment="teleport:x"))
        with pytest.raises(NavigationRefused):
            await pool.create(CreateSessionRequest(start_url="http://127.0.0.2:9/"))
        a = await pool.create(CreateSessionRequest(start_url=form, viewport=(640, 480)))
        b = await pool.create(CreateSessionRequest(start_url=form))
        assert (a.environment, a.viewport, a.title, a.url) == ("web", (640, 480), "Sandbox form", form)
        assert a.session_id != b.session_id and a.browser_pid == b.browser_pid == pool.browser_pids()[0]
        health = pool.health()
        assert (health.status, health.active_sessions, health.max_sessions) == ("ok", 2, 2)
        assert health.browsers == 1
        assert set(health.queue_depths) == set(OP_KINDS)
        with pytest.raises(ServerBusy, match="2 session slots"):  # every slot is taken
            await pool.create(CreateSessionRequest(start_url=form))

        await pool.close_session(a.session_id)
        with pytest.raises(SessionNotFound):
            await pool.close_session(a.session_id)
        with pytest.raises(SessionNotFound, match=a.session_id):
            await pool.screenshot(a.session_id, ScreenshotRequest())
        c = await pool.create(CreateSessionRequest(start_url=form))  # the freed slot is taken again
        assert pool.active_sessions == 2 and pool.sessions_created == 3
        metrics = pool.metrics_text()
        assert sample(metrics, "webgym_sessions_created_total") == 3
        assert sample(metrics, "webgym_active_sessions") == 2
        pid = pool.browser_pids()[0]
        # Two sessions: two pages, and two contexts (the closed session's context was reused).
        assert pool.tab_counts() == {str(pid): (2, 2)}
        assert sample(metrics, "webgym_browser_pages", browser=str(pid)) == 2
        assert sample(metrics, "webgym_browser_contexts", browser=str(pid)) == 2
        for sid in (b.session_id, c.session_id):
            await pool.close_session(sid)


@pytest.mark.browser
async def test_a_start_url_that_does_not_load_closes_the_session(chromium_path, faults):
    async with BrowserPool(_settings(chromium_path, faults, "http://127.0.0.1:9")) as pool:
        with pytest.raises(BrowserError, match="could not load"):
            await pool.create(CreateSessionRequest(start_url="http://127.0.0.1:9/"))  # refused port
        assert pool.active_sessions == 0 and pool.health().active_sessions == 0
        assert (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).title == "ok"


@pytest.mark.browser
async def test_failed_start_pages_block_the_site_and_an_agents_failures_its_session(chromium_path, sites):
    """A web site (here a name the egress proxy cannot resolve) is blocked for every session when its
    start page failed in `threshold` sessions; what one session's navigations do blocks it for that
    session only; the allowlisted site server on 127.0.0.1 serves on."""
    form = f"{sites.base_url}/sandbox/form.html"
    async with BrowserPool(_settings(chromium_path, sites.base_url, blocklist_threshold=2)) as pool:
        a = (await pool.create(CreateSessionRequest(start_url=form))).session_id
        b = (await pool.create(CreateSessionRequest(start_url=form))).session_id
        for _ in range(2):
            assert "cannot resolve" in (await pool.navigate(a, "http://down.test/x")).error
        with pytest.raises(SiteBlocked, match=f"down.test is blocked for session {a} .*other sessions"):
            await pool.navigate(a, "http://down.test/y")
        assert "cannot resolve" in (await pool.navigate(b, "http://down.test/y")).error  # b: its first
        assert pool.blocklist.entries() == []
        metrics = pool.metrics_text()
        assert sample(metrics, "webgym_blocklist_failures_total", scope="session", kind="egress") == 3
        assert sample(metrics, "webgym_blocks_total", scope="session", kind="egress") == 1
        assert sample(metrics, "webgym_session_blocks") == 1 and sample(metrics, "webgym_blocked_sites") == 0
        await pool.close_session(a)
        assert sample(pool.metrics_text(), "webgym_session_blocks") == 0  # a session's blocks end with it

        for _ in range(2):  # the toolkit's own start page fails in two sessions: the site is down
            with pytest.raises(BrowserError, match="could not load http://down.test/"):
                await pool.create(CreateSessionRequest(start_url="http://down.test/"))
        with pytest.raises(SiteBlocked, match="down.test is blocked for another .* start page failed in 2"):
            await pool.create(CreateSessionRequest(start_url="http://down.test/"))
        with pytest.raises(SiteBlocked, match="http://down.test is blocked"):
            await pool.navigate(b, "http://down.test/z")
        metrics = pool.metrics_text()
        assert sample(metrics, "webgym_blocked_sites") == 1
        seconds = sample(metrics, "webgym_blocked_site_seconds", origin="http://down.test", kind="egress")
        assert seconds == 3600
        assert sample(metrics, "webgym_blocks_total", scope="site", kind="egress") == 1
        assert (await pool.navigate(b, f"{sites.base_url}/sandbox/next.html")).error == ""
        pool.blocklist._clock = lambda: time.monotonic() + 10_000  # the entry expires
        assert "cannot resolve" in (await pool.navigate(b, "http://down.test/")).error
        await pool.close_session(b)


@pytest.mark.browser
async def test_an_allowlisted_host_port_is_never_blocked(chromium_path, faults):
    """Pages of an allowlisted host:port (a local site server) that hang count for nothing: such a site
    answers every session, and one session's requests to it say nothing of the others'."""
    async with BrowserPool(
        _settings(chromium_path, faults, blocklist_threshold=1, navigate_timeout_s=1.0)
    ) as pool:
        sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/ok"))).session_id
        for _ in range(2):
            with pytest.raises(OperationTimeout):
                await pool.navigate(sid, f"{faults}/never")
        captcha = await pool.create(CreateSessionRequest(start_url=f"{faults}/captcha"))
        assert captcha.title == "Just a moment..."
        assert (await pool.navigate(sid, f"{faults}/ok")).title == "ok"
        metrics = pool.metrics_text()
        assert sample(metrics, "webgym_blocklist_exempt_total", kind="timeout") == 2
        assert sample(metrics, "webgym_blocklist_exempt_total", kind="block_page") == 1
        assert sample(metrics, "webgym_blocked_sites") == 0 and sample(metrics, "webgym_session_blocks") == 0


@pytest.mark.browser
async def test_a_lifted_origin_opens_again(chromium_path, faults):
    async with BrowserPool(_settings(chromium_path, faults, blocklist_threshold=1)) as pool:
        pool.blocklist._exempt = lambda url: False  # the fault pages stand for a web site here
        sid = (await pool.create(CreateSessionRequest(start_url=f"{faults}/captcha"))).session_id
        with pytest.raises(SiteBlocked):
            await pool.navigate(sid, f"{faults}/ok")
        assert pool.lift_block(f"{faults}/any/page") is not None
        assert (await pool.navigate(sid, f"{faults}/ok")).title == "ok"
        assert pool.lift_block(faults) is None  # nothing left to lift


@pytest.mark.browser
async def test_block_page_counts_as_a_failure(chromium_path, faults):
    async with BrowserPool(_settings(chromium_path, faults, blocklist_threshold=1)) as pool:
        pool.blocklist._exempt = lambda url: False  # the fault pages stand for a web site here
        state = await pool.create(CreateSessionRequest(start_url=f"{faults}/captcha"))
        assert state.title == "Just a moment..."
        with pytest.raises(SiteBlocked, match=f"{faults} is blocked"):
            await pool.navigate(state.session_id, f"{faults}/ok")
        assert sample(pool.metrics_text(), "webgym_blocked_site_seconds", origin=faults, kind="block_page")


@pytest.mark.browser
async def test_idle_sessions_expire(chromium_path, sites):
    async with BrowserPool(_settings(chromium_path, sites.base_url, idle_timeout_s=0.5)) as pool:
        sid = (
            await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
        ).session_id
        for _ in range(100):
            if pool.active_sessions == 0:
                break
            await asyncio.sleep(0.1)
        assert pool.active_sessions == 0 and pool.sessions_expired == 1
        assert "webgym_sessions_expired_total 1" in pool.metrics_text()
        with pytest.raises(SessionNotFound):
            await pool.page_info(sid, PageInfoRequest())
