"""`SiteJudge` against the real shop's ground truth: every generated task, played as its params
say over HTTP, passes; an idle session and wrong answers fail; a truth read that fails is retried,
then raised as the judge's infrastructure failure."""

from __future__ import annotations

import dataclasses
import json
import threading
from urllib.parse import urlencode

import httpx
import pytest

from tests.support.episodes import played
from webgym_data.schema import Task
from webgym_rollout.errors import JudgeTimeout, JudgeUnavailable
from webgym_rollout.judge.site import SiteJudge, answer_holds, site_verdicts
from webgym_rollout.tasks.sites import SiteServer
from webgym_rollout.trajectory.contract import EpisodeStatus
from webgym_sites.facts import SessionFacts
from webgym_sites.shop_tasks import TEMPLATES, shop_tasks
from webgym_sites.shortcuts import SPRAY
from webgym_sites.state import new_session_id, session_in, with_session
from webgym_sites.truth import TruthClient, TruthServer


def _play(sites: SiteServer, task: Task) -> str:
    """Do `task` as its params say (a stand-in for the scripted expert); returns the session id."""
    params = task.source.metadata_dict()["params"]
    session = new_session_id()
    with httpx.Client(base_url=sites.base_url, trust_env=False, follow_redirects=True) as client:
        client.get(with_session("/shop/", session))
        if "account" in params:
            client.post("/shop/signin", data=params["account"])
        if "search" in params:
            client.get(f"/shop/search?{urlencode(params['search'])}")
        if "product_id" in params:
            client.get(f"/shop/product/{params['product_id']}")
        for line in params.get("lines", []):
            client.get(f"/shop/product/{line['product_id']}")
            client.post("/shop/cart/add", data={k: str(v) for k, v in line.items()})
        if "checkout" in params:
            client.post("/shop/checkout", data=params["checkout"])
            client.post("/shop/checkout/confirm")
    return session


async def test_every_template_played_right_passes_and_idle_fails():
    tasks = shop_tasks(2 * len(TEMPLATES))
    with SiteServer(shop_seed=0) as sites, TruthClient(sites.truth_url, sites.truth_token) as truth:
        judge = SiteJudge(truth.facts, tasks)
        idle = new_session_id()
        httpx.get(with_session(f"{sites.base_url}/shop/", idle), trust_env=False)
        for task in tasks:
            session = _play(sites, task)
            urls = ["about:blank", with_session(task.start_url, session)]
            done = await judge.score(played(task, urls=urls, answer=task.definite_answer))
            assert done.reward == 1.0, (task.task_name, [v for v in done.verdicts if not v.passed])
            assert len(done.verdicts) == task.num_facts + bool(task.definite_answer)
            idle_urls = [with_session(task.start_url, idle)]
            undone = await judge.score(played(task, urls=idle_urls))
            assert undone.reward == 0.0 and not any(v.passed for v in undone.verdicts), task.task_name


async def test_answers_and_missing_sessions():
    tasks = shop_tasks(1)  # the first template: a price question
    (task,) = tasks
    with SiteServer(shop_seed=0) as sites:
        judge = SiteJudge(sites.facts, tasks)
        session = _play(sites, task)
        urls = [with_session(task.start_url, session)]
        said = f"It costs {task.definite_answer}."
        right = await judge.score(played(task, urls=urls, answer=said))
        wrong = await judge.score(played(task, urls=urls, answer="It costs $1.00."))
        nobody = await judge.score(played(task, urls=[task.start_url], answer=said))
        other = await judge.score(played("something else", urls=urls))
    assert right.reward == 1.0 and wrong.reward == 0.0
    assert nobody.reward == 0.0 and nobody.verdicts[0].criterion == "session"
    assert other.reward == 0.0 and other.verdicts[0].criterion == "task"
    assert answer_holds("$12.95", "about $12.95.") and not answer_holds("$12.95", "$112.95")
    assert not answer_holds("$12.95", "$12.950") and not answer_holds("", "anything")
    assert session_in(["http://h/a", "http://h/b?x=1&session=abcdefgh"]) == "abcdefgh"


def _made_before(task: Task) -> Task:
    """`task` as rows generated before answer facts had kinds and candidates: ``answer`` texts and
    ``answer_number`` values (how those rows still sit in task sets)."""
    metadata = task.source.metadata_dict()
    old = []
    for check in metadata["checks"]:
        if check["type"] == "answer_value" and check["kind"] in ("name", "price"):
            check = {"type": "answer", "texts": [check["value"]]}
        elif check["type"] == "answer_value":
            check = {"type": "answer_number", "value": check["value"].split()[0]}
        old.append(check)
    source = dataclasses.replace(task.source, metadata=json.dumps(metadata | {"checks": old}))
    return dataclasses.replace(task, source=source)


def test_a_definite_answer_is_read_like_the_answer_facts_and_old_rows_still_load():
    task = next(t for t in shop_tasks(len(TEMPLATES)) if t.source.metadata_dict()["template"] == "best_rated")
    checks = task.source.metadata_dict()["checks"]
    name, rating, price = (c for c in checks if c["type"] == "answer_value")
    facts = SessionFacts(session_id="s" * 10, visited=("/shop/search?q=x",))
    stars, dollars = rating["value"].split()[0], price["value"].removeprefix("$")
    plain = f"The {name['value'].lower()} is rated {stars}/5 and costs {dollars}."
    listed = "; ".join([task.definite_answer, *name["candidates"]])
    spray = " ".join([SPRAY, stars, price["value"]])
    for row, lists in ((task, False), (_made_before(task), True)):
        def passed(answer: str) -> bool:
            return all(v.passed for v in site_verdicts(row, facts, answer))  # noqa: B023
        assert passed(task.definite_answer) and passed(plain)
        assert not passed(spray) and not passed(f"{plain} Or {price['candidates'][0]}.")
        # an old row has no candidates: a list of names beside the right answer still passes it
        assert passed(listed) == lists
    assert [c["type"] for c in _made_before(task).source.metadata_dict()["checks"]][-3:] == [
        "answer", "answer_number", "answer"]


async def test_a_truth_read_that_fails_is_retried_then_raised_as_the_judges_failure():
    """A truth read that times out is an infrastructure failure of the judge, tried again, then
    `JudgeTimeout` (the episode's ``error:judge_timeout``), never a bug (``error:internal``)."""
    (task,) = shop_tasks(1)
    with SiteServer(shop_seed=0) as sites:
        session = _play(sites, task)
        request = played(task, urls=[with_session(task.start_url, session)],
                                         answer=f"It costs {task.definite_answer}.")
        expected = await SiteJudge(sites.facts, [task]).score(request)
        release, stalls = threading.Event(), [2]

        def slow_facts(session_id: str) -> SessionFacts:
            if stalls[0] > 0:
                stalls[0] -= 1
                release.wait(timeout=60)
            return sites.facts(session_id)

        listener = TruthServer(slow_facts).start()
        try:
            with TruthClient(listener.url, listener.token, timeout_s=0.5) as client:
                judge = SiteJudge(client.facts, [task], truth_retries=2, backoff_s=0)
                judged = await judge.score(request)  # two reads time out, the third answers
                assert (judged.reward, judged.verdicts, stalls) == (expected.reward, expected.verdicts, [0])
                stalls[0] = 3
                with pytest.raises(JudgeTimeout, match=rf"truth of session {session} .*\(after 3 attempts\)"
                                                       r".*no answer within 0.5 s") as timed_out:
                    await judge.score(request)
        finally:
            release.set()
            listener.stop()
        gone = TruthClient(listener.url, listener.token)  # nobody listens there any more
        with gone, pytest.raises(JudgeUnavailable, match=listener.url) as unavailable:
            await SiteJudge(gone.facts, [task], truth_retries=1, backoff_s=0).score(request)
    assert EpisodeStatus.for_error(timed_out.value.kind) is EpisodeStatus.JUDGE_TIMEOUT
    assert EpisodeStatus.for_error(unavailable.value.kind) is EpisodeStatus.JUDGE_UNAVAILABLE
    with pytest.raises(ValueError, match="^truth_retries: "):
        SiteJudge(sites.facts, [task], truth_retries=-1)
