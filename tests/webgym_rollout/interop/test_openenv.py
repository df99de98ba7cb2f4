"""``webgym-rollout serve-openenv``: the OpenEnv server over `WebGymEnv`, driven by openenv-core's own
clients (`GenericEnvClient`, and `WebGymOpenEnvClient`, an `EnvClient`) against real servers on
127.0.0.1: the command as a child process (its own browser server and site server), and an app in a
thread attached to a browser server the test kills. Reset and steps of a MiniWoB task, a site task
judged by its truth, two sessions isolated, the session limit, a malformed action as the agent's
error, the egress guard, health and schema, the token and the caller check, an infrastructure
failure."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient  # the interop extra
from PIL import Image
from websockets.asyncio.client import connect as ws_connect

from tests.conftest import REPO_ROOT, free_port
from tests.webgym_rollout.interop.servers import (
    browser_server_process,
    kill_process_family,
    wait_until_healthy,
)
from webgym_rollout.actions import AgentAction
from webgym_rollout.agent.protocol import format_response
from webgym_rollout.interop import (
    GymSettings,
    OpenEnvSettings,
    WebGymAction,
    WebGymOpenEnvClient,
    create_openenv_app,
)
from webgym_sites.generate import site_tasks

pytestmark = pytest.mark.browser


def reply(action: AgentAction) -> str:
    return format_response(action)


@pytest.fixture(scope="module")
def server_url(chromium_path):
    """``webgym-rollout serve-openenv`` as a child process on a free port, running its own browser
    server and site server (3 sessions)."""
    port = free_port()
    command = [sys.executable, "-c", "from webgym_rollout.cli import main; main()", "serve-openenv",
               "--port", str(port), "--chromium", chromium_path, "--max-sessions", "3", "--site-tasks", "20",
               "--observation-modes", "screenshot", "--observation-modes", "elements"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process, "the OpenEnv server")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)  # a graceful stop: the sessions, Chromium, the site server
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def _client(url: str):
    return WebGymOpenEnvClient(base_url=url, message_timeout_s=300).sync()


def test_health_schema_and_metadata_are_openenvs(server_url):
    assert httpx.get(f"{server_url}/health", trust_env=False).json() == {"status": "healthy"}
    schema = httpx.get(f"{server_url}/schema", trust_env=False).json()
    assert "reply" in schema["action"]["required"]
    observation = schema["observation"]["properties"]
    assert {"instruction", "url", "title", "text", "screenshot", "step", "infrastructure_failure", "error",
            "done", "reward"} <= set(observation)
    assert "base64" in observation["screenshot"]["description"]
    assert httpx.get(f"{server_url}/metadata", trust_env=False).json()["name"] == "webgym"
    # Over plain HTTP each request gets a fresh environment (openenv's design): a reset plays, a
    # step finds no episode. (openenv closes that environment on the app's own loop: a browser server
    # on that loop too could not answer the close, which hung for a minute before the timeout below.)
    reset = httpx.post(f"{server_url}/reset", json={"seed": 2, "task": "miniwob:click-test"}, timeout=45,
                       trust_env=False).json()
    assert reset["observation"]["instruction"] == "Click the button." and reset["done"] is False
    step = httpx.post(f"{server_url}/step", json={"action": {"reply": "click"}}, timeout=300,
                      trust_env=False).json()
    assert step["done"] and step["observation"]["error"].startswith("episode_over")


def test_a_miniwob_episode_over_openenvs_generic_client(server_url):
    async def play() -> tuple:
        async with GenericEnvClient(base_url=server_url, message_timeout_s=300) as env:
            first = await env.reset(seed=7, task="webgym/miniwob-click-test-v0")
            wrong = await env.step({"reply": "I would click the button."})
            number = int(re.search(r"\[(\d+)\] button", first.observation["text"]).group(1))
            right = await env.step({"reply": reply(AgentAction("click_element", element=number))})
            return first, wrong, right, await env.state()

    first, wrong, right, state = asyncio.run(play())
    observation, wrong_seen = first.observation, wrong.observation
    assert (first.reward, first.done) == (None, False)
    assert observation["instruction"] == "Click the button."
    assert observation["url"].endswith("/click-test.html")
    with Image.open(io.BytesIO(base64.b64decode(observation["screenshot"]))) as image:
        assert (image.format, image.size) == ("PNG", (160, 210))  # MiniWoB's task area
    # A reply without an action: the agent's mistake, a no-op step, not an error of the protocol.
    assert (wrong.reward, wrong.done) == (0.0, False)
    assert "no <tool_call>" in wrong_seen["error"] and wrong_seen["infrastructure_failure"] is False
    assert wrong_seen["step"]["action"] == "" and wrong_seen["screenshot"] == observation["screenshot"]
    assert (right.reward, right.done) == (1.0, True)  # the page's own reward
    assert right.observation["error"] == "" and '"click_element"' in right.observation["step"]["action"]
    assert [verdict["passed"] for verdict in right.observation["verdicts"]] == [True]
    assert state["step_count"] == 2 and state["task_id"] == observation["task_id"] != ""
    assert state["environment"] == "miniwob:click-test"


def _infobox_task():
    """A reference-site task answered by one article's infobox (ids do not depend on the base URL)."""
    for task in site_tasks(20, seed=0, base_url="http://127.0.0.1:9", sites=("reference",)):
        metadata = json.loads(task.source.metadata)
        if metadata["template"] == "infobox":
            return task, metadata["params"]["article_id"]
    raise AssertionError("no infobox task among the first 20")


def test_a_site_task_is_judged_by_the_sites_truth(server_url):
    task, article = _infobox_task()
    with _client(server_url) as env:
        rewards = []
        for answer in (task.definite_answer, "I could not find it."):
            result = env.reset(task="site:reference", task_id=task.task_id)
            assert result.observation.task_id == task.task_id and "/reference/" in result.observation.url
            site = result.observation.url.split("/reference/")[0]
            result = env.step(reply(AgentAction("navigate", url=f"{site}/reference/wiki/{article}")))
            assert (result.reward, result.done, result.observation.error) == (0.0, False, "")
            result = env.step(reply(AgentAction("answer", text=answer)))
            assert result.done and not result.observation.infrastructure_failure
            rewards.append(result.reward)
        assert rewards == [1.0, 0.0]  # the right answer after reading the article; a wrong one
        with pytest.raises(RuntimeError, match="task_id: no task 'nope'"):  # the caller's mistake
            env.reset(task="site:reference", task_id="nope")


def test_two_sessions_are_isolated_and_the_limit_holds(server_url):
    async def play() -> tuple:
        async with (WebGymOpenEnvClient(base_url=server_url, message_timeout_s=300) as one,
                    WebGymOpenEnvClient(base_url=server_url, message_timeout_s=300) as two):
            first, second = await asyncio.gather(one.reset(seed=1, task="miniwob:click-test"),
                                                 two.reset(seed=2, task="miniwob:click-checkboxes"))
            number = int(re.search(r"\[(\d+)\] button", first.observation.text).group(1))
            done = await one.step(reply(AgentAction("click_element", element=number)))
            two_state, one_state = await two.state(), await one.state()
            waited = await two.step(reply(AgentAction("wait")))
            async with (WebGymOpenEnvClient(base_url=server_url),  # the third session of 3
                        ws_connect(server_url.replace("http", "ws") + "/ws") as four):
                refused = json.loads(await four.recv())  # openenv's answer, before any message
            assert refused["data"]["code"] == "CAPACITY_REACHED"  # --max-sessions 3
            return first, second, done, one_state, two_state, waited

    first, second, done, one_state, two_state, waited = asyncio.run(play())
    assert first.observation.url.endswith("/click-test.html")
    assert second.observation.url.endswith("/click-checkboxes.html")
    assert done.reward == 1.0 and done.done
    assert one_state.step_count == 1 and two_state.step_count == 0  # one's step is not two's
    assert one_state.episode_id != two_state.episode_id and one_state.task_id != two_state.task_id
    assert waited.observation.url.endswith("/click-checkboxes.html") and not waited.done
    assert waited.observation.instruction == second.observation.instruction


def test_a_malformed_step_is_refused_and_the_session_goes_on(server_url):
    with GenericEnvClient(base_url=server_url, message_timeout_s=300).sync() as env:
        early = env.step({"reply": "click"})  # before any reset: no episode
        assert early.done and early.reward is None and early.observation["error"].startswith("episode_over")
        env.reset(seed=4)  # the server's default task
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):  # no reply: openenv's own error
            env.step({"text": "click"})
        result = env.step({"reply": reply(AgentAction("wait"))})
        assert (result.reward, result.done, result.observation["error"]) == (0.0, False, "")
        assert env.state()["environment"] == "miniwob:click-test"
        with pytest.raises(RuntimeError, match="unknown field"):
            env.reset(seed=4, tsak="miniwob:click-test")


def test_a_sessions_pages_reach_the_site_server_alone(server_url):
    with _client(server_url) as env:
        start = env.reset(seed=8).observation
        for url in (f"{server_url}/health", "http://127.0.0.2:8600/"):  # this server; another host
            result = env.step(WebGymAction(reply=reply(AgentAction("navigate", url=url))))
            assert result.observation.error.startswith(f"refused {url}")  # the browser server's egress guard
            assert result.observation.infrastructure_failure is False
            assert (result.reward, result.done) == (0.0, False)  # the agent's mistake, refused
            assert result.observation.url == start.url


@contextlib.contextmanager
def _app_in_thread(settings: OpenEnvSettings):
    """`create_openenv_app` served by uvicorn in a thread of this process; yields its URL."""
    import uvicorn

    config = uvicorn.Config(create_openenv_app(settings), host=settings.host, port=settings.port,
                            log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the app did not start"
        time.sleep(0.05)
    try:
        yield f"http://{settings.host}:{settings.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)


def test_a_killed_browser_server_is_reported_as_the_infrastructures_failure(chromium_path, sites):
    token = "t0ken-for-the-openenv-test"
    with browser_server_process(chromium_path, f"{sites.host}:{sites.port}") as (browser_url, process):
        episode = GymSettings(browser_url=browser_url, sites_url=sites.base_url, truth_url=sites.truth_url,
                              truth_token=sites.truth_token)
        settings = OpenEnvSettings(port=free_port(), token=token, episode=episode)
        with _app_in_thread(settings) as url:
            assert httpx.get(f"{url}/health", trust_env=False).status_code == 401  # the token is missing
            assert httpx.get(f"{url}/{token}/health", trust_env=False).json() == {"status": "healthy"}
            foreign = httpx.get(f"{url}/{token}/health", headers={"Origin": "http://evil.example"},
                                trust_env=False)
            assert foreign.status_code == 403  # a web page's request
            with pytest.raises(ConnectionError), _client(url) as env:  # the websocket without the token
                env.reset()
            with _client(f"{url}/{token}") as env:
                before = env.reset(seed=5)
                assert before.observation.infrastructure_failure is False
                kill_process_family(process)
                failed = env.step(WebGymAction(reply=reply(AgentAction("wait"))))
                assert failed.observation.infrastructure_failure is True and failed.done
                assert failed.reward is None  # dropped, never a silent 0
                assert failed.observation.error.startswith("server_unavailable")
                again = env.reset(seed=6)  # a reset the infrastructure fails: an observation says so
                assert again.observation.infrastructure_failure is True and again.reward is None


def test_the_settings_refuse_an_open_bind_without_a_token_and_a_short_token():
    with pytest.raises(ValueError, match="host: refusing to bind 0.0.0.0 without --token"):
        OpenEnvSettings(host="0.0.0.0")
    with pytest.raises(ValueError, match="token: at least 16 characters"):
        OpenEnvSettings(host="0.0.0.0", token="short")
    with pytest.raises(ValueError, match="task: 'click-test' names no environment"):
        OpenEnvSettings(environment="click-test")
    assert OpenEnvSettings(host="0.0.0.0", token="a" * 16).max_sessions == 4


def test_without_the_extra_the_error_names_it():
    code = ("import sys; sys.modules['openenv'] = None\n"
            "import webgym_rollout.interop as interop\n"
            "try:\n    interop.WebGymOpenEnvClient\nexcept ImportError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert "needs openenv-core: pip install 'webgym[interop]'" in done.stdout
    command = ("import sys; sys.modules['openenv'] = None\n"
               "from webgym_rollout.cli import main; main(['serve-openenv', '--help'])")
    done = subprocess.run([sys.executable, "-c", command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode != 0 and "pip install 'webgym[interop]'" in done.stderr
