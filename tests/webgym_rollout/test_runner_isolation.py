"""No episode can hurt another: `webgym-rollout run` on the local sites with adversarial scripted
policies beside the honest expert, through the real browser server, Chromium, site server and truth
listener, judged by ``--judge site``.

- block-the-site: makes the request that made the shop's handler raise (``min_price=inf``: its
  OverflowError once closed the connection with no reply, three of which blocked the site server
  for every session for an hour) three times, then answers;
- stall-the-judge: submits a search the server keeps running into a popup (which the browser
  server closes; the request runs on), then answers at once, so that the judge reads the session's
  truth while a request of the session still holds its lock (the read once timed out and the
  episode became ``error:internal``).

Each earns 0 as an ordinary judged episode (block-the-site plays a travel task, stall-the-judge a
shop task); the honest expert's shop episode, played beside them, earns 1; nothing is blocked, and
a new session opens the shop.
"""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import pytest_asyncio

from webgym_core.settings import load_settings
from webgym_rollout.actions import AgentAction, pixels_to_grid
from webgym_rollout.agent.expert import ExpertPolicy
from webgym_rollout.agent.policies import PolicyOutput, element_field, scripted_reply
from webgym_rollout.agent.protocol import AgentSettings, Observation
from webgym_rollout.browser.protocol import CreateSessionRequest
from webgym_rollout.runner import RunSettings, run
from webgym_rollout.tasks.sites import SiteServer
from webgym_rollout.trajectory.reader import read_episodes
from webgym_sites import shop
from webgym_sites.generate import site_tasks
from webgym_sites.state import session_in

STALL_QUERY = "stall the judge"


@pytest.fixture(scope="module")
def site_server():
    with SiteServer() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def site_browser(chromium_path, site_server):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=4,
                        action_timeout_s=4.0, allow_hosts=(site_server.base_url.removeprefix("http://"),))
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as served:
        yield served


class _BlockTheSite:
    """Loads the shop's ``min_price=inf`` search `tries` times, then gives up with an answer."""

    model_id = "block-the-site"

    def __init__(self, tries: int = 3):
        self.tries = tries

    async def act(self, observation: Observation) -> PolicyOutput:
        started = time.perf_counter()
        if observation.step < self.tries:
            parts = urlsplit(observation.url)
            url = urlunsplit((parts.scheme, parts.netloc, "/shop/search", "q=lamp&min_price=inf", ""))
            action, intention = AgentAction(name="navigate", url=url), "Make the shop fail."
        else:
            action, intention = AgentAction(name="answer", text="The shop is down."), "Give up."
        return scripted_reply(action, observation, AgentSettings(), self.model_id, started, memory="",
                              intention=intention)


class _StallTheJudge:
    """Types `STALL_QUERY` into the shop's search box and submits it into a new window (Shift+Enter:
    the server closes the popup, its request runs on), then answers at once."""

    model_id = "stall-the-judge"
    observes_elements = True

    async def act(self, observation: Observation) -> PolicyOutput:
        started = time.perf_counter()
        box = next((e for e in observation.elements if element_field(e, "name") == "search"), None)
        if observation.step == 0 and box is not None:
            x = float(element_field(box, "x")) + float(element_field(box, "width")) / 2
            y = float(element_field(box, "y")) + float(element_field(box, "height")) / 2
            action = AgentAction(name="left_click", coordinate=pixels_to_grid(x, y, observation.viewport))
        elif observation.step == 1:
            action = AgentAction(name="type", text=STALL_QUERY)
        elif observation.step == 2:
            action = AgentAction(name="key", keys="Shift+Enter")
        else:
            action = AgentAction(name="answer", text="Nothing to report.")
        return scripted_reply(action, observation, AgentSettings(), self.model_id, started, memory="",
                              intention="Keep a request running while the judge reads the truth.")


class _ByTask:
    """Plays each task with the policy given for its instruction."""

    model_id = "adversarial-suite"
    observes_elements = True

    def __init__(self, policies: dict[str, object]):
        self.policies = policies

    async def act(self, observation: Observation) -> PolicyOutput:
        return await self.policies[observation.instruction].act(observation)


def _stall_searches(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make the shop's search for `STALL_QUERY` run (its session's lock held) until released."""
    arrived, release = threading.Event(), threading.Event()
    search = shop.ShopSite._search

    def stalling(self, request, state, category):
        if request.arg("q") == STALL_QUERY:
            arrived.set()
            release.wait(timeout=300)
        return search(self, request, state, category)

    monkeypatch.setattr(shop.ShopSite, "_search", stalling)
    return arrived, release


def _raise_on_inf(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the shop's old price parsing back: ``inf`` raises OverflowError in its handler."""
    monkeypatch.setattr(shop, "_cents", lambda value: round(float(value) * 100) if value else None)


@pytest.mark.browser
async def test_a_raising_handler_and_a_stalled_request_hurt_no_other_episode(tmp_path, monkeypatch,
                                                                             site_server, site_browser):
    browser_url, pool = site_browser
    honest, _, staller = site_tasks(3, seed=5, sites=("shop",))  # an easy and a hard task of the shop
    [blocker] = site_tasks(1, seed=5, sites=("travel",))  # the server is one: any page reaches the shop
    _raise_on_inf(monkeypatch)
    arrived, release = _stall_searches(monkeypatch)
    policy = _ByTask({honest.task_name: ExpertPolicy([honest]), blocker.task_name: _BlockTheSite(),
                      staller.task_name: _StallTheJudge()})
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(task.to_row()) + "\n" for task in (blocker, staller, honest)))
    settings = load_settings(
        RunSettings, None, None, tasks=str(path), servers=(browser_url,), out=str(tmp_path / "run"),
        env__sites_url=site_server.base_url, judge__kind="site", truth__truth_url=site_server.truth_url,
        truth__truth_token=site_server.truth_token, progress=False, rollout__concurrency=3,
        rollout__session_retries=0)
    try:
        report = await run(settings, policy=policy)
        assert arrived.is_set() and not release.is_set()  # judged while the search still ran
    finally:
        release.set()
    episodes = {e.task.task_id: e for e in read_episodes(tmp_path / "run")}
    assert report.episodes == 3 and report.internal_errors == 0

    # The honest episode, beside both, earns its reward.
    assert (episodes[honest.task_id].status, episodes[honest.task_id].reward) == ("ok", 1.0)

    # block-the-site: three 500 pages, then a judged 0; nothing blocked, and a new session opens the shop.
    blocked = episodes[blocker.task_id]
    assert (blocked.status, blocked.reward) == ("ok", 0.0) and blocked.verdicts
    assert [s.title for s in blocked.steps[1:4]] == ["Server error"] * 3
    facts = site_server.facts(session_in(s.url for s in blocked.steps))
    assert sum("min_price=inf" in page for page in facts.visited) == 3
    assert pool.blocklist.entries() == [] and pool.blocklist.stats().session_blocks == 0
    async with httpx.AsyncClient(base_url=browser_url, trust_env=False) as http:
        assert (await http.get("/info")).json()["blocklist"] == []
        metrics = (await http.get("/metrics")).text
    assert "webgym_blocked_sites 0" in metrics and "webgym_session_blocks 0" in metrics
    fresh = await pool.create(CreateSessionRequest(start_url=f"{site_server.base_url}/shop/"))
    assert fresh.title.endswith("Webgym Shop")
    await pool.close_session(fresh.session_id)

    # stall-the-judge: the truth was read while its search held the session, and it earned a judged 0.
    stalled = episodes[staller.task_id]
    assert (stalled.status, stalled.reward) == ("ok", 0.0) and stalled.verdicts
