"""The observation modes through the real environment (real Chromium behind the real browser server)
on a MiniWoB++ page and a local-site page, the element list's format, and the setting as a flag and
a YAML key."""

from __future__ import annotations

import io
import json

import pytest
import pytest_asyncio

from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings
from webgym_data.schema import Task
from webgym_rollout.actions import AgentAction, pixels_to_grid
from webgym_rollout.agent.protocol import build_messages
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.protocol import Element
from webgym_rollout.env import AXTREE_HEADER, ELEMENTS_HEADER, WebEnv
from webgym_rollout.observations import render_elements
from webgym_rollout.observations.marks import draw_marks
from webgym_rollout.runner.settings import RunSettings
from webgym_rollout.settings import EnvSettings, ObservationSettings
from webgym_sites.generate import site_tasks


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser_url(chromium_path, sites):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=3,
                        allow_hosts=(f"{sites.host}:{sites.port}",))
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _):
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client(browser_url):
    async with BrowserClient(browser_url) as client:
        yield client


def login_user(seed: int = 3) -> Task:
    return Task.from_row({"task_id": f"login-user-{seed}", "task_name": "MiniWoB login-user",
                          "website": "miniwob:login-user", "environment": "miniwob:login-user",
                          "env_seed": seed})


def shop(sites_url: str) -> Task:
    return site_tasks(1, base_url=sites_url, sites=("shop",))[0]


def settings(sites_url: str, *modes: str) -> EnvSettings:
    return EnvSettings(sites_url=sites_url, observation=ObservationSettings(modes=modes))


def element_lines(text: str) -> list[str]:
    head, _, body = text.partition("\n")
    assert head == ELEMENTS_HEADER
    return body.splitlines()


# ----------------------------------------------------------------------------- through the env


@pytest.mark.browser
@pytest.mark.parametrize("page", ["miniwob", "site"])
async def test_the_screenshot_mode_shows_what_it_showed_before(client, sites_url, page):
    plain = WebEnv(client, EnvSettings(sites_url=sites_url))
    assert EnvSettings().observation.modes == ("screenshot",)
    observation = await plain.reset(login_user() if page == "miniwob" else shop(sites_url))
    assert observation.text == "" and observation.image and observation.elements == ()
    assert not observation.numbered  # the published recipe: coordinate actions only
    assert plain._shot is not None and observation.screenshot == plain._shot.data  # the screenshot as shot
    result = await plain.step(AgentAction("wait"))
    (step,) = plain.steps
    assert step.observation_text == "" and step.screenshot == observation.screenshot
    assert step.screenshot_sha256 == result.observation.history[0].screenshot_sha256
    user = build_messages(result.observation)[-1]["content"]
    assert [part["type"] for part in user] == ["text", "image"]
    assert "Interactive elements" not in user[0]["text"]
    await plain.close()


@pytest.mark.browser
async def test_the_elements_mode_lists_what_a_miniwob_page_shows_and_the_step_records_it(client, sites_url):
    env = WebEnv(client, settings(sites_url, "screenshot", "elements"))
    observation = await env.reset(login_user())
    # login-user shows two text fields and a Login button, by these ids.
    assert element_lines(observation.text) == ['[1] textbox "" (id=username)', '[2] textbox "" (id=password)',
                                               '[3] button "Login" (id=subbtn)']
    assert len(observation.elements) == 3 and observation.image
    assert observation.numbered and "click_element" in build_messages(observation)[0]["content"]
    user = build_messages(observation)[-1]["content"]
    assert user[0]["text"].endswith("\n\n" + observation.text) and user[1]["type"] == "image"
    (username,) = [e for e in observation.elements if e.name == "username"]
    centre = pixels_to_grid(username.x + username.width / 2, username.y + username.height / 2,
                            observation.viewport)
    await env.step(AgentAction("left_click", coordinate=centre))
    result = await env.step(AgentAction("type", text="myron"))
    first, second = env.steps
    # Each step records the text its policy was shown; the typed name shows in the next list.
    assert first.observation_text == observation.text
    assert '[1] textbox "myron" (id=username)' in element_lines(result.observation.text)
    assert second.observation_text != result.observation.text
    await env.close()


@pytest.mark.browser
async def test_the_elements_mode_lists_the_links_of_a_local_site_page(client, sites_url):
    env = WebEnv(client, settings(sites_url, "elements"))  # text only: the prompt has no image
    observation = await env.reset(shop(sites_url))
    lines = element_lines(observation.text)
    assert len(lines) == len(observation.elements) > 10
    for wanted in ('textbox "Search products" (id=search)', 'link "Cart (0)" (id=cart-link)',
                   'link "Sign in" (id=signin-link)'):
        assert any(line.endswith(wanted) for line in lines), wanted
    assert [line.split("]")[0] for line in lines] == [f"[{i}" for i in range(1, len(lines) + 1)]
    assert not observation.image
    messages = build_messages(observation)
    assert all(part["type"] == "text" for m in messages if isinstance(m["content"], list)
               for part in m["content"])
    result = await env.step(AgentAction("wait"))
    assert env.steps[0].screenshot and env.steps[0].observation_text == observation.text
    assert all(part["type"] == "text" for part in build_messages(result.observation)[-1]["content"])
    await env.close()


@pytest.mark.browser
async def test_a_run_with_the_flag_records_what_each_step_showed(tmp_path, browser_url, sites_url):
    from webgym_rollout.runner import run
    from webgym_rollout.trajectory.reader import read_episodes

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(login_user(seed).to_row()) + "\n" for seed in (1, 2)))
    settings = load_settings(RunSettings, None, {"env__observation__modes": ("elements",)},
                             tasks=str(tasks), servers=(browser_url,), out=str(tmp_path / "out"),
                             env__sites_url=sites_url, policy__kind="random", progress=False,
                             env__horizons={"miniwob": 2})
    await run(settings)
    steps = [step for episode in read_episodes(tmp_path / "out") for step in episode.steps]
    assert len(steps) >= 2
    for step in steps:  # login-user's fields and button, whatever the random policy did
        assert step.observation_text.startswith(ELEMENTS_HEADER + "\n")
        assert '(id=subbtn)' in step.observation_text
        assert json.loads(step.messages)[-1]["content"][0]["text"].endswith(step.observation_text)


# ------------------------------------------------------------------------------ the element list


def test_the_element_list_is_one_numbered_line_each_and_cannot_be_broken_by_the_page():
    elements = [Element(x=0, y=0, width=10, height=10, tag="button", role="button", text="Submit", name="go"),
                Element(x=0, y=0, width=10, height=10, tag="div", role="", text='say "hi"\nthere'),
                {"tag": "a", "role": "link", "text": "x" * 200, "name": ""}]
    lines = render_elements(elements).splitlines()
    assert lines[0] == '[1] button "Submit" (id=go)'
    assert lines[1] == '[2] div "say \\"hi\\" there"'
    assert lines[2].startswith('[3] link "xxx') and lines[2].endswith('..."') and len(lines[2]) < 100
    assert render_elements([]) == ""


# ---------------------------------------------------------------------------------- the setting


def test_the_modes_are_a_flag_and_a_yaml_key_and_a_bad_mode_is_named(tmp_path):
    from click.testing import CliRunner

    from webgym_rollout.cli import main

    config = tmp_path / "run.yaml"
    config.write_text("tasks: t.jsonl\nout: out\nservers: [http://127.0.0.2:9]\n"
                      "observation:\n  modes: [som, elements]\n  axtree_tokens: 500\n")
    from_yaml = load_settings(RunSettings, config, {})
    assert from_yaml.env.observation == ObservationSettings(modes=("som", "elements"), axtree_tokens=500)
    from_flag = load_settings(RunSettings, config, {"env__observation__modes": ("axtree,elements",)})
    assert from_flag.env.observation.modes == ("axtree", "elements")
    required = {"tasks": "t.jsonl", "out": "out", "servers": ("http://127.0.0.2:9",)}
    assert load_settings(RunSettings, None, required).env.observation.modes == ("screenshot",)
    with pytest.raises(SettingsError, match=r"observation\.modes.*'dom'.*screenshot, som, axtree, elements"):
        load_settings(RunSettings, None, {**required, "env__observation__modes": ("screenshot", "dom")})
    with pytest.raises(ValueError, match="give one of them"):
        ObservationSettings(modes=("screenshot", "som"))
    with pytest.raises(ValueError, match="axtree_tokens"):
        ObservationSettings(axtree_tokens=0)
    help_text = CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output
    assert "--observation-modes" in help_text and "--observation-axtree-tokens" in help_text


# -------------------------------------------------------------------------- som and axtree


@pytest.mark.browser
@pytest.mark.parametrize("page", ["miniwob", "site"])
async def test_the_som_mode_shows_and_records_the_screenshot_marked_with_the_listed_elements(
        client, sites_url, page):
    from PIL import Image

    env = WebEnv(client, settings(sites_url, "som", "elements"))
    observation = await env.reset(login_user() if page == "miniwob" else shop(sites_url))
    raw = env._shot
    assert raw is not None and observation.image
    # The image shown is the screenshot with the step's elements drawn, numbered as the list is.
    assert observation.screenshot != raw.data
    assert observation.screenshot == draw_marks(raw.data, observation.elements, viewport=observation.viewport)
    assert len(element_lines(observation.text)) == len(observation.elements) > 0
    marked, plain = (Image.open(io.BytesIO(data)).convert("RGB")
                     for data in (observation.screenshot, raw.data))
    assert marked.size == plain.size
    scale = plain.size[0] / observation.viewport[0]
    for element in observation.elements:  # each element's box is drawn on (its outline differs)
        box = [round(v * scale) for v in (element.x, element.y, element.x + element.width,
                                          element.y + element.height)]
        box = [max(0, box[0]), max(0, box[1]), min(plain.size[0], box[2]), min(plain.size[1], box[3])]
        if box[2] > box[0] and box[3] > box[1]:
            assert marked.crop(box).tobytes() != plain.crop(box).tobytes(), element
    result = await env.step(AgentAction("wait"))
    (step,) = env.steps
    assert step.screenshot == observation.screenshot and step.observation_text == observation.text
    assert step.same_as_next == (env._shot.sha256 == raw.sha256)
    assert result.observation.screenshot != env._shot.data
    await env.close()


@pytest.mark.browser
@pytest.mark.parametrize("page", ["miniwob", "site"])
async def test_the_axtree_mode_shows_the_tree_before_the_list_with_the_same_numbers(client, sites_url, page):
    env = WebEnv(client, settings(sites_url, "screenshot", "axtree", "elements"))
    observation = await env.reset(login_user() if page == "miniwob" else shop(sites_url))
    tree, _, listed = observation.text.partition("\n\n" + ELEMENTS_HEADER + "\n")
    assert tree.startswith(AXTREE_HEADER + "\n") and listed
    assert listed.splitlines() == render_elements(observation.elements).splitlines()
    # Every element of the list is in the tree under its number, named as the list names it.
    for number, element in enumerate(observation.elements, start=1):
        assert f"[{number}] {element.role or element.tag}" in tree
    if page == "miniwob":
        assert '[3] button "Login"' in tree
    else:
        assert "Search products" in tree and "Sign in" in tree
    small = WebEnv(client, EnvSettings(sites_url=sites_url, observation=ObservationSettings(
        modes=("axtree",), axtree_tokens=40)))
    cut = await small.reset(shop(sites_url))
    assert len(cut.text) <= len(AXTREE_HEADER) + 1 + 40 * 4 and "cut to fit 40 tokens" in cut.text
    assert not cut.image
    await small.close()
    await env.close()
