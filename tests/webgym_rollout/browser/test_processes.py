"""Chromium processes on real Chromium: a dead one is replaced, recycling, the memory bound, and
reused contexts that keep nothing of their previous session."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import psutil
import pytest

from webgym_rollout.browser.pool import BrowserPool, PoolSettings
from webgym_rollout.browser.processes import process_tree_pss_mib
from webgym_rollout.browser.protocol import CreateSessionRequest, PageInfoRequest, ScreenshotRequest
from webgym_rollout.errors import BrowserCrashed, ServerBusy

pytestmark = pytest.mark.browser



def _settings(chromium_path: str, sites, **overrides) -> PoolSettings:
    base = dict(executable_path=chromium_path, browsers=2, contexts_per_browser=4,
                allow_hosts=(f"{sites.host}:{sites.port}",),
                navigate_timeout_s=3.0, action_timeout_s=3.0, create_timeout_s=10.0)
    base.update(overrides)
    return PoolSettings(**base)


async def _until(condition, what: str) -> None:
    """Wait for the pool's maintenance (it runs about every second) to bring `condition` about."""
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"never happened: {what}")


def test_process_tree_pss_counts_children_and_ignores_the_dead():
    alone = process_tree_pss_mib(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert alone > 0 and process_tree_pss_mib(os.getpid()) > alone
    finally:
        child.communicate(b"")
    assert process_tree_pss_mib(child.pid) == 0.0  # exited and reaped: no such process


async def test_killed_browser_fails_only_its_sessions(chromium_path, sites):
    url = f"{sites.base_url}/sandbox/form.html"
    async with BrowserPool(_settings(chromium_path, sites)) as pool:
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


async def test_a_browser_is_recycled_after_its_sessions(chromium_path, sites):
    url = f"{sites.base_url}/sandbox/form.html"
    async with BrowserPool(_settings(chromium_path, sites, browsers=1, recycle_after_sessions=2)) as pool:
        first = await pool.create(CreateSessionRequest(start_url=url))
        second = await pool.create(CreateSessionRequest(start_url=url))
        assert first.browser_pid == second.browser_pid
        # The second session drained its browser: its replacement takes the next session (once it
        # has started), and the old one keeps serving the sessions it has until they end.
        for _ in range(100):
            try:
                third = await pool.create(CreateSessionRequest(start_url=url))
                break
            except ServerBusy:
                await asyncio.sleep(0.05)
        assert third.browser_pid != first.browser_pid
        assert (await pool.page_info(first.session_id, PageInfoRequest())).title == "Sandbox form"
        for created in (first, second):
            await pool.close_session(created.session_id)
        await _until(lambda: first.browser_pid not in pool.browser_pids(), "the drained browser is retired")
        assert pool.browser_restarts == 1 and pool.browser_pids() == [third.browser_pid]


async def test_browser_over_memory_bound_is_replaced(chromium_path, sites):
    settings = _settings(chromium_path, sites, browsers=1, max_browser_mib=1.0, memory_check_s=0.1)
    async with BrowserPool(settings) as pool:
        first = await pool.create(CreateSessionRequest(start_url=f"{sites.base_url}/sandbox/form.html"))
        await pool.close_session(first.session_id)
        await _until(lambda: pool.browser_restarts and first.browser_pid not in pool.browser_pids(),
                     "the browser over the bound is replaced")
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


async def test_reused_contexts_keep_no_storage(chromium_path, sites):
    url = f"{sites.base_url}/sandbox/form.html"
    async with BrowserPool(_settings(chromium_path, sites)) as pool:
        contexts, history_lengths = [], []
        for _ in range(6):  # more sessions than browsers x spare contexts: contexts are reused
            sid = (await pool.create(CreateSessionRequest(start_url=url))).session_id
            session = pool._sessions[sid]
            contexts.append(session.context)
            stored = await session.page.evaluate(
                "() => [localStorage.getItem('k'), sessionStorage.getItem('k'), document.cookie]"
            )
            assert stored == [None, None, ""]
            history_lengths.append(await session.page.evaluate("() => history.length"))
            await session.page.evaluate(
                "() => { localStorage.setItem('k', 'v'); sessionStorage.setItem('k', 'v');"
                " document.cookie = 'c=1'; }"
            )
            await pool.close_session(sid)
        assert len({id(context) for context in contexts}) < len(contexts)  # reuse happened
        assert len(set(history_lengths)) == 1  # a reused context's page has no earlier history
