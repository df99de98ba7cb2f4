"""WebEnv on real Chromium behind the real browser server: reset/step/close, the horizon, an agent's
mistakes as data, the environment's own reward, and the README's example run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from webgym_data.schema import Task
from webgym_rollout.actions import AgentAction, pixels_to_grid
from webgym_rollout.agent.policies import PolicyOutput
from webgym_rollout.agent.protocol import format_response, parse_response
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.protocol import BrowserAction
from webgym_rollout.env import EpisodeOver, WebEnv
from webgym_rollout.errors import SessionNotFound
from webgym_rollout.settings import EnvSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.browser



@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client(chromium_path, sites, faults):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=2,
                        allow_hosts=(f"{sites.host}:{sites.port}", faults.removeprefix("http://")))
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _), \
            BrowserClient(url) as client:
        yield client


def miniwob(task: str, seed: int) -> Task:
    return Task.from_row({"task_id": f"{task}-{seed}", "task_name": f"MiniWoB {task}",
                          "website": f"miniwob:{task}", "environment": f"miniwob:{task}", "env_seed": seed})


def reply(action: AgentAction | str, **sections) -> PolicyOutput:
    text = action if isinstance(action, str) else format_response(action, **sections)
    return PolicyOutput(response=text, parsed=parse_response(text), messages=[], model="scripted")


async def test_a_miniwob_episode_is_rewarded_by_its_page(client, sites_url):
    env = WebEnv(client, EnvSettings(sites_url=sites_url, elements=True, horizons={"miniwob": 5}))
    observation = await env.reset(miniwob("click-test", 1))
    assert observation.instruction.startswith("Click") and observation.step == 0
    assert observation.viewport == (160, 210)  # the MiniWoB task area, clipped
    assert env.session is not None and env.horizon == 5
    (button,) = [e for e in observation.elements if e.tag == "button"]
    target = pixels_to_grid(button.x + button.width / 2, button.y + button.height / 2, observation.viewport)
    result = await env.step(reply(AgentAction("left_click", coordinate=target), memory="found it"))
    assert result.terminated and not result.truncated and result.reward == 1.0
    assert result.info["outcome"].done and result.info["outcome"].raw_reward == 1.0
    (step,) = env.steps
    assert step is result.info["step"] and step.memory == "found it" and step.action_error == ""
    assert step.screenshot == observation.screenshot and step.latency.execute_s > 0
    with pytest.raises(EpisodeOver, match="reset"):
        await env.step(reply(AgentAction("wait")))
    await env.close()
    assert env.session is None


async def test_mistakes_are_data_and_the_horizon_truncates(client, sites_url):
    task = Task.from_row({"task_id": "form", "task_name": "Read the form page", "benchmark_name": "sandbox",
                          "website": f"{sites_url}/sandbox/form.html"})
    async with WebEnv(client, EnvSettings(train_horizons=(3, 3, 3))) as env:
        observation = await env.reset(task)
        assert observation.title == "Sandbox form" and observation.instruction == "Read the form page"
        first = await env.step(reply("I am not sure."))
        assert not (first.terminated or first.truncated) and first.reward == 0.0
        assert first.info["step"].action == "" and "no <tool_call>" in first.info["step"].action_error
        assert first.info["step"].same_as_next  # nothing happened: the page is unchanged
        assert first.observation.last_action_error == first.info["step"].action_error  # shown to the policy
        refused = await env.step(reply(AgentAction("navigate", url="http://127.0.0.2:9/")))
        assert "127.0.0.2" in refused.info["step"].action_error
        assert refused.observation.url.endswith("form.html")
        last = await env.step(reply(AgentAction("scroll", direction="down")))
        assert last.truncated and not last.terminated and env.done
        assert [s.index for s in env.steps] == [0, 1, 2]
        assert not last.info["step"].same_as_next  # the last step has no next screenshot to compare
    assert env.session is None  # the context manager closed it


async def test_a_step_is_one_act_call_and_a_lost_session_raises(client, sites_url):
    env = WebEnv(client, EnvSettings(sites_url=sites_url, elements=True, horizons={"miniwob": 5}))
    observation = await env.reset(miniwob("click-button", 2))
    session, sent = env.session, []
    act = session.act

    async def counted(action, **options):
        sent.append(action)
        return await act(action, **options)

    async def refused(*args, **kwargs):
        raise AssertionError("a page action's step is one act call")

    session.act = counted
    session.execute = session.screenshot = session.env_state = session.page_info = refused
    # A click on the instruction bar: nothing happens, the episode goes on with a fresh observation.
    idle = await env.step(reply(AgentAction("left_click", coordinate=(500, 60))))
    assert not (idle.terminated or idle.truncated) and idle.info["outcome"].done is False
    assert isinstance(sent[0], BrowserAction) and sent[0].kind == "click"
    assert idle.observation.elements and idle.observation.step == 1
    target = observation.instruction.split('"')[1]
    (button,) = [e for e in idle.observation.elements if e.tag == "button" and e.text == target]
    centre = pixels_to_grid(button.x + button.width / 2, button.y + button.height / 2, observation.viewport)
    won = await env.step(reply(AgentAction("left_click", coordinate=centre)))
    assert won.terminated and won.reward == 1.0 and len(sent) == 2
    assert won.info["timings"]["execute_s"] > 0 and won.info["timings"]["observe_s"] > 0
    # Infrastructure: a session that is gone on the server raises, it is no agent mistake.
    await env.reset(miniwob("click-button", 3))
    await env.session.close()
    with pytest.raises(SessionNotFound):
        await env.step(reply(AgentAction("left_click", coordinate=(500, 500))))
    await env.close()


async def test_an_action_the_page_refuses_is_the_agents_mistake(client, sites_url):
    task = Task.from_row({"task_id": "form", "task_name": "Pick a colour", "benchmark_name": "sandbox",
                          "website": f"{sites_url}/sandbox/form.html"})
    async with WebEnv(client, EnvSettings(train_horizons=(3, 3, 3))) as env:
        await env.reset(task)
        result = await env.step(reply(AgentAction("select", coordinate=(2, 2), option="Blue")))
        step = result.info["step"]
        assert "no <select> element" in step.action_error and not result.terminated
        assert result.observation.last_action_error == step.action_error
        assert result.observation.screenshot and step.same_as_next


async def test_a_popup_the_action_opened_is_recorded_on_its_step(client, faults):
    """The page's click handler submits a form to a new tab: the server closes it, the step says so."""
    task = Task.from_row({"task_id": "popup", "task_name": "Open it", "benchmark_name": "sandbox",
                          "website": f"{faults}/popup-form"})
    async with WebEnv(client, EnvSettings(train_horizons=(3, 3, 3))) as env:
        observation = await env.reset(task)
        click = AgentAction("left_click", coordinate=pixels_to_grid(150, 50, observation.viewport))
        opened = (await env.step(reply(click))).info["step"]
        assert opened.popups == (f"{faults}/ok?",) and opened.action_error == ""
        still = (await env.step(reply(AgentAction("scroll", direction="down")))).info["step"]
        assert still.popups == () and still.url == f"{faults}/popup-form"


async def test_answer_ends_the_episode_and_reset_starts_afresh(client, sites_url):
    env = WebEnv(client, EnvSettings(sites_url=sites_url))
    await env.reset(miniwob("click-button", 3))
    first_session = env.session.session_id
    result = await env.step(reply(AgentAction("answer", text="done")))
    assert result.terminated and env.answer == "done" and result.info["answer"] == "done"
    observation = await env.reset(miniwob("click-button", 4))
    assert env.session.session_id != first_session and env.steps == [] and env.answer == ""
    assert observation.step == 0 and observation.history == ()
    await env.close()


def test_a_task_that_cannot_run_here_is_refused_before_a_session_opens():
    import asyncio

    class NoClient:
        async def open_session(self, *args, **kwargs):
            raise AssertionError("no session may be opened")

    env = WebEnv(NoClient(), EnvSettings())  # no site server given
    with pytest.raises(ValueError, match="sites_url.*MiniWoB"):
        asyncio.run(env.reset(miniwob("click-test", 0)))


def test_a_step_budget_for_a_kind_that_does_not_exist_is_refused():
    no_client: Any = object()  # the settings are checked before any session opens
    with pytest.raises(ValueError, match="horizons: no task kind is named 'minwob'; the kinds are miniwob, "):
        WebEnv(no_client, EnvSettings(horizons={"minwob": 2}))
    assert WebEnv(no_client, EnvSettings(horizons={"miniwob": 2})).settings.horizons == {"miniwob": 2}


def test_the_old_import_path_of_env_settings_warns_and_still_works():
    moved = r"webgym_rollout\.env\.EnvSettings moved to webgym_rollout\.settings\.EnvSettings"
    with pytest.warns(DeprecationWarning, match=moved):
        from webgym_rollout.env import EnvSettings as Old
    assert Old is EnvSettings


def _readme_example() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- webenv-example -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert match, "README.md has no WebEnv example block"
    return match.group(1)


def test_the_readme_example_runs_as_written(tmp_path, chromium_path):
    code = _readme_example()
    assert 20 <= len(code.strip().splitlines()) <= 40
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WEBGYM_CHROMIUM": chromium_path}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("instruction: Click")
    assert any(re.match(r"step 0: ", line) for line in lines)
    assert re.match(r"reward: -?[01](\.0)? after \d+ steps", lines[-1])
