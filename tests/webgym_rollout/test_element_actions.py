"""Element actions on real pages behind the real browser server: an element action lands where the
coordinate action at the element's centre lands, types, selects and hovers, and an element id the
page does not list is the agent's mistake on its step while the episode goes on."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
import pytest_asyncio

from tests.webgym_rollout.test_env import miniwob, reply
from webgym_data.schema import Task
from webgym_rollout.actions import AgentAction, element_actions_for, pixels_to_grid
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.protocol import ActResult, BrowserAction, Element
from webgym_rollout.env import WebEnv
from webgym_rollout.settings import EnvSettings, ObservationSettings

pytestmark = pytest.mark.browser


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client(chromium_path, sites):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=2,
                        allow_hosts=(f"{sites.host}:{sites.port}",))
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _), \
            BrowserClient(url) as client:
        yield client


def element_id(elements: Sequence[Element], *, tag: str, text: str | None = None) -> int:
    """The id (1-based position) of the one element of `elements` with this tag (and text)."""
    ids = [i for i, e in enumerate(elements, 1) if e.tag == tag and (text is None or e.text == text)]
    assert len(ids) == 1, (tag, text, elements)
    return ids[0]


def centre(element: Element) -> tuple[float, float]:
    return element.x + element.width / 2, element.y + element.height / 2


async def test_an_element_click_lands_where_the_coordinate_click_at_its_centre_lands(client, sites_url):
    settings = EnvSettings(sites_url=sites_url, elements=True, horizons={"miniwob": 5})
    async with WebEnv(client, settings) as env:
        observation = await env.reset(miniwob("click-button", 2))
        target = observation.instruction.split('"')[1]
        buttons = [i for i, e in enumerate(observation.elements, 1) if e.tag == "button"]
        assert len(buttons) >= 2
        # The right button wins and a wrong one loses, whichever way the policy names it.
        for chosen in (element_id(observation.elements, tag="button", text=target),
                       next(i for i in buttons if observation.elements[i - 1].text != target)):
            outcomes = []
            for by_element in (True, False):
                observation = await env.reset(miniwob("click-button", 2))
                element = observation.elements[chosen - 1]
                action = (AgentAction("click_element", element=chosen) if by_element else
                          AgentAction("left_click", coordinate=pixels_to_grid(*centre(element),
                                                                              observation.viewport)))
                result = await env.step(reply(action))
                step = result.info["step"]
                assert step.action_error == "" and step.action == action.to_json()  # as the policy wrote it
                (sent,) = result.info["browser_actions"]
                outcomes.append((result.terminated, result.reward, result.info["outcome"].raw_reward, sent))
            (done, reward, raw, at_element), (done_c, reward_c, raw_c, at_coordinate) = outcomes
            assert done and (done, reward, raw) == (done_c, reward_c, raw_c)
            assert reward == (1.0 if observation.elements[chosen - 1].text == target else -1.0)
            assert at_element.kind == at_coordinate.kind == "click"
            assert abs(at_element.x - at_coordinate.x) <= 1 and abs(at_element.y - at_coordinate.y) <= 1
            assert (at_element.x, at_element.y) == centre(element)


async def test_type_element_clicks_the_field_and_types_into_it(client, sites_url):
    settings = EnvSettings(sites_url=sites_url, elements=True, horizons={"miniwob": 5})
    async with WebEnv(client, settings) as env:
        observation = await env.reset(miniwob("enter-text", 3))
        wanted = observation.instruction.split('"')[1]
        field = element_id(observation.elements, tag="input", text="")
        session, calls = env.session, []
        act = session.act

        async def counted(action, **options):
            calls.append((action.kind, options.get("screenshot", "default") is not None))
            return await act(action, **options)

        session.act = counted
        typed = await env.step(reply(AgentAction("type_element", element=field, text=wanted)))
        assert typed.info["step"].action_error == "" and not typed.terminated
        # Two calls: the click without an observation, then the typing with the next one.
        assert calls == [("click", False), ("type", True)]
        click, keys = typed.info["browser_actions"]
        assert click == BrowserAction.click(*centre(observation.elements[field - 1]))
        assert keys == BrowserAction.type_text(wanted)
        # The field holds the text (the element list reads an input's value).
        after = typed.observation.elements
        assert after[element_id(after, tag="input") - 1].text == wanted
        assert not typed.info["step"].same_as_next
        submit = element_id(after, tag="button", text="Submit")
        won = await env.step(reply(AgentAction("click_element", element=submit)))
        assert won.terminated and won.reward == 1.0


async def test_select_element_chooses_the_option_of_a_real_select(client, sites_url):
    # Without EnvSettings.elements the env has read no elements: it reads them to resolve the id.
    settings = EnvSettings(sites_url=sites_url, horizons={"miniwob": 5})
    async with WebEnv(client, settings) as env:
        observation = await env.reset(miniwob("choose-list", 4))
        assert observation.elements == ()
        wanted = observation.instruction.removeprefix("Select ").split(" from the list")[0]
        elements = (await env.session.page_info(elements=True)).elements
        chooser = element_id(elements, tag="select")
        submit = element_id(elements, tag="button", text="Submit")
        # On something that is not a <select>: the agent's mistake, named, and nothing happens.
        wrong = await env.step(reply(AgentAction("select_element", element=submit, option=wanted)))
        assert f"element {submit} is a <button>, not a drop-down list" in wrong.info["step"].action_error
        assert not wrong.terminated and wrong.info["browser_actions"] == ()
        chose = await env.step(reply(AgentAction("select_element", element=chooser, option=wanted)))
        assert chose.info["step"].action_error == "" and not chose.terminated
        assert chose.info["browser_actions"] == (
            BrowserAction.select_option(*centre(elements[chooser - 1]), wanted),)
        won = await env.step(reply(AgentAction("click_element", element=submit)))
        assert won.terminated and won.reward == 1.0  # the page read the chosen option


async def test_hover_element_moves_the_mouse_onto_the_element(client, sites_url):
    task = Task.from_row({"task_id": "form", "task_name": "Hover", "benchmark_name": "sandbox",
                          "website": f"{sites_url}/sandbox/form.html"})
    async with WebEnv(client, EnvSettings(elements=True, train_horizons=(4, 4, 4))) as env:
        observation = await env.reset(task)
        hover_me = element_id(observation.elements, tag="span", text="hover me")
        idle = await env.step(reply(AgentAction("wait", time=0)))
        assert idle.info["step"].same_as_next  # nothing on the page moves by itself
        # The span's mouseover handler writes "hovered" beside it: the page changes.
        hovered = await env.step(reply(AgentAction("hover_element", element=hover_me)))
        assert hovered.info["step"].action_error == "" and not hovered.info["step"].same_as_next
        (sent,) = hovered.info["browser_actions"]
        assert (sent.x, sent.y) == centre(observation.elements[hover_me - 1])
        # "hovered" now stands before the "Next page" link, which moved right; nothing scrolled.
        before, after = observation.elements, hovered.observation.elements
        link = element_id(before, tag="a", text="Next page")
        assert after[link - 1].x > before[link - 1].x
        assert [e.y for e in after] == [e.y for e in before]
        assert hovered.observation.url.endswith("form.html")  # a hover, not a click on the link


async def test_an_element_the_page_does_not_list_is_an_agent_error_and_the_episode_goes_on(client, sites_url):
    settings = EnvSettings(sites_url=sites_url, elements=True, horizons={"miniwob": 5})
    async with WebEnv(client, settings) as env:
        observation = await env.reset(miniwob("click-button", 5))
        count = len(observation.elements)
        missing = AgentAction("click_element", element=count + 5)
        result = await env.step(reply(missing))
        step = result.info["step"]
        assert step.action_error == f"element {count + 5} does not exist: the page lists {count} elements"
        assert step.action == missing.to_json()  # the step keeps what the policy wrote
        assert not (result.terminated or result.truncated) and result.reward == 0.0
        assert result.info["browser_actions"] == () and step.same_as_next
        assert result.observation.last_action_error == step.action_error  # shown to the policy
        # Scripted play (an AgentAction, not a reply) alike; every element action checks the number.
        scripted = await env.step(AgentAction("hover_element", element=count + 1))
        assert scripted.info["step"].action_error == \
            f"element {count + 1} does not exist: the page lists {count} elements"
        assert not scripted.terminated
        target = observation.instruction.split('"')[1]
        won = await env.step(reply(AgentAction("click_element",
                                               element=element_id(result.observation.elements,
                                                                  tag="button", text=target))))
        assert won.terminated and won.reward == 1.0 and [s.index for s in env.steps] == [0, 1, 2]


async def test_type_element_stops_at_a_click_that_fails(client, sites_url):
    """The browser reports the click of a ``type_element`` as failed (a stand-in answers for it): the
    text is not typed, the step carries the click's error and the page is read as after a no-op."""
    settings = EnvSettings(sites_url=sites_url, elements=True, horizons={"miniwob": 5})
    async with WebEnv(client, settings) as env:
        observation = await env.reset(miniwob("enter-text", 3))
        session, kinds = env.session, []
        act = session.act

        async def failing_click(action, **options):
            kinds.append(action.kind)
            if action.kind == "click":
                return ActResult(ok=False, error="the click did not land", url=observation.url,
                                 title=observation.title)
            return await act(action, **options)

        session.act = failing_click
        field = element_id(observation.elements, tag="input", text="")
        result = await env.step(reply(AgentAction("type_element", element=field, text="never typed")))
        assert kinds == ["click"]
        assert result.info["step"].action_error == "the click did not land" and not result.terminated
        assert result.info["step"].same_as_next  # nothing was typed
        after = result.observation.elements
        assert after[element_id(after, tag="input") - 1].text == ""


@pytest.mark.parametrize("modes", [("elements",), ("som",), ("som", "axtree"), ("screenshot", "elements")])
async def test_the_numbers_an_observation_mode_shows_drive_the_element_actions(client, sites_url, modes):
    assert element_actions_for(modes)
    settings = EnvSettings(sites_url=sites_url, horizons={"miniwob": 5},
                           observation=ObservationSettings(modes=modes))
    async with WebEnv(client, settings) as env:
        observation = await env.reset(miniwob("enter-text", 3))
        wanted = observation.instruction.split('"')[1]
        if observation.text:  # the ids as the text shows them
            field = int(re.search(r"\[(\d+)\] textbox", observation.text).group(1))
            submit = int(re.search(r'\[(\d+)\] button "Submit"', observation.text).group(1))
        else:  # som alone: the ids drawn on the image are the positions in the element list
            field = element_id(observation.elements, tag="input")
            submit = element_id(observation.elements, tag="button", text="Submit")
        typed = await env.step(reply(AgentAction("type_element", element=field, text=wanted)))
        assert typed.info["step"].action_error == ""
        won = await env.step(reply(AgentAction("click_element", element=submit)))
        assert won.terminated and won.reward == 1.0
