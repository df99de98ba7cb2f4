"""The scripted expert: each move of a site task's plan becomes one ordinary action, found by id."""

from __future__ import annotations

import asyncio
import json

from webgym_rollout.actions import AgentAction
from webgym_rollout.agent.expert import EXPERT_MODEL_ID, ExpertPolicy
from webgym_rollout.agent.protocol import Observation
from webgym_rollout.browser.protocol import Element
from webgym_sites.generate import expert_plan, site_tasks
from webgym_sites.plans import Answer, Choose, Fill, Goto, Press

_PNG = b"\x89PNG\r\n\x1a\n"
_START = "http://127.0.0.1:8400/shop/?session=abcdefgh1"


def _observation(task, step: int, elements=(), url=_START) -> Observation:
    return Observation(instruction=task.task_name, screenshot=_PNG, viewport=(1000, 1000), step=step,
                       url=url, title="", history=(), elements=tuple(elements), last_action_error="",
                       episode_id="ep-1")


def _element(name: str, x: float, y: float, text: str = "", tag: str = "input") -> Element:
    return Element(x=x, y=y, width=20, height=10, tag=tag, role="", text=text, name=name)


def _act(policy: ExpertPolicy, observation: Observation) -> AgentAction:
    output = asyncio.run(policy.act(observation))
    assert output.model == EXPERT_MODEL_ID and output.parsed.action is not None, output.response
    return output.parsed.action


def test_each_move_becomes_an_action_of_the_action_space():
    tasks = site_tasks(9, sites=("shop",))
    task = next(t for t in tasks if "checkout" in json.loads(t.source.metadata)["params"])
    plan = expert_plan(task)
    assert isinstance(plan[0], Goto) and isinstance(plan[-1], Answer)
    policy = ExpertPolicy([task])
    page = [_element("option-colour", 100, 200, tag="select"),
            _element("option-size", 100, 300, tag="select"), _element("quantity", 100, 400, text="1"),
            _element("add-button", 100, 500, "Add to cart", "button")]
    step, actions = 0, []
    for move in plan[:6]:
        parts = 3 if isinstance(move, Fill) else 1  # click, select what it shows, type
        for _ in range(parts):
            actions.append(_act(policy, _observation(task, step, page)))
            step += 1
        if isinstance(move, Press):
            break
    assert actions[0].name == "navigate" and actions[0].url.startswith("http://127.0.0.1:8400/shop/product/")
    assert "session" not in actions[0].url  # the cookie carries the session after the start page
    chosen = [a for a in actions if a.name == "select"]
    assert chosen[0].option == plan[1].option and chosen[0].coordinate == (110, 205)  # the element's centre
    if any(isinstance(m, Fill) for m in plan[:5]):  # a quantity above 1: click, Control+a, type
        i = next(i for i, a in enumerate(actions) if a.name == "key")
        assert actions[i - 1].coordinate == (110, 405) and actions[i].keys == "Control+a"
        assert actions[i + 1].name == "type" and actions[i + 1].text.isdigit()
    assert actions[-1].name == "left_click" and actions[-1].coordinate == (110, 505)


def test_a_target_out_of_view_is_scrolled_to_and_a_missing_one_ends_the_episode_as_a_failure():
    task = next(t for t in site_tasks(9, sites=("shop",)) if isinstance(expert_plan(t)[1], Choose))
    policy = ExpertPolicy([task], max_scrolls=2)
    assert _act(policy, _observation(task, 0)).name == "navigate"
    actions = [_act(policy, _observation(task, step)) for step in range(1, 8)]
    assert [a.direction for a in actions[:6]] == ["down"] * 2 + ["up"] * 4  # down, then back up and beyond
    assert actions[6].name == "answer" and actions[6].text.startswith("Stuck: option-colour")
    # a restart (step 0) starts the plan over
    assert _act(policy, _observation(task, 0)).name == "navigate"
    # found after a scroll: the plan goes on with the select
    assert _act(policy, _observation(task, 1)).name == "scroll"
    found = _act(policy, _observation(task, 2, [_element("option-colour", 10, 10, tag="select")]))
    assert found.name == "select"


def test_a_task_it_does_not_know_is_answered_at_once():
    task = site_tasks(1, sites=("shop",))[0]
    action = _act(ExpertPolicy([]), _observation(task, 0))
    assert action.name == "answer" and "no plan" in action.text


def test_another_planner_is_played_under_its_own_model_id():
    task = site_tasks(1, sites=("shop",))[0]
    policy = ExpertPolicy([task], plan=lambda t: [Answer(f"every price of {t.task_id}")],
                          model_id="shortcut:x")
    output = asyncio.run(policy.act(_observation(task, 0)))
    assert output.model == "shortcut:x" and output.parsed.action.text == f"every price of {task.task_id}"
    nothing = ExpertPolicy([task], plan=lambda t: None)  # a planner with nothing to try answers at once
    assert "no plan" in _act(nothing, _observation(task, 0)).text
