"""`WebGymEnv`: the Gymnasium environment over `WebEnv`, on real Chromium behind the real browser
server and the real site server: Gymnasium's own `check_env` on a MiniWoB id and a site id, a
scripted correct reply rewarded by the page, an unparseable reply as a no-op, the horizon, the
site's truth as the judge, nothing left running after `close`, and a killed browser server reported
as the infrastructure's failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import warnings

import gymnasium  # the interop extra (scripts/setup.sh installs every extra)
import numpy as np
import psutil
import pytest
from gymnasium.utils.env_checker import check_env

from tests.conftest import REPO_ROOT, free_port
from tests.webgym_rollout.interop.servers import browser_server_process, kill_process_family, ports_answer
from webgym_rollout.actions import AgentAction
from webgym_rollout.agent.protocol import format_response
from webgym_rollout.errors import EpisodeOver, ServerUnavailable
from webgym_rollout.interop import WebGymEnv, register

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser_url(chromium_path, sites):
    """A browser server (a child process) the environments of the module attach to."""
    register()
    with browser_server_process(chromium_path, f"{sites.host}:{sites.port}", contexts=4) as (url, _):
        yield url


@pytest.fixture
def attach(browser_url, sites):
    """``attach(id, **settings)``: `gymnasium.make` on the module's servers; closed after the test."""
    made = []

    def make(env_id: str, **settings):
        env = gymnasium.make(env_id, browser_url=browser_url, sites_url=sites.base_url,
                             truth_url=sites.truth_url, truth_token=sites.truth_token, **settings)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def reply(action: AgentAction) -> str:
    return format_response(action)


@pytest.mark.parametrize("env_id", ["webgym/miniwob-click-test-v0", "webgym/site-shop-v0"])
def test_check_env_passes(attach, env_id):
    env = attach(env_id, horizon=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning of the checker is a failure here
        check_env(env.unwrapped)
    space = env.observation_space
    assert set(space.spaces) == {"screenshot", "instruction", "url", "title", "text"}
    assert space["screenshot"].dtype == np.uint8 and space["screenshot"].shape[2] == 3


def test_the_registered_ids_cover_miniwob_and_the_three_sites():
    ids = register()
    assert {"webgym/miniwob-click-test-v0", "webgym/site-shop-v0", "webgym/site-travel-v0",
            "webgym/site-reference-v0"} <= set(ids)
    assert all(env_id in gymnasium.registry for env_id in ids)
    assert register() == ids  # idempotent
    spec = gymnasium.spec("webgym/miniwob-click-button-v0")
    assert spec.kwargs == {"environment": "miniwob:click-button"}
    with pytest.raises(ValueError, match="no local site 'nowhere'"):
        WebGymEnv("site:nowhere")
    unstarted = WebGymEnv("miniwob:click-test")
    with pytest.raises(EpisodeOver, match="reset"):  # and it started nothing
        unstarted.step("a reply")
    assert (unstarted.browser_url, unstarted.sites_url) == ("", "")
    unstarted.close()


def test_a_scripted_correct_reply_earns_the_pages_reward(attach):
    env = attach("webgym/miniwob-click-test-v0", observation_modes=("screenshot", "elements"))
    observation, info = env.reset(seed=7)
    assert observation in env.observation_space and info["infrastructure_failure"] is False
    assert observation["screenshot"].shape == (210, 160, 3) and observation["screenshot"].any()
    assert observation["instruction"] == "Click the button."
    assert observation["url"].endswith("/miniwob/click-test.html")
    number = int(re.search(r"\[(\d+)\] button", observation["text"]).group(1))
    observation, reward, terminated, truncated, info = env.step(
        reply(AgentAction("click_element", element=number)))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["step"].action_error == "" and '"click_element"' in info["step"].action
    assert info["infrastructure_failure"] is False and info["error"] == ""
    assert [verdict.passed for verdict in info["verdicts"]] == [True]


def test_an_unparseable_reply_is_a_no_op_and_the_horizon_truncates(attach):
    env = attach("webgym/miniwob-click-test-v0", horizon=2)
    first, _ = env.reset(seed=3)
    observation, reward, terminated, truncated, info = env.step("I would click the button.")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert "no <tool_call>" in info["step"].action_error and info["step"].action == ""
    assert info["infrastructure_failure"] is False  # the agent's mistake, not the infrastructure's
    assert np.array_equal(observation["screenshot"], first["screenshot"])  # nothing happened
    observation, reward, terminated, truncated, info = env.step(reply(AgentAction("wait")))
    assert (reward, terminated, truncated) == (0.0, False, True)  # the budget of 2 steps ran out
    assert [verdict.passed for verdict in info["verdicts"]] == [False]


def test_a_site_episode_is_judged_by_the_sites_truth(attach):
    env = attach("webgym/site-shop-v0", horizon=3)
    observation, info = env.reset(seed=11)
    assert observation["screenshot"].shape == (720, 1280, 3)
    assert "/shop/" in observation["url"] and info["task_id"]
    again, info_again = env.reset(seed=11)
    assert info_again["task_id"] == info["task_id"]  # the seed draws the task
    assert again["instruction"] == observation["instruction"]
    observation, reward, terminated, truncated, info = env.step(
        reply(AgentAction("answer", text="I did nothing.")))
    assert (reward, terminated, truncated) == (0.0, True, False)
    names = [verdict.criterion for verdict in info["verdicts"]]
    assert names and all(name.startswith(("fact:", "definite_answer")) for name in names)
    assert not all(verdict.passed for verdict in info["verdicts"])


def test_a_truth_listener_that_does_not_answer_is_the_infrastructures_failure(browser_url, sites):
    env = gymnasium.make("webgym/site-travel-v0", browser_url=browser_url, sites_url=sites.base_url,
                         truth_url=f"http://127.0.0.1:{free_port()}", truth_token="nobody-listens", horizon=2)
    try:
        env.reset(seed=2)
        _, reward, terminated, truncated, info = env.step(reply(AgentAction("answer", text="Done.")))
        assert (reward, terminated, truncated) == (0.0, True, False)  # the episode ended as it did
        assert info["infrastructure_failure"] is True and info["error"].startswith("judge_unavailable")
        assert "verdicts" not in info and info["step"].action_error == ""
    finally:
        env.close()


def test_close_stops_everything_the_env_started(chromium_path):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    threads = set(threading.enumerate())
    env = gymnasium.make("webgym/miniwob-click-test-v0", chromium=chromium_path)
    env.reset(seed=0)
    unwrapped = env.unwrapped
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert any("chrom" in p.name() for p in started)  # the env's own Chromium
    assert ports_answer(f"{unwrapped.browser_url}/health", unwrapped.sites_url) == [True, True]
    env.close()
    env.close()  # twice is no error
    gone, alive = psutil.wait_procs(started, timeout=30)
    assert alive == []
    assert ports_answer(f"{unwrapped.browser_url}/health", unwrapped.sites_url) == [False, False]
    deadline = time.monotonic() + 10
    while set(threading.enumerate()) - threads and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(threading.enumerate()) - threads == set()


def test_a_killed_browser_server_is_the_infrastructures_failure(chromium_path, sites):
    with browser_server_process(chromium_path, f"{sites.host}:{sites.port}") as (url, process):
        env = gymnasium.make("webgym/miniwob-click-test-v0", browser_url=url, sites_url=sites.base_url)
        try:
            before, _ = env.reset(seed=5)
            kill_process_family(process)  # Chromium too, as a crash of the machine would
            observation, reward, terminated, truncated, info = env.step(reply(AgentAction("wait")))
            assert info["infrastructure_failure"] is True and info["error"].startswith("server_unavailable")
            assert (reward, terminated, truncated) == (0.0, False, True)  # ended, and not the agent's doing
            assert info["step"] is None
            assert np.array_equal(observation["screenshot"], before["screenshot"])  # the last one seen
            with pytest.raises(ServerUnavailable):  # no step to carry it: reset raises the typed error
                env.reset(seed=6)
        finally:
            env.close()


def test_without_the_extra_the_error_names_it():
    code = ("import sys; sys.modules['gymnasium'] = None\n"
            "import webgym_rollout.interop as interop\n"
            "try:\n    interop.WebGymEnv\nexcept ImportError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert "pip install 'webgym[interop]'" in done.stdout
