"""Recording episodes' traffic and replaying it (`webgym_rollout.trajectory.recordings`,
`webgym_rollout.browser.traffic`): real Chromium behind the browser server, the changing site of
replay_sites.py on 127.0.0.1, a scripted policy behind a real OpenAI-protocol server. Record, change
the site, replay: the screenshots are the recorded ones and nothing reaches the site; a request the
recording lacks fails closed; the URL guard still applies."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json

import pytest
import pytest_asyncio

from tests.webgym_rollout.replay_sites import ReplaySite
from webgym_core.endpoint import Endpoint
from webgym_data.schema import Task
from webgym_rollout.actions import AgentAction
from webgym_rollout.agent.policies import PolicySettings
from webgym_rollout.agent.protocol import format_response
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.protocol import RecordedExchange, ReplayOptions
from webgym_rollout.browser.traffic import BodyStore, TrafficReplayer, post_sha256
from webgym_rollout.env import WebEnv
from webgym_rollout.errors import InvalidRequest
from webgym_rollout.runner import RolloutSettings, RunSettings, run
from webgym_rollout.settings import EnvSettings
from webgym_rollout.trajectory.contract import TrajectoryError
from webgym_rollout.trajectory.reader import read_episodes
from webgym_rollout.trajectory.recordings import RecordingStore, RecordSettings, ReplayLibrary, ReplaySource

VIEWPORT = "640x400"
# On the 0-1000 grid of a 640x400 page: the links and the text box of replay_sites.py.
SEARCH_LINK, GALLERY_LINK = (312, 350), (312, 600)


def script(site_url: str) -> list[AgentAction]:
    """One episode over every kind of page: a POST search, a page that changes on every load (seen
    twice), a redirect, images and a script-loaded fragment."""
    return [AgentAction("left_click", coordinate=SEARCH_LINK),
            AgentAction("type", text="shoes", press_enter=True),
            AgentAction("navigate", url=f"{site_url}/"),
            AgentAction("left_click", coordinate=GALLERY_LINK),
            AgentAction("wait", time=0.2),
            AgentAction("answer", text="done")]


@pytest.fixture(scope="module")
def site():
    with ReplaySite() as served:
        yield served


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser_url(chromium_path, site):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=2,
                        allow_hosts=(site.url.removeprefix("http://"),))
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _):
        yield url


def _web_task(site: ReplaySite, name: str = "shop") -> Task:
    return Task.from_row({"task_id": name, "task_name": f"Find shoes on {name}", "website": f"{site.url}/",
                          "start_url": f"{site.url}/"})


def _scripted_policy(scripted_openai, actions: list[AgentAction]):
    """A policy endpoint that plays `actions` over and over (one episode after another)."""
    replies = itertools.cycle([format_response(action) for action in actions])
    server = scripted_openai(lambda _body: next(replies))
    return PolicySettings(kind="openai", endpoint=Endpoint(base_url=server.base_url, model="scripted"))


def _run_settings(tmp_path, site, browser_url, policy, out: str, **traffic) -> RunSettings:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(_web_task(site).to_row()) + "\n")
    return RunSettings(tasks=tasks, servers=(browser_url,), out=tmp_path / out, progress=False,
                       rollout=RolloutSettings(concurrency=1, attempts=2), env=EnvSettings(viewport=VIEWPORT),
                       policy=policy, traffic=RecordSettings(**traffic))


def _hashes(folder) -> dict[tuple[str, int], list[str]]:
    return {(e.task.task_id, e.attempt): [s.screenshot_sha256 for s in e.steps]
            for e in read_episodes(folder)}


async def test_record_change_the_site_replay_gives_the_recorded_screenshots(tmp_path, site, browser_url,
                                                                             scripted_openai):
    site.version = 1
    policy = _scripted_policy(scripted_openai, script(site.url))
    recorded = await run(_run_settings(tmp_path, site, browser_url, policy, "recorded", record=True))
    assert recorded.episodes == 2 and not recorded.errors
    episodes = list(read_episodes(tmp_path / "recorded"))
    store = RecordingStore(tmp_path / "recorded")
    for episode in episodes:
        assert episode.num_steps == 6 and not any(s.action_error for s in episode.steps)
        index = store.read_index(episode.recording)
        seen = {(e.method, e.url.removeprefix(site.url), e.status) for e in index.exchanges}
        assert {("GET", "/", 200), ("GET", "/search", 200), ("POST", "/results", 200), ("GET", "/go", 302),
                ("GET", "/gallery", 200), ("GET", "/app.js", 200), ("GET", "/img/a.png", 200),
                ("GET", "/fragment", 200)} <= seen
        for sha in index.body_hashes:
            assert hashlib.sha256(store.get_body(sha)).hexdigest() == sha
    # Content-addressed: the images and the script both episodes loaded are stored once.
    stats = store.stats()
    assert stats.episodes == 2 and stats.stored_bytes < stats.recorded_bytes
    # The home page changes on every load, so the episode's two visits differ, and so do the episodes.
    first = episodes[0].steps
    assert first[0].screenshot_sha256 != first[3].screenshot_sha256

    site.version = 2  # a new colour scheme, new images, new wording: a different web
    hits_before = sum(site.hits.values())
    replayed = await run(_run_settings(tmp_path, site, browser_url, policy, "replayed",
                                       replay=str(tmp_path / "recorded")))
    assert replayed.episodes == 2 and not replayed.errors
    assert sum(site.hits.values()) == hits_before  # nothing reached the live site
    assert _hashes(tmp_path / "replayed") == _hashes(tmp_path / "recorded")
    manifest = json.loads((tmp_path / "replayed" / "manifest.json").read_text())
    assert manifest["run"]["replay"] == str(tmp_path / "recorded")

    # The same actions on the live (changed) site give other pages: the replay is what kept them.
    await run(_run_settings(tmp_path, site, browser_url, policy, "live"))
    assert all(a != b for a, b in zip(_hashes(tmp_path / "live")[("shop", 0)],
                                      _hashes(tmp_path / "recorded")[("shop", 0)], strict=True))


async def test_an_unrecorded_request_fails_closed_unless_the_fallback_is_on(tmp_path, site, browser_url):
    site.version = 1
    store = RecordingStore(tmp_path / "rec")
    async with BrowserClient(browser_url) as client:
        env = WebEnv(client, EnvSettings(viewport=VIEWPORT))
        await env.reset(_web_task(site), record=store)
        await env.close()
        recorded = env.recording
        assert recorded is not None and recorded.body_hashes

        for fallback in (False, True):
            before = site.hits["/unrecorded"]
            source = ReplaySource(ReplayOptions(exchanges=recorded.exchanges, live_fallback=fallback), store)
            await env.reset(_web_task(site), replay=source)
            result = await env.step(AgentAction("navigate", url=f"{site.url}/unrecorded"))
            await env.close()
            step = result.info["step"]
            assert env.recording is not None
            assert env.recording.misses == [f"GET {site.url}/unrecorded"]
            if fallback:
                assert step.action_error == "" and site.hits["/unrecorded"] == before + 1
                assert env.recording.live == 1
            else:
                assert "ERR_INTERNET_DISCONNECTED" in step.action_error
                assert site.hits["/unrecorded"] == before and env.recording.live == 0


async def test_the_url_guard_still_applies_to_a_replay(tmp_path, site, browser_url):
    # A recording that (by hand) holds a page of a forbidden host: the guard refuses it before the
    # recording is asked, with the live fallback on too.
    store = RecordingStore(tmp_path / "rec")
    body = b"<title>secret</title>"
    sha = hashlib.sha256(body).hexdigest()
    store.put_body(sha, body)
    home = b"<title>home</title>"
    store.put_body(hashlib.sha256(home).hexdigest(), home)
    exchanges = [RecordedExchange(method="GET", url=f"{site.url}/", status=200,
                                  headers=[("Content-Type", "text/html")],
                                  body_sha256=hashlib.sha256(home).hexdigest(), body_size=len(home)),
                 RecordedExchange(method="GET", url="http://127.0.0.2:9/secret", status=200,
                                  headers=[("Content-Type", "text/html")], body_sha256=sha,
                                  body_size=len(body))]
    async with BrowserClient(browser_url) as client:
        env = WebEnv(client, EnvSettings(viewport=VIEWPORT))
        observation = await env.reset(_web_task(site), replay=ReplaySource(
            ReplayOptions(exchanges=exchanges, live_fallback=True), store))
        assert observation.title == "home"  # served from the hand-made recording
        result = await env.step(AgentAction("navigate", url="http://127.0.0.2:9/secret"))
        await env.close()
    assert "refused" in result.info["step"].action_error
    assert result.observation.title == "home"


def test_replayer_matches_bodies_then_urls_and_serves_repeats_in_recorded_order():
    store = BodyStore(max_bytes=1 << 20)
    bodies = {name: name.encode() for name in ("v1", "v2", "r-a", "r-b")}
    for data in bodies.values():
        store.put(hashlib.sha256(data).hexdigest(), data)

    def exchange(method, url, body, post=""):
        return RecordedExchange(method=method, url=url, status=200, post_sha256=post,
                                body_sha256=hashlib.sha256(body).hexdigest())

    post_a = post_sha256({"postData": "q=a&nonce=1"})
    replayer = TrafficReplayer(ReplayOptions(exchanges=[
        exchange("GET", "http://h/", b"v1"), exchange("GET", "http://h/", b"v2"),
        exchange("POST", "http://h/r", b"r-a", post_a),
        exchange("POST", "http://h/r", b"r-b", post_sha256({"postData": "q=b&nonce=2"}))]), store)

    def body(request):
        found = replayer.take(request)
        return None if found is None else found.body_sha256

    sha = {name: hashlib.sha256(data).hexdigest() for name, data in bodies.items()}
    # The same GET: the recorded responses in order, then the last one again.
    repeats = [body({"method": "GET", "url": "http://h/"}) for _ in range(3)]
    assert repeats == [sha["v1"], sha["v2"], sha["v2"]]
    # A POST: its exact body first; a body never recorded (a new nonce) takes the URL's next response.
    assert body({"method": "POST", "url": "http://h/r", "postData": "q=b&nonce=2"}) == sha["r-b"]
    assert body({"method": "POST", "url": "http://h/r", "postData": "q=a&nonce=9"}) == sha["r-a"]
    assert body({"method": "GET", "url": "http://h/other"}) is None
    assert body({"method": "POST", "url": "http://h/"}) is None  # another method is another request


def test_body_store_checks_hashes_and_evicts_the_least_recently_used():
    store = BodyStore(max_bytes=10)
    with pytest.raises(InvalidRequest, match="hash to another"):
        store.put("0" * 64, b"abc")
    a, b, c = b"aaaa", b"bbbb", b"cccc"
    ha, hb, hc = (hashlib.sha256(x).hexdigest() for x in (a, b, c))
    store.put(ha, a)
    store.put(hb, b)
    assert store.get(ha) == a  # a is now the most recently used
    store.put(hc, c)
    assert store.missing([ha, hb, hc]) == [hb]
    with pytest.raises(InvalidRequest, match="replay"):
        TrafficReplayer(ReplayOptions(exchanges=[RecordedExchange(method="GET", url="http://h/", status=200,
                                                                   body_sha256=hb)]), store)


def test_settings_and_sources_without_recordings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="record: --record and --replay cannot be combined"):
        RecordSettings(record=True, replay="x")
    with pytest.raises(ValueError, match="replay_live_fallback: only meaningful with --replay"):
        RecordSettings(replay_live_fallback=True)
    with pytest.raises(ValueError, match="record: a session either records or replays"):
        from webgym_rollout.browser.protocol import CreateSessionRequest

        CreateSessionRequest(start_url="http://127.0.0.1/", record=True, replay=ReplayOptions())
    with pytest.raises(TrajectoryError, match="no episode of this run has a recording.*--record"):
        ReplayLibrary.open(tmp_path)
    with pytest.raises(TrajectoryError, match="not a SHA-256"):
        RecordingStore(tmp_path).get_body("../../etc/passwd")


async def test_a_replayed_page_opens_no_websocket(tmp_path, site, browser_url):
    # A recording holds no WebSocket: a replayed page's are refused before they connect, even to
    # the allowlisted site itself (which counts every path asked for).
    ws_url = site.url.replace("http://", "ws://") + "/ws-probe"
    page = (f"<title>opening</title><script>const ws = new WebSocket('{ws_url}');"
            "ws.onclose = () => { document.title = 'ws closed'; };</script>").encode()
    store = RecordingStore(tmp_path / "rec")
    sha = hashlib.sha256(page).hexdigest()
    store.put_body(sha, page)
    exchange = RecordedExchange(method="GET", url=f"{site.url}/ws-page", status=200, body_sha256=sha,
                                headers=[("Content-Type", "text/html")], body_size=len(page))
    task = Task.from_row({"task_id": "ws", "task_name": "ws", "website": f"{site.url}/ws-page",
                          "start_url": f"{site.url}/ws-page"})
    async with BrowserClient(browser_url) as client:
        env = WebEnv(client, EnvSettings(viewport=VIEWPORT))
        await env.reset(task, replay=ReplaySource(ReplayOptions(exchanges=[exchange]), store))
        assert env.session is not None
        for _ in range(100):  # until the page saw its WebSocket close
            if (await env.session.page_info()).title == "ws closed":
                break
            await asyncio.sleep(0.05)
        title = (await env.session.page_info()).title
        await env.close()
    assert title == "ws closed" and site.hits["/ws-probe"] == 0
