"""The echo-instruction adversary on the local sites' decomposed subtasks, judged by `SiteJudge`
against the sites' truth: a policy that answers with its subtask's instruction earns nothing, with
no browsing or after opening every page the instruction names, beyond what its parent's own
instruction gives every agent.

Issue 37: subtask instructions listed their facts ("... Answer (The answer names Ostsolford; The
answer gives the founding year 1032)"); this policy earned 1 on 22 of 318 subtasks without browsing
and on 77 more by opening the pages they named. The control below plays that kind of instruction.
"""

from __future__ import annotations

import re
from dataclasses import replace

import httpx
import pytest

from tests.support.episodes import played
from webgym_data.decompose import decompose_tasks
from webgym_data.schema import Task
from webgym_rollout.judge.site import SiteJudge
from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.catalogue import catalogue
from webgym_sites.encyclopedia import encyclopedia
from webgym_sites.generate import site_tasks
from webgym_sites.goals import task_checks
from webgym_sites.state import new_session_id, with_session
from webgym_sites.travel_catalogue import travel_world

PER_SITE = 36
"""Four tasks of each template."""


def words(text: str) -> str:
    return " " + " ".join(re.findall(r"[^\W_]+", text.casefold())) + " "


# Every page of the sites that a name leads to (articles, products, hotels), by the name's words.
PAGES = [*((words(a.title), f"/reference/wiki/{a.id}") for a in encyclopedia(0).articles),
         *((words(p.name), f"/shop/product/{p.id}") for p in catalogue(0).products),
         *((words(h.name), f"/travel/hotel/{h.id}") for h in travel_world(0).hotels)]


def named_pages(text: str) -> list[str]:
    """The pages of every article, product and hotel that `text` names."""
    said = words(text)
    return [path for name, path in PAGES if name in said]


class Echo:
    """Answers with the task's instruction; with `browse`, first opens the pages it names."""

    def __init__(self, client: httpx.Client, judge: SiteJudge, *, browse: bool):
        self.client, self.judge, self.browse = client, judge, browse

    async def reward(self, task: Task) -> float:
        start = with_session(task.start_url, new_session_id())
        self.client.cookies.clear()  # a new episode: only its start URL's session
        self.client.get(start)       # the episode's start page, as every episode opens it
        for path in named_pages(task.task_name) if self.browse else ():
            assert self.client.get(path).status_code == 200
        request = played(task, urls=[start], answer=task.task_name)
        return (await self.judge.score(request)).reward


@pytest.fixture(scope="module")
def sites():
    with SiteServer() as server:
        yield server


@pytest.fixture
def client(sites):
    with httpx.Client(base_url=sites.base_url, trust_env=False, follow_redirects=True) as client:
        yield client


@pytest.fixture(scope="module")
def decomposed(sites) -> tuple[dict[str, Task], list[Task]]:
    """The generated tasks of every site (the sites' default seeds) and their subtasks."""
    tasks = site_tasks(PER_SITE, base_url=sites.base_url)
    return {t.task_id: t for t in tasks}, decompose_tasks(tasks).subtasks


def given_by_the_parent(subtask: Task, parent: Task) -> bool:
    """Every fact of `subtask` is one that an agent echoing its *parent's* instruction meets after
    opening the pages that instruction names: a visit to one of those pages (a subtask that is
    only "open the article of each city compared" is done by doing that), or an answer text the
    parent's question states among its candidates (the list-everything shortcut of the answer
    check, not a leak of the subtask's instruction)."""
    opened, said = set(named_pages(parent.task_name)), words(parent.task_name)
    for check in task_checks(subtask, parent):
        if check["type"] == "read_article":
            if f"/reference/wiki/{check['article_id']}" not in opened:
                return False
        elif check["type"] == "visited":
            if check["path"] not in opened:
                return False
        elif check["type"] != "answer" or not all(words(t) in said for t in check["texts"]):
            return False
    return True


async def test_echoing_a_subtask_instruction_earns_nothing_it_does_not_give_every_agent(sites, client,
                                                                                          decomposed):
    parents, subtasks = decomposed
    assert {s.benchmark_name for s in subtasks} == {"webgym-shop", "webgym-travel", "webgym-reference"}
    judge = SiteJudge(sites.facts, [*parents.values(), *subtasks])
    idle, browsing = Echo(client, judge, browse=False), Echo(client, judge, browse=True)
    paid = []
    for sub in subtasks:
        parent = parents[sub.parent_task_id]
        assert await idle.reward(sub) == 0.0, sub.task_name
        # The subtask's instruction names no page that its parent's does not.
        assert named_pages(sub.task_name) == named_pages(parent.task_name), sub.task_name
        if await browsing.reward(sub) == 1.0:
            assert given_by_the_parent(sub, parent), sub.task_name
            paid.append(sub)
    # The browsing policy does open pages: it completes the subtasks that only ask to open the
    # articles the parent's question names.
    assert paid and len(paid) < len(subtasks) // 3


async def test_control_instructions_that_list_their_facts_pay_the_echo(sites, client, decomposed):
    # The adversary is real: given the instructions of the issue, which listed each group's facts,
    # it earns 1 without browsing on the subtasks that only ask for an answer.
    parents, subtasks = decomposed
    listed = [replace(s, task_name=s.task_name + " " + "; ".join(f for g in s.evaluator_reference
                                                                 for f in g.facts)) for s in subtasks]
    judge = SiteJudge(sites.facts, [*parents.values(), *listed])
    idle = Echo(client, judge, browse=False)
    paid = [s for s in listed if await idle.reward(s) == 1.0]
    assert paid and {s.evaluator_reference[-1].description for s in paid} == {"Answer"}
