"""The HTTP API end to end: MiniWoB through the server, the lanes' promise (a slow navigation does
not delay other sessions' screenshots; a full queue answers 429), token, bind check, the ``serve``
command and its flags, metrics, idle expiry."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest
import pytest_asyncio
from click.testing import CliRunner

from tests.conftest import free_port
from tests.support.prometheus import sample
from tests.webgym_rollout.fault_pages import FaultPages
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.browser.processes import process_tree_pss_mib
from webgym_rollout.browser.protocol import BrowserAction, ScreenshotRequest, ScreenshotResponse
from webgym_rollout.browser.server import (
    ServerSettings,
    check_bind,
    create_app,
    running_server,
    serve_command,
)
from webgym_rollout.errors import InvalidRequest, NavigationRefused, ServerBusy, SessionNotFound, Unauthorized
from webgym_rollout.tasks.miniwob import task_url as miniwob_task_url


def _settings(chromium_path: str, *sites: str, port: int = 0, **pool) -> ServerSettings:
    """A server on 127.0.0.1 whose pages may reach the `sites` (base URLs or host:port) only."""
    base = dict(
        executable_path=chromium_path,
        browsers=2,
        contexts_per_browser=4,
        allow_hosts=tuple(site.removeprefix("http://") for site in sites),
        navigate_timeout_s=5.0,
        action_timeout_s=5.0,
    )
    base.update(pool)
    return ServerSettings(host="127.0.0.1", port=port, pool=PoolSettings(**base))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(chromium_path, sites):
    # Its own port is allowlisted too: the egress proxy still never lets a page call the API.
    port = free_port()
    async with running_server(_settings(chromium_path, sites.base_url, f"127.0.0.1:{port}", port=port)) as (
            url, pool):
        yield url, pool


def test_bind_check_refuses_public_address_without_token():
    for host in ("0.0.0.0", "192.168.1.10", "::", "example.org"):
        with pytest.raises(ValueError, match="^host: .*--token"):
            check_bind(host, None)
        with pytest.raises(ValueError, match="^host: "):
            ServerSettings(host=host)
        check_bind(host, "secret")
        assert ServerSettings(host=host, token="secret").host == host
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        check_bind(host, None)
    with pytest.raises(ValueError, match="^port: "):
        ServerSettings(port=70000)


def test_serve_command_refuses_public_bind_without_token():
    result = CliRunner().invoke(
        serve_command, ["--host", "0.0.0.0", "--port", "1"], env={"WEBGYM_BROWSER_TOKEN": ""}
    )
    assert result.exit_code == 2 and "--token" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--browsers", "0"], "browsers (--browsers): must be >= 1, got 0"),
    (["--concurrency", "teleport=2"], "concurrency (--concurrency): unknown operation kind 'teleport'"),
    (["--concurrency", "navigate=0"], "concurrency (--concurrency): navigate must be an integer >= 1"),
    (["--idle-timeout-s", "0"], "idle_timeout_s (--idle-timeout-s): must be > 0"),
])
def test_serve_command_names_the_bad_setting(args, message):
    result = CliRunner().invoke(serve_command, args, env={"WEBGYM_BROWSER_TOKEN": ""})
    assert result.exit_code == 2 and message in " ".join(result.output.split())


def test_serve_flags_and_yaml_keys_come_from_the_settings(monkeypatch, tmp_path):
    """Every field of ServerSettings / PoolSettings is a flag and a YAML key; flags win over the file."""
    import uvicorn

    started = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: started.update(app=app, **kwargs))
    config = tmp_path / "serve.yaml"
    config.write_text("browsers: 3\nidle_timeout_s: 9\nport: 8301\nextra_args: [--mute-audio]\n")
    result = CliRunner().invoke(serve_command, [
        "--config", str(config), "--port", "0", "--allow-hosts", "intranet.example", "127.0.0.1:8400",
        "--server-names", "browsers.lan", "browsers.lan:8300", "--allowed-origins", "https://dash.example",
        "--concurrency", "navigate=4", "--concurrency", "screenshot=2", "--recycle-after-sessions", "7",
        "--executable-path", "/opt/chromium", "--episode-max-time-s", "30",
    ], env={"WEBGYM_BROWSER_TOKEN": "from-env"})
    assert result.exit_code == 0, result.output
    settings, pool = started["app"].state.settings, started["app"].state.pool
    assert (settings.host, settings.port, started["port"], settings.token) == ("127.0.0.1", 0, 0, "from-env")
    assert settings.pool == pool.settings
    chosen = pool.settings
    assert chosen.allow_hosts == ("intranet.example", "127.0.0.1:8400")
    assert settings.server_names == ("browsers.lan", "browsers.lan:8300")
    assert settings.allowed_origins == ("https://dash.example",)
    assert (chosen.browsers, chosen.idle_timeout_s, chosen.recycle_after_sessions) == (3, 9, 7)
    assert (chosen.executable_path, chosen.episode_max_time_s) == ("/opt/chromium", 30.0)
    assert chosen.extra_args == ("--mute-audio",)
    limits = {kind: lane.concurrency for kind, lane in pool.lanes.items()}
    assert limits == {"create": 4, "navigate": 4, "screenshot": 2, "execute": 8, "page_info": 8}

    started.clear()
    token = CliRunner().invoke(serve_command, ["--token", "from-flag"], env={"WEBGYM_BROWSER_TOKEN": "env"})
    assert token.exit_code == 0 and started["app"].state.settings.token == "from-flag"


def test_serve_help_has_example_and_every_setting():
    result = CliRunner().invoke(serve_command, ["--help"])
    assert result.exit_code == 0 and "Example:" in result.output
    for flag in ("--config", "--token", "--allow-hosts", "--idle-timeout-s", "--recycle-after-sessions",
                 "--executable-path", "--concurrency", "--episode-max-time-s", "--max-queue",
                 "--server-names", "--allowed-origins"):
        assert flag in result.output


async def _centre_of_button(session, text: str) -> tuple[float, float]:
    info = await session.page_info(elements=True)
    buttons = [e for e in info.elements if e.tag == "button" and e.text == text]
    assert buttons, f"no button {text!r} in {info.elements}"
    b = buttons[0]
    return b.x + b.width / 2, b.y + b.height / 2


@pytest.mark.browser
async def test_miniwob_click_button_through_http(server, sites):
    url, _ = server
    task_url = miniwob_task_url(sites.base_url, "click-button")
    async with BrowserClient(url) as client:
        session = await client.create_session(task_url, environment="miniwob:click-button", seed=7)
        assert session.environment == "miniwob:click-button"
        state = await session.env_state()
        assert state.utterance.startswith("Click on the") and not state.done
        target = state.utterance.split('"')[1]
        shot = await session.screenshot()
        assert (shot.width, shot.height) == (160, 210)  # cropped to the task area
        result = await session.execute(BrowserAction.click(*await _centre_of_button(session, target)))
        assert result.ok
        state = await session.env_state()
        assert state.done and state.raw_reward == 1.0 and 0 < state.reward <= 1.0

        again = await client.create_session(task_url, environment="miniwob:click-button", seed=7)
        assert (await again.env_state()).utterance == f'Click on the "{target}" button.'
        for s in (session, again):
            await s.close()
        await session.close()  # closing twice is fine


@pytest.mark.browser
async def test_a_miniwob_page_the_site_server_lacks_is_refused_at_once_not_after_the_create_timeout(
        server, sites):
    url, _ = server
    task_url = miniwob_task_url(sites.base_url, "click-tset")
    async with BrowserClient(url) as client:
        # Not an OperationTimeout naming --create-timeout-s: the 404 is the cause, and is named.
        with pytest.raises(InvalidRequest) as caught:
            await client.create_session(task_url, environment="miniwob:click-tset", seed=7)
    message = str(caught.value)
    assert "'miniwob:click-tset'" in message and "HTTP 404" in message and task_url in message
    assert "--create-timeout-s" not in message


@pytest.mark.browser
async def test_act_observes_what_execute_then_the_reads_would(server, sites):
    """Two sessions of one seeded MiniWoB page: one steps with execute, screenshot, env_state and
    page_info, the other with one act call; both see the same page afterwards."""
    url, _ = server
    task_url = miniwob_task_url(sites.base_url, "click-button")
    async with BrowserClient(url) as client:
        split = await client.create_session(task_url, environment="miniwob:click-button", seed=7)
        joint = await client.create_session(task_url, environment="miniwob:click-button", seed=7)
        target = (await split.env_state()).utterance.split('"')[1]
        click = BrowserAction.click(*await _centre_of_button(split, target))
        assert (await joint.screenshot()).sha256 == (await split.screenshot()).sha256  # the same page
        done = await split.execute(click)
        shot, state = await split.screenshot(), await split.env_state()
        info = await split.page_info(elements=True)
        acted = await joint.act(click, elements=True)
        assert acted.ok and done.ok and acted.error == done.error == ""
        assert (acted.url, acted.title, acted.popups) == (info.url, info.title, done.popups)
        assert acted.screenshot is not None and acted.screenshot.sha256 == shot.sha256
        assert (acted.screenshot.width, acted.screenshot.height) == (shot.width, shot.height) == (160, 210)
        assert acted.elements == info.elements
        # The reward decays with the episode's time; what it says is the same.
        assert acted.env_state is not None and state.done and acted.env_state.done
        assert (acted.env_state.raw_reward, acted.env_state.utterance) == (state.raw_reward, state.utterance)
        assert acted.execute_s > 0 and acted.observe_s > 0
        for session in (split, joint):
            await session.close()


@pytest.mark.browser
async def test_act_gives_mistakes_as_data_and_raises_failures(server, sites):
    url, _ = server
    async with BrowserClient(url) as client:
        session = await client.create_session(f"{sites.base_url}/sandbox/form.html")
        wrong = await session.act(BrowserAction.select_option(5, 5, "Blue"))
        assert not wrong.ok and "select" in wrong.error  # the agent's mistake, and the observation after it
        assert wrong.screenshot is not None and wrong.screenshot.data[:4] == b"\x89PNG"
        assert wrong.env_state is None and wrong.elements is None  # a website keeps no state of its own
        assert wrong.title == "Sandbox form"
        small = await session.act(BrowserAction.scroll_by("down", 100),
                                  screenshot=ScreenshotRequest(format="jpeg", quality=40, scale=0.5))
        assert small.ok and (small.screenshot.width, small.screenshot.height, small.screenshot.format) == (
            640, 360, "jpeg")
        bare = await session.act(BrowserAction.wait_for(0), screenshot=None, env_state=False)
        assert bare.ok and bare.screenshot is None
        with pytest.raises(InvalidRequest, match="action"):  # a malformed step is refused, typed
            await client._call(url, "POST", f"/sessions/{session.session_id}/act",
                               json={"action": {"kind": "click", "x": 1}})
        await session.close()
        with pytest.raises(SessionNotFound):  # infrastructure: the session is gone
            await session.act(BrowserAction.back())


@pytest.mark.browser
async def test_wrong_click_gives_negative_raw_reward(server, sites):
    url, _ = server
    task_url = miniwob_task_url(sites.base_url, "click-button")
    async with BrowserClient(url) as client:
        for seed in range(20):  # find a seed whose page shows a wrong button to click
            session = await client.create_session(task_url, environment="miniwob:click-button", seed=seed)
            target = (await session.env_state()).utterance.split('"')[1]
            info = await session.page_info(elements=True)
            wrong = [e for e in info.elements if e.tag == "button" and e.text != target]
            if wrong:
                w = wrong[0]
                await session.execute(BrowserAction.click(w.x + w.width / 2, w.y + w.height / 2))
                state = await session.env_state()
                await session.close()
                assert state.done and state.raw_reward == -1.0
                return
            await session.close()
    pytest.fail("no seed in 0..19 shows a wrong button")


@pytest.mark.browser
async def test_refusals_errors_and_metrics(server, sites):
    url, _ = server
    async with BrowserClient(url) as client:
        for bad in ("file:///etc/passwd", "http://169.254.169.254/", "http://127.0.0.2:9/"):
            with pytest.raises(NavigationRefused) as caught:
                await client.create_session(bad)
            assert caught.value.url == bad and bad in str(caught.value)
        session = await client.create_session(f"{sites.base_url}/sandbox/form.html")
        with pytest.raises(NavigationRefused):
            await session.navigate("http://10.1.2.3/admin")
        state = await session.navigate(f"{sites.base_url}/sandbox/next.html")
        assert state.title == "Sandbox next" and state.error == ""
        await session.close()
        with pytest.raises(SessionNotFound):
            await session.screenshot()
        health = (await client.health())[0]
        assert health.url == url and health.max_sessions == 8 and health.browsers == 2
    async with httpx.AsyncClient() as http:
        bad_action = await http.post(f"{url}/sessions/x/execute", json={"kind": "click", "x": 1})
        assert bad_action.status_code == 422 and bad_action.json()["error"] == "invalid_request"
        metrics = (await http.get(f"{url}/metrics")).text
        info = (await http.get(f"{url}/info")).json()
    assert sample(metrics, "webgym_queue_depth", op="screenshot") is not None
    assert sample(metrics, "webgym_op_latency_seconds", op="navigate", quantile="0.95") is not None
    assert sample(metrics, "webgym_errors_total", kind="navigation_refused") is not None
    assert sample(metrics, "webgym_errors_total", kind="session_not_found") is not None
    assert "webgym_active_sessions" in metrics and "webgym_browser_restarts_total" in metrics
    assert "webgym_browser_pages{browser=" in metrics and "webgym_browser_contexts{browser=" in metrics
    assert sample(metrics, "webgym_egress_requests_total", outcome="forwarded") is not None
    assert "webgym_egress_cpu_seconds_total" in metrics
    assert info["allow_hosts"] == [sites.base_url.removeprefix("http://"), url.removeprefix("http://")]
    assert info["blocklist"] == [] and (info["server_names"], info["allowed_origins"]) == ([], [])
    assert (info["blocklist_threshold"], info["blocklist_ttl_s"]) == (3, 3600.0)


@pytest.mark.browser
async def test_pages_cannot_reach_the_server_itself(server, sites):
    """The server's own host:port is allowlisted, yet the egress proxy never lets a page call the API."""
    url, pool = server
    async with BrowserClient(url) as client:
        session = await client.create_session(f"{sites.base_url}/sandbox/form.html")
        with pytest.raises(NavigationRefused, match="browser server's own"):
            await session.navigate(f"{url}/health")
        assert (await session.page_info()).title == "Sandbox form"
        await session.close()


@pytest.mark.browser
async def test_lifting_a_block_needs_a_token(server):
    url, pool = server
    pool.blocklist.block("http://127.0.0.1:5000/", "an operator saw a captcha")
    try:
        async with httpx.AsyncClient(trust_env=False) as http:
            refused = await http.delete(f"{url}/blocklist/http://127.0.0.1:5000")
            info = (await http.get(f"{url}/info")).json()
        assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"
        assert "runs without one" in refused.json()["message"] and "--token" in refused.json()["message"]
        assert [e["origin"] for e in info["blocklist"]] == ["http://127.0.0.1:5000"]
        assert info["blocklist"][0]["reason"] == "an operator saw a captcha"
        async with BrowserClient(url) as client:
            with pytest.raises(Unauthorized):
                await client.unblock("http://127.0.0.1:5000")
    finally:
        pool.lift_block("http://127.0.0.1:5000")


@pytest.mark.browser
async def test_a_slow_navigation_does_not_delay_screenshots_and_a_full_queue_answers_429(chromium_path):
    """The promise of the per-kind lanes, on one Chromium process: while a navigation waits for a
    page that does not answer (holding the only navigate slot) and another waits for the slot,
    other sessions' screenshots complete; one more navigation is refused at once with 429."""
    with FaultPages() as pages:
        settings = _settings(chromium_path, pages.url, browsers=1, concurrency={"navigate": 1}, max_queue=1,
                             navigate_timeout_s=60.0)
        async with running_server(settings) as (url, pool), BrowserClient(url, retries=0) as client:
            slow, queued, refused, other = [await client.create_session(f"{pages.url}/ok") for _ in range(4)]
            lane = pool.lanes["navigate"]
            try:
                running = asyncio.create_task(slow.navigate(f"{pages.url}/slow?running"))
                # Chromium asked for the page: the navigation is in flight and holds the navigate slot.
                assert await asyncio.to_thread(pages.slow_arrived.wait, 60)
                waiting = asyncio.create_task(queued.navigate(f"{pages.url}/slow?queued"))
                for _ in range(500):
                    if lane.waiting == 1:
                        break
                    await asyncio.sleep(0.01)
                assert (lane.running, lane.waiting) == (1, 1)

                with pytest.raises(ServerBusy, match="navigate queue is full"):
                    await refused.navigate(f"{pages.url}/ok")
                async with httpx.AsyncClient(trust_env=False) as http:
                    busy = await http.post(f"{url}/sessions/{refused.session_id}/navigate",
                                           json={"url": f"{pages.url}/ok"})
                assert busy.status_code == 429 and busy.json()["error"] == "server_busy"

                shots = [await other.screenshot() for _ in range(3)]
                clicked = await other.execute(BrowserAction.click(5, 5))
                info = await other.page_info()
                # All of that finished while both navigations are still pending.
                assert not running.done() and not waiting.done()
                assert pages.slow_arrivals == 1  # the queued navigation has not reached Chromium yet
                assert all(shot.width == 1280 for shot in shots) and clicked.ok and info.title == "ok"
                assert pool.lanes["screenshot"].completed == 3

                pages.release.set()
                assert (await running).title == "slow" and (await waiting).title == "slow"
                assert pages.slow_arrivals == 2 and (lane.running, lane.waiting) == (0, 0)
                assert (await refused.navigate(f"{pages.url}/ok")).title == "ok"  # free again
                assert sample(pool.metrics_text(), "webgym_errors_total", kind="server_busy") == 2
            finally:  # a failing test must not leave the server waiting for held pages
                pages.release.set()


@pytest.mark.browser
async def test_screenshot_wire_formats_carry_the_same_image(server, sites):
    url, _ = server
    async with BrowserClient(url) as client:
        session = await client.create_session(f"{sites.base_url}/sandbox/form.html")
        shot = await session.screenshot()
        assert shot.data[:8] == b"\x89PNG\r\n\x1a\n" and hashlib.sha256(shot.data).hexdigest() == shot.sha256
        # A client that asks for JSON (curl, other languages) gets the same image base64-encoded.
        async with httpx.AsyncClient(trust_env=False) as http:
            reply = await http.post(
                f"{url}/sessions/{session.session_id}/screenshot",
                json={},
                headers={"Accept": "application/json"},
            )
        wire = ScreenshotResponse.model_validate(reply.json())
        assert wire.sha256 == shot.sha256 and base64.b64decode(wire.data_b64) == shot.data
        assert (wire.width, wire.height, wire.format) == (shot.width, shot.height, shot.format)
        small = await session.screenshot(format="jpeg", quality=40, scale=0.5)
        assert (small.width, small.height, small.format) == (640, 360, "jpeg")
        await session.close()


@pytest.mark.browser
async def test_token_required_on_every_request(chromium_path, sites):
    settings = _settings(chromium_path, sites.base_url, browsers=1)
    settings.token = "s3cret"
    async with running_server(settings) as (url, pool):
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{url}/health")).status_code == 401
            assert (
                await http.get(f"{url}/metrics", headers={"Authorization": "Bearer nope"})
            ).status_code == 401
        async with BrowserClient(url) as anonymous:
            with pytest.raises(Unauthorized):
                await anonymous.create_session(f"{sites.base_url}/sandbox/form.html")
        async with BrowserClient(url, token="s3cret") as client:
            session = await client.create_session(f"{sites.base_url}/sandbox/form.html")
            assert (await session.page_info()).title == "Sandbox form"
            await session.close()

        # With a token, an operator lifts a blocklist entry; /info shows it gone.
        pool.blocklist.block("http://127.0.0.1:5000/", "an operator saw a captcha")
        auth = {"Authorization": "Bearer s3cret"}
        async with httpx.AsyncClient(trust_env=False, headers=auth) as http:
            assert (await http.delete(f"{url}/blocklist/http://127.0.0.1:5000")).status_code == 200
            assert (await http.get(f"{url}/info")).json()["blocklist"] == []
            again = (await http.delete(f"{url}/blocklist/http://127.0.0.1:5000")).json()
        assert again == {"origin": "http://127.0.0.1:5000", "lifted": False, "reason": ""}
        pool.blocklist.block("http://127.0.0.1:5001/x", "timeouts")
        async with BrowserClient(url, token="s3cret") as client:
            assert await client.unblock("http://127.0.0.1:5001/some/page") is True
            assert await client.unblock("http://127.0.0.1:5001") is False
        async with httpx.AsyncClient(trust_env=False) as http:  # and without the token: 401
            assert (await http.delete(f"{url}/blocklist/http://127.0.0.1:5001")).status_code == 401


@pytest.mark.browser
@pytest.mark.slow
async def test_abandoned_sessions_expire_and_memory_returns(chromium_path, sites):
    """200 sessions opened and never closed: idle expiry frees them; browsers recycle; memory settles."""
    settings = _settings(
        chromium_path, sites.base_url, browsers=2, contexts_per_browser=12, idle_timeout_s=1.0,
        recycle_after_sessions=60,
    )
    form = f"{sites.base_url}/sandbox/form.html"
    async with running_server(settings) as (url, pool), BrowserClient(url, retries=0) as client:
        warm = await client.create_session(form)
        await warm.screenshot()
        await warm.close()
        baseline = sum(process_tree_pss_mib(pid) for pid in pool.browser_pids())

        opened = 0

        async def open_and_abandon() -> None:
            nonlocal opened
            while True:
                try:
                    session = await client.create_session(form)
                    break
                except ServerBusy:  # every slot taken by abandoned sessions: wait for expiry
                    await asyncio.sleep(0.2)
            await session.screenshot(format="jpeg")
            opened += 1

        queue = list(range(200))

        async def worker() -> None:
            while queue:
                queue.pop()
                await open_and_abandon()

        await asyncio.gather(*(worker() for _ in range(6)))
        assert opened == 200 and pool.sessions_created >= 201
        for _ in range(100):
            if pool.active_sessions == 0 and len(pool.processes) == settings.pool.browsers:
                break
            await asyncio.sleep(0.1)
        assert pool.active_sessions == 0 and pool.sessions_expired >= 200
        assert pool.browser_restarts >= 2  # recycled after 60 sessions each
        after = sum(process_tree_pss_mib(pid) for pid in pool.browser_pids())
        print(f"browsers' PSS: {baseline:.0f} MiB before, {after:.0f} MiB after 200 abandoned sessions")
        assert after < baseline + 150, f"PSS {after:.0f} MiB vs baseline {baseline:.0f} MiB"
        assert (await client.health())[0].active_sessions == 0


@pytest.mark.browser
def test_serve_command_starts_and_shuts_down_its_browsers(tmp_path):
    """The real ``webgym-rollout serve`` process: healthy, then SIGTERM closes every browser."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from webgym_rollout.cli import main; main()",
            "serve",
            "--port",
            str(port),
            "--browsers",
            "1",
            "--contexts-per-browser",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(300):
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1, trust_env=False)
                if health.status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        assert health.json()["browsers"] == 1
        browsers = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if "chromium" in p.name() or "headless" in p.name()
        ]
        assert browsers
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal: exit status 0 or -SIGTERM.
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        assert b"Traceback" not in proc.stderr.read()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in browsers)


def test_serve_command_refuses_a_whole_local_host_in_the_allowlist():
    result = CliRunner().invoke(serve_command, ["--allow-hosts", "127.0.0.1"],
                                env={"WEBGYM_BROWSER_TOKEN": ""})
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "allow_hosts" in output and "'127.0.0.1' would open every port" in output
    assert "127.0.0.1:8400" in output  # how to fix it


@pytest.mark.browser
async def test_a_foreign_host_or_a_web_pages_origin_is_refused_before_anything_runs(server, sites):
    """DNS rebinding sends the attacker's name as Host; a page's request carries Origin or
    Sec-Fetch-Site. Both are refused (421 / 403, JSON) and counted; our own clients pass."""
    url, pool = server
    port = int(url.rsplit(":", 1)[1])
    created = pool.sessions_created
    body = {"start_url": f"{sites.base_url}/sandbox/form.html"}
    async with httpx.AsyncClient(trust_env=False) as http:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
            assert (await http.get(f"{url}/health", headers={"Host": host})).status_code == 200, host
        misdirected = [f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1", f"127.0.0.2:{port}",
                       f"127.0.0.1.evil.example:{port}", f"[::1]:{port}0", f"127.0.0.1:{port}@evil"]
        for host in misdirected:
            refused = await http.post(f"{url}/sessions", json=body, headers={"Host": host})
            assert refused.status_code == 421, host
            assert refused.json()["error"] == "misdirected" and "--server-names" in refused.json()["message"]
        foreign = [{"Origin": f"{sites.base_url}"}, {"Origin": "null"}, {"Origin": "https://evil.example"},
                   {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}]
        for headers in foreign:
            refused = await http.post(f"{url}/sessions", json=body, headers=headers)
            assert refused.status_code == 403 and refused.json()["error"] == "foreign_origin", headers
        # A page of the server's own origin (its /docs) and a request the user typed may call it.
        own = await http.get(f"{url}/health", headers={"Origin": url, "Sec-Fetch-Site": "same-origin"})
        typed = await http.get(f"{url}/health", headers={"Sec-Fetch-Site": "none"})
        assert own.status_code == typed.status_code == 200
        metrics = (await http.get(f"{url}/metrics")).text
    assert pool.sessions_created == created  # nothing refused reached the pool
    assert sample(metrics, "webgym_callers_refused_total", kind="misdirected") == len(misdirected)
    assert sample(metrics, "webgym_callers_refused_total", kind="foreign_origin") == len(foreign)
    async with BrowserClient(url) as client:  # the project's own client: Host = the URL's, no Origin
        session = await client.create_session(body["start_url"])
        await session.close()


async def test_a_wildcard_bind_answers_its_addresses_and_configured_names(chromium_path):
    """Behind --host 0.0.0.0 with a token: any IP address of the machine on the server's port and the
    --server-names; another name is misdirected before the token is looked at; an Origin is refused
    even with the token."""
    settings = ServerSettings(host="0.0.0.0", port=8300, token="s3cret", server_names=("browsers.lan",),
                              allowed_origins=("https://dash.example",),
                              pool=PoolSettings(executable_path=chromium_path))
    app = create_app(settings)  # not started: /health answers from the pool's counters alone
    auth = {"Authorization": "Bearer s3cret"}

    async def ask(base: str, **headers: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base) as http:
            return await http.get("/health", headers=headers)

    for base in ("http://10.0.0.11:8300", "http://[fd00::11]:8300", "http://127.0.0.1:8300",
                 "http://browsers.lan:8300", "http://browsers.lan:9999"):
        assert (await ask(base, **auth)).status_code == 200, base
    assert (await ask("http://10.0.0.11:8300")).status_code == 401  # the right host, no token
    assert (await ask("http://other.lan:8300")).status_code == 421  # the Host is checked first
    for base in ("http://other.lan:8300", "http://10.0.0.11:8301"):
        answer = await ask(base, **auth)
        assert answer.status_code == 421 and answer.json()["error"] == "misdirected", base
    assert (await ask("http://10.0.0.11:8300", Origin="https://evil.example", **auth)).status_code == 403
    assert (await ask("http://10.0.0.11:8300", Origin="https://dash.example", **auth)).status_code == 200
    assert app.state.callers.refused == {"misdirected": 3, "foreign_origin": 1}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("server_names", ("bad name",), "server_names: 'bad name' is not a host name"),
    ("server_names", ("x:99999",), "server_names: 'x:99999'"),
    ("allowed_origins", ("dash.example",), "allowed_origins: 'dash.example' is not an origin"),
    ("allowed_origins", ("https://dash.example/path",), "is not an origin"),
])
def test_caller_settings_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ServerSettings(**{field: value})


@pytest.mark.browser
async def test_going_back_to_a_page_that_no_longer_loads_is_the_agents_mistake(server, sites):
    """Found by fuzzing (test_server_fuzz.py): a go_back whose previous page fails to load now
    answered HTTP 500 and ended the episode's step as an infrastructure failure."""
    url, _ = server
    async with BrowserClient(url) as client:
        session = await client.create_session(f"{sites.base_url}/sandbox/form.html")
        gone = await session.navigate("https://gone.test/")  # the egress proxy cannot resolve it
        assert gone.error
        await session.navigate(f"{sites.base_url}/sandbox/next.html")
        result = await session.execute(BrowserAction.back())
        assert not result.ok and result.error.startswith("going back failed: ") and "ERR_" in result.error
        assert result.url.startswith("chrome-error:")  # the page shown: Chromium's error page
        again = await session.navigate(f"{sites.base_url}/sandbox/form.html")  # the session goes on
        assert again.title == "Sandbox form"
        await session.close()
