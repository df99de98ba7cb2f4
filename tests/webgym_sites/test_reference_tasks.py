"""Generated reference tasks: schema rows, deterministic, about real articles, and met by a session
that plays the scripted expert's moves over the site's HTTP routes (forms parsed from the pages)."""

from __future__ import annotations

import asyncio
import html
import json
from collections import Counter
from html.parser import HTMLParser
from urllib.parse import urljoin

import httpx
import pytest

from tests.support.episodes import played
from webgym_data.schema import Task
from webgym_rollout.judge.site import SiteJudge
from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.encyclopedia import encyclopedia
from webgym_sites.generate import expert_plan, site_tasks
from webgym_sites.goals import ANSWER_TYPES, check_task, task_checks
from webgym_sites.plans import Answer, Choose, Fill, Goto, Move, Press
from webgym_sites.reference_tasks import TEMPLATES, reference_tasks
from webgym_sites.state import new_session_id, with_session

REFERENCE_SEED = 1


def _meta(task: Task) -> dict:
    return json.loads(task.source.metadata)


def test_rows_are_deterministic_distinct_schema_rows_across_the_levels():
    tasks = reference_tasks(270, seed=5, reference_seed=REFERENCE_SEED)
    again = reference_tasks(270, seed=5, reference_seed=REFERENCE_SEED)
    assert [t.to_row() for t in tasks] == [t.to_row() for t in again]
    assert [t.task_id for t in reference_tasks(30, seed=6, reference_seed=REFERENCE_SEED)] != [
        t.task_id for t in tasks[:30]]
    assert len({t.task_id for t in tasks}) == 270
    levels = Counter(t.difficulty_level for t in tasks)
    assert set(levels) == {"easy", "medium", "hard"} and min(levels.values()) == 90, levels
    assert {_meta(t)["template"] for t in tasks} == set(TEMPLATES)
    drawn = site_tasks(9, sites=("reference",))  # the sites' generator draws them for the default seed
    assert [t.task_id for t in drawn] == [t.task_id for t in reference_tasks(9)]
    book = encyclopedia(REFERENCE_SEED)
    for task in tasks:
        assert Task.from_row(task.to_row()) == task  # a valid row of the published schema
        assert task.difficulty == task.num_facts == len(task_checks(task))
        assert task.start_url == "http://127.0.0.1:8400/reference/"
        assert task.benchmark_name == "webgym-reference" and task.domain == "reference"
        assert task.environment == "site:reference"
        meta = _meta(task)
        assert meta["site"] == "reference" and meta["reference_seed"] == REFERENCE_SEED
        assert task.subdomain == book.by_id[meta["params"]["article_id"]].kind
        answers = [c for c in task_checks(task) if c["type"] in ANSWER_TYPES]
        assert bool(task.definite_answer) == bool(answers)
        for check in task_checks(task):
            for article_id in [check.get("article_id", "Tamzelmark"), *check.get("article_ids", [])]:
                assert article_id in book.by_id or article_id == "Tamzelmark"
        for check in answers:  # one value, a number or a name, with the wrong answers a grader knows
            assert check["type"] == "answer_value" and check["kind"] in ("number", "name")
            assert check["candidates"]
            assert check["value"] not in check["candidates"]
        if meta["template"] in ("compare_edit", "compare_watch", "capital_leader"):
            named = next(c for c in answers if c["kind"] == "name")  # the others compared
            assert len(named["candidates"]) == len(meta["params"]["read"]) - 1
        if meta["template"] == "compare_edit":
            assert {"type": "one_edit", "article_id": meta["params"]["article_id"]} in task_checks(task)


class _Page(HTMLParser):
    """The forms, their controls and the links with an id of one page, as a browser would see them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.forms: list[dict] = []
        self.controls: list[dict] = []  # name, id, value, form (index), tag, options
        self.links: dict[str, str] = {}
        self._form: int | None = None
        self._open: dict | None = None  # the <select>, <option> or <textarea> being read
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": a.get("action", ""), "method": a.get("method", "get").lower()})
            self._form = len(self.forms) - 1
        elif tag == "a" and "id" in a:
            self.links[a["id"]] = a.get("href", "")
        elif tag in ("input", "select", "textarea", "button"):
            kind = a.get("type", "submit" if tag == "button" else "text")
            control = {"tag": tag, "type": kind, "name": a.get("name", ""), "id": a.get("id", ""),
                       "value": a.get("value", ""), "form": self._form, "options": []}
            self.controls.append(control)
            if tag in ("select", "textarea"):
                self._open = control
        elif tag == "option" and self._open is not None:
            self._open["options"].append(a.get("value", ""))
            if "selected" in a or len(self._open["options"]) == 1:
                self._open["value"] = a.get("value", "")

    def handle_data(self, data: str) -> None:
        if self._open is not None and self._open["tag"] == "textarea":
            self._open["value"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag in ("select", "textarea"):
            self._open = None

    def control(self, target: str) -> dict:
        found = [c for c in self.controls if target in (c["id"], c["name"])]
        assert found, f"no control {target!r} on the page"
        return found[0]


class _Player:
    """Plays expert moves over HTTP: a GET per `Goto`, form fields kept until a button submits them."""

    def __init__(self, client: httpx.Client):
        self.client, self.page, self.url, self.seen = client, _Page(""), "", []

    def _load(self, response: httpx.Response) -> None:
        assert response.status_code == 200, (response.url, response.status_code)
        self.url, self.page = str(response.url), _Page(response.text)
        self.seen.append(html.unescape(response.text))

    def _submit(self, form_index: int, button: dict | None = None) -> None:
        form = self.page.forms[form_index]
        data = {c["name"]: c["value"] for c in self.page.controls
                if c["form"] == form_index and c["name"] and c["type"] not in ("submit", "button")}
        if button is not None and button["name"]:
            data[button["name"]] = button["value"]
        action = urljoin(self.url, form["action"])
        if form["method"] == "post":
            self._load(self.client.post(action, data=data))
        else:
            self._load(self.client.get(action, params=data))

    def play(self, moves: list[Move]) -> str:
        for move in moves:
            if isinstance(move, Goto):
                self._load(self.client.get(move.path))
            elif isinstance(move, Fill):
                control = self.page.control(move.field)
                control["value"] = move.text
                if move.submit:
                    self._submit(control["form"])
            elif isinstance(move, Choose):
                control = self.page.control(move.field)
                assert move.option in control["options"], (move, control["options"])
                control["value"] = move.option
            elif isinstance(move, Press):
                if move.target in self.page.links:
                    self._load(self.client.get(urljoin(self.url, self.page.links[move.target])))
                else:
                    button = self.page.control(move.target)
                    assert button["type"] == "submit" and button["form"] is not None, button
                    self._submit(button["form"], button)
            elif isinstance(move, Answer):
                return move.text
        raise AssertionError("the plan ends without an answer")


@pytest.fixture(scope="module")
def server():
    with SiteServer(reference_seed=REFERENCE_SEED) as sites:
        yield sites


def test_the_experts_moves_over_http_meet_every_fact_and_an_idle_session_does_not(server):
    tasks = reference_tasks(63, seed=5, reference_seed=REFERENCE_SEED, base_url=server.base_url)  # 7 each
    judge = SiteJudge(server.facts, tasks)
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=30) as client:
        for task in tasks:
            client.cookies.clear()
            session = new_session_id()
            player = _Player(client)
            player._load(client.get(with_session(task.start_url, session)))
            answer = player.play(expert_plan(task))
            facts = server.facts(session)
            assert check_task(task, facts, answer) == [True] * task.num_facts, task.task_name
            for check in task_checks(task):  # the answer is what the site's pages show
                if check["type"] == "answer_value":
                    assert any(check["value"] in page for page in player.seen), task.task_name
            urls = (with_session(task.start_url, session),)
            request = played(task, answer=answer, urls=urls)
            result = asyncio.run(judge.score(request))
            assert result.reward == 1.0, (task.task_name, result.verdicts)
            idle = new_session_id()
            client.cookies.clear()
            client.get(with_session(task.start_url, idle))
            assert not any(check_task(task, server.facts(idle), "")), task.task_name


def test_a_wrong_watchlist_or_edit_fails_its_checks(server):
    tasks = reference_tasks(27, seed=5, reference_seed=REFERENCE_SEED, base_url=server.base_url)
    watch = next(t for t in tasks if _meta(t)["template"] == "compare_watch")
    edit = next(t for t in tasks if _meta(t)["template"] == "compare_edit")
    book = encyclopedia(REFERENCE_SEED)
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=30) as client:
        session = new_session_id()
        client.get(with_session(watch.start_url, session))
        params = _meta(watch)["params"]
        for article_id in params["read"]:  # every article watched: the right one, and others
            client.get(f"/reference/wiki/{article_id}")
            client.post("/reference/watchlist/add", data={"id": article_id})
        verdicts = dict(zip([c["type"] for c in task_checks(watch)], check_task(watch, server.facts(session)),
                            strict=False))
        assert verdicts["read_article"] and verdicts["watchlist_has"] and not verdicts["watchlist_only"]
        client.cookies.clear()
        session = new_session_id()
        client.get(with_session(edit.start_url, session))
        wanted = _meta(edit)["params"]["edit"]
        other = book.by_id[wanted["article_id"]].values[wanted["field"]] + 1
        client.post(f"/reference/edit/{wanted['article_id']}",
                    data={"field": wanted["field"], "value": str(other), "summary": wanted["summary"]})
        types = [c["type"] for c in task_checks(edit)]
        verdicts = dict(zip(types, check_task(edit, server.facts(session)), strict=True))
        assert verdicts["edit_summary"] and not verdicts["edit_field"] and verdicts["one_edit"]
        # the right edit too, and one of another article compared: each edit holds, but not "one edit"
        elsewhere = next(a for a in _meta(edit)["params"]["read"] if a != wanted["article_id"])
        form = {key: wanted[key] for key in ("field", "value", "summary")}
        for article_id in (wanted["article_id"], elsewhere):
            client.post(f"/reference/edit/{article_id}", data=form)
        verdicts = dict(zip(types, check_task(edit, server.facts(session)), strict=True))
        assert verdicts["edit_field"] and verdicts["edit_summary"] and not verdicts["one_edit"]
