"""Scripted shortcuts earn nothing: each is played over the site server's HTTP routes on generated
tasks of the three sites (and the subtasks decomposition makes of them), and the site judge, reading
the session facts the server recorded, pays it 0 on every task where the honest expert earns 1."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest

from tests.support.plan_over_http import HttpPlayer
from webgym_data.decompose import decompose_task
from webgym_data.schema import Task
from webgym_rollout.judge.site import site_verdicts
from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.generate import expert_plan, site_tasks
from webgym_sites.goals import task_checks
from webgym_sites.plans import Answer, Move
from webgym_sites.reference_tasks import TEMPLATES as REFERENCE_TEMPLATES
from webgym_sites.shop_tasks import TEMPLATES as SHOP_TEMPLATES
from webgym_sites.shortcuts import SHORTCUTS, SPRAY, page_spray, tried
from webgym_sites.state import new_session_id, with_session
from webgym_sites.travel_tasks import TEMPLATES as TRAVEL_TEMPLATES

ANSWERED = {"price", "rating", "best_rated", "infobox", "infobox_pair", "birth_capital", "country_table",
            "founder", "compare_watch", "compare_edit", "capital_leader", "cheapest_direct", "hotel_stars",
            "earliest"}
"""The templates whose tasks ask for an answer."""


@pytest.fixture(scope="module")
def server():
    with SiteServer() as sites:
        yield sites


def _template(task: Task) -> str:
    return json.loads(task.source.metadata)["template"]


class _Judged:
    """Plays plans in fresh sessions and judges them by the server's truth."""

    def __init__(self, server: SiteServer, client: httpx.Client):
        self.server, self.client = server, client

    def reward(self, task: Task, plan: list[Move], parent: Task | None = None, *,
               pages: bool = False) -> float:
        """The site judge's reward of `plan` played on `task` (`pages`: answered with every number of
        the pages it loaded)."""
        session = new_session_id()
        self.client.cookies.clear()
        player = HttpPlayer(self.client, with_session(task.start_url, session))
        answer = player.play(plan)
        if pages:
            answer = page_spray(player.pages)
        verdicts = site_verdicts(task, self.server.facts(session), answer, parent)
        return float(bool(verdicts) and all(v.passed for v in verdicts))


def test_every_shortcut_earns_nothing_where_the_expert_earns_everything(server):
    parents = site_tasks(18, seed=5, base_url=server.base_url)  # two tasks of each of the 27 templates
    tried_on: dict[str, Counter] = {name: Counter() for name in (*SHORTCUTS, "spray_pages")}
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=60) as client:
        judged = _Judged(server, client)
        for parent in parents:
            for task in (parent, *decompose_task(parent)):
                above = parent if task is not parent else None
                checks = task_checks(task, above)
                assert judged.reward(task, expert_plan(task), above) == 1.0, task.task_name
                for name, planner in SHORTCUTS.items():
                    plan = planner(task)
                    if plan is not None and tried(name, checks):
                        assert judged.reward(task, plan, above) == 0.0, (name, task.task_name)
                        tried_on[name][_template(task)] += 1
                if tried("spray_pages", checks):
                    assert judged.reward(task, expert_plan(task), above, pages=True) == 0.0, task.task_name
                    tried_on["spray_pages"][_template(task)] += 1
    # Every shortcut was tried where it applies: on each site, on every template it has a way into.
    assert set(tried_on["list_everything"]) == ANSWERED
    numbers = {"price", "rating", "best_rated", "infobox_pair", "birth_capital", "country_table", "founder",
               "compare_watch", "cheapest_direct", "hotel_stars", "earliest"}
    assert numbers <= set(tried_on["spray_numbers"]) == set(tried_on["spray_pages"])
    done = {"add_quantity", "cheapest", "checkout", "account", "two_items", "compare_watch", "compare_edit",
            "capital_leader", "book_cheapest", "book_hotel", "trip", "group", "fastest"}
    assert done <= set(tried_on["do_everything"])
    assert set(SHOP_TEMPLATES) | set(REFERENCE_TEMPLATES) | set(TRAVEL_TEMPLATES) == {
        _template(t) for t in parents}


def test_the_shortcuts_plans_do_what_they_say():
    tasks = {_template(t): t for t in site_tasks(9, seed=5)}
    listed = SHORTCUTS["list_everything"](tasks["best_rated"])
    assert isinstance(listed[-1], Answer) and listed[:-1] == expert_plan(tasks["best_rated"])[:-1]
    for check in task_checks(tasks["best_rated"]):  # the expert's answer, then every candidate
        if check["type"] == "answer_value":
            assert all(text in listed[-1].text for text in (check["value"], *check["candidates"]))
    spray = SHORTCUTS["spray_numbers"](tasks["earliest"])[-1].text
    times = next(c for c in task_checks(tasks["earliest"]) if c.get("kind") == "time")
    assert spray.startswith(SPRAY + " ") and all(t in spray for t in (times["value"], *times["candidates"]))
    assert SHORTCUTS["spray_numbers"](tasks["compare_edit"]) is None  # a name only: no number to spray
    assert SHORTCUTS["do_everything"](tasks["price"]) is None  # nothing to do at all
    edit = SHORTCUTS["do_everything"](tasks["compare_edit"])
    params = json.loads(tasks["compare_edit"].source.metadata)["params"]
    edited = [move.path for move in edit if getattr(move, "path", "").startswith("/reference/edit/")]
    assert edited == [f"/reference/edit/{a}" for a in params["read"] if a != params["article_id"]] + [
        f"/reference/edit/{params['article_id']}"]  # every article compared, the right one last
    assert all(a.replace("_", " ") in edit[-1].text for a in params["read"])  # and all of them named
    booked = SHORTCUTS["do_everything"](tasks["book_cheapest"])
    right = expert_plan(tasks["book_cheapest"])
    assert sum(getattr(move, "target", "") == "confirm-booking" for move in booked) > 1
    assert booked[-len(right):] == right  # the right flight booked last
