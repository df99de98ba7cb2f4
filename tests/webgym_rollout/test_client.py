"""BrowserClient: action models, several servers (least-loaded first), retries and typed errors."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from pydantic import ValidationError

from tests.conftest import free_port
from webgym_rollout.browser import PoolSettings
from webgym_rollout.client import BrowserAction, BrowserClient
from webgym_rollout.errors import ServerBusy, ServerUnavailable, SessionNotFound
from webgym_rollout.server import ServerSettings, running_server
from webgym_rollout.sites import SiteServer


def test_actions_validate_per_kind():
    assert BrowserAction(kind="click", x=3, y=4) == BrowserAction.click(3, 4)
    assert BrowserAction.scroll_by("down", 500).model_dump(exclude_none=True) == {
        "kind": "scroll",
        "direction": "down",
        "amount": 500,
    }
    assert BrowserAction.model_validate({"kind": "type", "text": "hi", "press_enter": True}).press_enter
    for bad in (
        {"kind": "click", "x": 1},
        {"kind": "type"},
        {"kind": "key", "key": "a", "x": 1},
        {"kind": "scroll", "direction": "sideways"},
        {"kind": "teleport"},
        {"kind": "wait", "seconds": -1},
        {"kind": "select", "x": 1, "y": 2},
        {"kind": "scroll", "direction": "up", "x": 5},
    ):
        with pytest.raises(ValidationError):
            BrowserAction.model_validate(bad)
    for action in (
        BrowserAction.back(),
        BrowserAction.wait_for(0.5),
        BrowserAction.hover_at(1, 2),
        BrowserAction.select_option(1, 2, "v"),
        BrowserAction.press("Enter"),
        BrowserAction.type_text("x"),
    ):
        assert BrowserAction.model_validate(action.model_dump(exclude_none=True)) == action


def _settings(chromium_path: str, **pool) -> ServerSettings:
    base = dict(executable_path=chromium_path, browsers=1, contexts_per_browser=2, allow_hosts=("127.0.0.1",))
    base.update(pool)
    return ServerSettings(port=0, pool=PoolSettings(**base))


async def test_unreachable_server_is_a_typed_transient_error():
    async with BrowserClient(f"http://127.0.0.1:{free_port()}", retries=1) as client:
        with pytest.raises(ServerUnavailable):
            await client.create_session("http://127.0.0.1:1/")
        assert await client.health() == []


@pytest.mark.browser
async def test_sessions_spread_over_servers_and_skip_dead_ones(chromium_path):
    dead = f"http://127.0.0.1:{free_port()}"
    with SiteServer() as sites:
        form = f"{sites.base_url}/sandbox/form.html"
        async with (
            running_server(_settings(chromium_path)) as (a, _),
            running_server(_settings(chromium_path)) as (b, _),
            BrowserClient([dead, a, b], retries=0) as client,
        ):
            sessions = [await client.create_session(form) for _ in range(4)]
            assert Counter(s.server_url for s in sessions) == {a: 2, b: 2}
            healths = await client.health()
            assert {h.url for h in healths} == {a, b} and all(h.active_sessions == 2 for h in healths)
            # Both servers are full now: a fifth session is refused with a transient error.
            with pytest.raises(ServerBusy):
                await client.create_session(form)
            # ...and retried: a slot that frees up while the client backs off is taken.
            asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(sessions[0].close()))
            client.retries = 4
            fifth = await client.create_session(form)
            assert fifth.server_url == sessions[0].server_url
            result = await fifth.execute(BrowserAction.wait_for(0.05))
            assert result.ok and result.title == "Sandbox form"
            await fifth.close()
            with pytest.raises(SessionNotFound):
                await fifth.page_info()
