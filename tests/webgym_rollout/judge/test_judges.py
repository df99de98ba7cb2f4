"""Judges: the rubric judge against a real OpenAI-protocol server with scripted replies, and the
programmatic judge. Only a reply that ends with an explicit pass verdict can ever give reward 1."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.episodes import played
from tests.support.untrusted_input import JSON_VALUES, ODD_TEXT
from tests.webgym_rollout.agent.test_protocol import png
from webgym_core.endpoint import Endpoint
from webgym_data.schema import FactGroup, Task
from webgym_rollout.judge.judges import (
    SYSTEM_PROMPT,
    JudgeReplyInvalid,
    JudgeResult,
    JudgeSettings,
    JudgeUnavailable,
    ProgrammaticJudge,
    RubricJudge,
    cited_steps,
    fact_question,
    make_judge,
    parse_verdict,
    record_failure,
    record_result,
    select_key_screenshots,
)
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step, TaskOutcome, Verdict

TASK = Task.from_row({
    "task_name": "Find the cheapest Boston to Denver flight on May 3 and its airline.",
    "website": "https://flights.example/",
    "evaluator_reference": [
        {"id": "g1", "description": "the flight search", "facts": ["Searched flights from Boston to Denver",
                                                                  "Departure date May 3"]},
        {"id": "g2", "description": "the answer", "facts": ["Cheapest price is $120 or $119 with a coupon",
                                                           "Airline is United"]},
    ],
    "definite_answer": "$120, United",
})
ANSWER = "The cheapest flight costs $120 with United."
SHOTS = [png("white"), png("white"), png("red"), png("green"), png("green"), png("blue")]


def user_text(body: dict) -> str:
    return next(part["text"] for part in body["messages"][-1]["content"] if part["type"] == "text")


def n_images(body: dict) -> int:
    return sum(part["type"] == "image_url" for part in body["messages"][-1]["content"])


def scripted_judge(*, fail_fact: str | None = None, grounding: str = "PASS", fact_reply: str | None = None):
    """A judge model: PASS everything, except where told otherwise."""

    def reply(body: dict):
        text = user_text(body)
        if "is every claim in the final answer visible" in text:
            return f"All claims checked.\nVERDICT: {grounding}"
        if "does the episode establish fact" in text:
            if fact_reply is not None:
                return fact_reply
            fact = text.split("does the episode establish fact ", 1)[1].split(")", 1)[0]
            failed = fail_fact is not None and fail_fact in fact
            return "The screenshots show it." + ("\nVERDICT: FAIL" if failed else "\nVERDICT: PASS")
        if "Reference answer" in text:
            return "Same price and airline.\nVERDICT: PASS"
        return "unexpected question"

    return reply


_ENDPOINT_FIELDS = {"max_retries", "timeout_s", "backoff_s", "max_concurrency"}


def judge_for(server, **kwargs) -> RubricJudge:
    kwargs.setdefault("backoff_s", 0.01)
    endpoint = Endpoint(base_url=server.base_url, model="judge-model", api_key="t",
                        **{k: v for k, v in kwargs.items() if k in _ENDPOINT_FIELDS})
    settings = JudgeSettings(kind="rubric", endpoint=endpoint,
                             **{k: v for k, v in kwargs.items() if k not in _ENDPOINT_FIELDS})
    judge = make_judge(settings)
    assert isinstance(judge, RubricJudge)
    return judge


def request(answer: str = ANSWER) -> Episode:
    """The flight episode, ended with `answer`: what a judge scores."""
    return played(TASK, answer=answer, screenshots=SHOTS)


async def test_all_criteria_pass_gives_reward_one(scripted_openai):
    server = scripted_openai(scripted_judge())
    async with judge_for(server, max_screenshots=3) as judge:
        result = await judge.score(request())
    assert result.reward == 1.0 and result.error == ""
    assert [v.criterion for v in result.verdicts] == [
        "answer_grounded", "fact:g1:0", "fact:g1:1", "fact:g2:0", "fact:g2:1", "definite_answer"]
    assert all(v.passed for v in result.verdicts)
    assert result.judge_model == "judge-model" and result.prompt_tokens > 0
    assert len(server.requests) == 6
    # Each fact is asked with its whole group as context, and the "A or B" rule is stated.
    fact_texts = [user_text(b) for b in server.requests if "establish fact" in user_text(b)]
    g2 = [t for t in fact_texts if "Airline is United" in t and "$119 with a coupon" in t]
    assert len(g2) == 2 and all("'A or B'" in t for t in fact_texts)
    # Screenshots: at most max_screenshots, sent inline, with the grounding and fact questions only.
    for body in server.requests:
        expected = 0 if "Reference answer" in user_text(body) else 3
        assert n_images(body) == expected


async def test_one_failed_fact_fails_the_episode(scripted_openai):
    server = scripted_openai(scripted_judge(fail_fact="Airline is United"))
    async with judge_for(server) as judge:
        result = await judge.score(request())
    assert result.reward == 0.0 and result.error == ""
    failed = [v.criterion for v in result.verdicts if not v.passed]
    assert failed == ["fact:g2:1"]


async def test_a_hallucinated_answer_fails_on_grounding(scripted_openai):
    server = scripted_openai(scripted_judge(grounding="FAIL"))
    async with judge_for(server) as judge:
        result = await judge.score(request("The cheapest flight costs $80 with Delta."))
    assert result.reward == 0.0
    assert result.verdicts[0].criterion == "answer_grounded" and not result.verdicts[0].passed
    # With short-circuiting, the facts are not asked once the answer is known to be ungrounded.
    assert len(server.requests) == 1


async def test_a_truncated_reply_is_a_judge_error_even_if_it_says_pass(scripted_openai):
    truncated = {"content": "Checking the claims one by one... VERDICT: PASS", "finish_reason": "length"}
    server = scripted_openai([truncated])
    async with judge_for(server, reply_retries=1) as judge:
        result = await judge.score(request())
    assert result.reward == 0.0
    assert result.error_kind == "judge_reply_invalid"
    assert "cut off" in result.verdicts[0].reason
    assert len(server.requests) == 2  # asked again once, still cut off


async def test_a_reply_without_the_verdict_line_is_a_judge_error(scripted_openai):
    # The published parser counted any reply without "NOT SUCCESS" as a pass; this one must not.
    server = scripted_openai(scripted_judge(fact_reply="Everything looks correct, SUCCESS."))
    async with judge_for(server) as judge:
        result = await judge.score(request())
    assert result.reward == 0.0
    assert result.error_kind == "judge_reply_invalid"
    assert {v.criterion for v in result.verdicts if not v.passed} == {
        "fact:g1:0", "fact:g1:1", "fact:g2:0", "fact:g2:1"}


async def test_an_invalid_reply_is_asked_again(scripted_openai):
    server = scripted_openai(["no verdict here", "VERDICT: PASS"])
    async with judge_for(server, reply_retries=1) as judge:
        result = await judge.score(played("t", answer="a", screenshots=[png("red")]))
    # grounding asked twice (the first reply had no verdict), then the task itself once
    assert result.reward == 1.0 and len(server.requests) == 3
    assert [v.criterion for v in result.verdicts] == ["answer_grounded", "task"]


async def test_no_final_answer_fails_without_asking(scripted_openai):
    server = scripted_openai(scripted_judge())
    async with judge_for(server) as judge:
        result = await judge.score(request(answer=""))
    assert result.reward == 0.0 and server.requests == []
    assert "without a final answer" in result.verdicts[0].reason


async def test_an_unreachable_judge_raises(scripted_openai):
    server = scripted_openai([{"status": 502}])
    async with judge_for(server, max_retries=1) as judge:
        with pytest.raises(JudgeUnavailable):
            await judge.score(request())
    assert len(server.requests) == 2


@pytest.mark.parametrize(("reply", "expected"), [
    ("fine\nVERDICT: PASS", True),
    ("missing fact\nVERDICT: FAIL", False),
    ("ok\n**VERDICT: PASS**\n", True),
    ("<think>VERDICT: FAIL</think>all good\nverdict: pass", True),
])
def test_verdict_lines_that_parse(reply, expected):
    assert parse_verdict(reply)[0] is expected


@pytest.mark.parametrize("reply", [
    "", "SUCCESS", "The answer is correct.", "VERDICT: PASS\nbut on reflection maybe not",
    "VERDICT: PASS or FAIL", "VERDICT: PASS\nVERDICT: FAIL", "VERDICT: FAIL\nVERDICT: PASS",
    "VERDICT: NOT SUCCESS", "VERDICT: PASSED",
])
def test_ambiguous_or_missing_verdicts_are_refused(reply):
    with pytest.raises(JudgeReplyInvalid):
        parse_verdict(reply)
    with pytest.raises(JudgeReplyInvalid, match="cut off"):
        parse_verdict("reason\nVERDICT: PASS", finish_reason="length")


def test_key_screenshots_without_urls_follow_screen_changes():
    # white white red green green blue: the first, the last, and each new screen; never a repeat.
    assert select_key_screenshots(SHOTS, 10) == [0, 2, 3, 5]
    assert select_key_screenshots(SHOTS, 2) == [0, 5]
    assert select_key_screenshots(SHOTS, 1) == [5]
    assert select_key_screenshots(SHOTS, 0) == [] and select_key_screenshots([], 3) == []


async def test_programmatic_judge_uses_the_environment_reward():
    judge = ProgrammaticJudge()
    cases = [(True, 1.0, 1.0), (True, -1.0, 0.0), (False, 1.0, 0.0), (True, None, 0.0), (False, None, 0.0)]
    for done, raw, reward in cases:
        result = await judge.score(played("click", outcome=TaskOutcome(done=done, raw_reward=raw,
                                                                       reason="clicked")))
        assert result.reward == reward, (done, raw)
        assert result.verdicts[0].criterion == "environment"
        assert result.verdicts[0].passed is (reward == 1.0)
    assert result.judge_model == "programmatic"
    assert (await judge.score(played("web task"))).reward == 0.0  # no outcome at all
    with pytest.raises(ValueError, match="base_url: the rubric judge needs"):
        JudgeSettings(kind="rubric")


# ------------------------------------------------------------------ task-only judging, URLs, key screenshots

SHOP_TASK = {"task_name": "Find the cheapest 'WANDA' dress in size M at store 2630 on shop.example and give "
                          "its price.", "website": "https://shop.example/"}
SHOP_ANSWER = "The cheapest WANDA dress at store 2630 costs $39.90 (WANDA dress results at store 2630)."
SHOP_STEPS = [  # (url, title, screen): the agent searches, picks the store, opens the dress
    ("https://shop.example/", "Shop Example - Home", "white"),
    ("https://shop.example/search?q=wanda+dress", "Search: wanda dress", "red"),
    ("https://shop.example/search?q=wanda+dress", "Search: wanda dress", "orange"),  # scrolled
    ("https://shop.example/search?q=wanda+dress&store=2630", "WANDA dress results at store 2630", "green"),
    ("https://shop.example/search?q=wanda+dress&store=2630", "WANDA dress results at store 2630", "blue"),
    ("https://shop.example/p/wanda-dress-m", "WANDA Dress, size M", "yellow"),
    ("https://shop.example/p/wanda-dress-m", "WANDA Dress, size M", "purple"),
]


def shop_episode(steps=SHOP_STEPS, task=SHOP_TASK, answer=SHOP_ANSWER) -> Episode:
    return Episode(task=Task.from_row(task), episode_id="ep-shop", answer=answer,
                   steps=[Step(index=i, screenshot=png(screen), url=url, title=title)
                          for i, (url, title, screen) in enumerate(steps)])


def task_only_judge(body: dict) -> str:
    """Grounding passes; the task passes only if the prompt shows the store was chosen (a URL fact)."""
    text = user_text(body)
    if "is every claim in the final answer visible" in text:
        return "The price is on screen.\nVERDICT: PASS"
    if "does the episode accomplish the task as stated" in text:
        return ("A visited URL has store=2630.\nVERDICT: PASS" if "store=2630" in text
                else "No page shows store 2630 being chosen.\nVERDICT: FAIL")
    if "does the episode establish fact" in text:
        return "Shown.\nVERDICT: PASS" if "store=2630" in text else "Not shown.\nVERDICT: FAIL"
    return "unexpected question"


async def test_a_task_without_rubric_is_judged_against_the_task_itself(scripted_openai):
    server = scripted_openai(task_only_judge)
    async with judge_for(server, max_screenshots=4) as judge:
        result = await judge.score(shop_episode())
    assert result.reward == 1.0 and result.error == ""
    assert [(v.criterion, v.passed) for v in result.verdicts] == [("answer_grounded", True), ("task", True)]
    assert "store=2630" in result.verdicts[1].reason
    task_texts = [user_text(b) for b in server.requests if "accomplish the task as stated" in user_text(b)]
    assert len(task_texts) == 1 and SHOP_TASK["task_name"] in task_texts[0]


async def test_a_task_without_rubric_never_passes_on_grounding_alone(scripted_openai):
    # The agent never chose the store: its answer is grounded in what it saw, but the task is not done.
    steps = [s for s in SHOP_STEPS if "store=" not in s[0]]
    server = scripted_openai(task_only_judge)
    async with judge_for(server) as judge:
        result = await judge.score(shop_episode(steps))
    assert result.reward == 0.0 and result.error == ""
    assert [(v.criterion, v.passed) for v in result.verdicts] == [("answer_grounded", True), ("task", False)]


async def test_a_rubric_whose_groups_hold_no_facts_is_judged_as_a_task(scripted_openai):
    # (a task row refuses such a rubric; a task built in code may still carry one)
    task = dataclasses.replace(Task.from_row(SHOP_TASK), evaluator_reference=(FactGroup("g1", "empty", ()),))
    episode = shop_episode()
    server = scripted_openai(task_only_judge)
    async with judge_for(server) as judge:
        result = await judge.score(dataclasses.replace(episode, task=task))
    assert [v.criterion for v in result.verdicts] == ["answer_grounded", "task"] and result.reward == 1.0


async def test_visited_urls_and_titles_reach_the_judge(scripted_openai):
    task = {**SHOP_TASK, "evaluator_reference": [
        {"id": "store", "description": "the store", "facts": ["Visits a URL whose store parameter is 2630"]}]}
    episode = shop_episode(task=task)
    assert episode.steps[3].url.endswith("store=2630") and episode.steps[5].title == "WANDA Dress, size M"
    server = scripted_openai(task_only_judge)
    async with judge_for(server, max_screenshots=4) as judge:
        result = await judge.score(episode)
    assert result.reward == 1.0
    assert [v.criterion for v in result.verdicts] == ["answer_grounded", "fact:store:0"]
    for body in server.requests:
        text = user_text(body)
        # one line per visit, in order; the scrolled steps 2, 4 and 6 stay on their page's line
        assert ("step 0: https://shop.example/ (title: 'Shop Example - Home')\n"
                "step 1: https://shop.example/search?q=wanda+dress (title: 'Search: wanda dress')\n"
                "step 3: https://shop.example/search?q=wanda+dress&store=2630 "
                "(title: 'WANDA dress results at store 2630')\n"
                "step 5: https://shop.example/p/wanda-dress-m (title: 'WANDA Dress, size M')\n") in text
        assert "step 2:" not in text and "step 6:" not in text.split("Question:")[0]
        # each screenshot comes after a label naming its step, URL and title
        parts = body["messages"][-1]["content"]
        labels = [parts[k - 1]["text"] for k, part in enumerate(parts) if part["type"] == "image_url"]
        assert labels == [
            "Screenshot 1 of 4: step 0, https://shop.example/ (title: 'Shop Example - Home')",
            "Screenshot 2 of 4: step 3, https://shop.example/search?q=wanda+dress&store=2630 "
            "(title: 'WANDA dress results at store 2630')",
            "Screenshot 3 of 4: step 4, https://shop.example/search?q=wanda+dress&store=2630 "
            "(title: 'WANDA dress results at store 2630')",
            "Screenshot 4 of 4: step 6, https://shop.example/p/wanda-dress-m (title: 'WANDA Dress, size M')"]
    assert "VERDICT: PASS" in SYSTEM_PROMPT and "visited" in server.requests[0]["messages"][0]["content"]


def test_key_screenshots_are_first_last_cited_and_page_changes_within_the_budget():
    episode = shop_episode()
    shots = [step.screenshot for step in episode.steps]
    urls, titles = [step.url for step in episode.steps], [step.title for step in episode.steps]

    def keys(n: int, answer: str = SHOP_ANSWER) -> list[int]:
        return select_key_screenshots(shots, n, urls=urls, titles=titles, answer=answer)

    # The answer quotes step 3-4's title: the last step of that visit (4) is cited.
    assert cited_steps(SHOP_ANSWER, urls, titles) == [4]
    assert keys(1) == [6]                      # the last screen first
    assert keys(2) == [0, 6]                   # then the first
    assert keys(3) == [0, 4, 6]                # then what the answer cites
    assert keys(4) == [0, 3, 4, 6]             # then page changes (1, 3, 5), thinned evenly
    assert keys(5) == [0, 1, 4, 5, 6]
    assert keys(6) == [0, 1, 3, 4, 5, 6]       # every page change
    assert keys(7) == keys(50) == list(range(7))  # then the other screen changes (2: scrolled)
    for budget in range(8):
        assert len(keys(budget)) <= budget
    # Without a citation the page changes fill the budget; a quoted URL cites its page's last step.
    assert keys(3, answer="$39.90") == [0, 3, 6]
    assert cited_steps("see shop.example/p/wanda-dress-m", urls, titles) == [6]
    assert cited_steps("at https://shop.example/search?q=wanda+dress", urls, titles) == [2]
    assert cited_steps("Home", urls, titles) == []  # too short to be a citation
    assert cited_steps("on shop.example", urls, titles) == []  # a site, not a page
    # a URL that another one extends is cited only when quoted whole
    assert cited_steps("shop.example/search?q=wanda+dress&store=2630.", urls, titles) == [4]
    assert cited_steps("the 'WANDA Dress, size Medium'", urls, titles) == []


def test_key_screenshots_skip_repeated_images():
    # The agent came back to the first page: its screenshot is sent once, not twice.
    steps = [("https://a.example/", "A start", "white"), ("https://a.example/x", "X page", "red"),
             ("https://a.example/", "A start", "white")]
    episode = shop_episode(steps)
    assert select_key_screenshots([s.screenshot for s in episode.steps], 3,
                                  urls=[s.url for s in episode.steps]) == [1, 2]
    # A step whose screenshot was not taken has nothing to show.
    assert select_key_screenshots([png("white"), b"", png("red")], 3) == [0, 2]


# ------------------------------------------------------- untrusted input: judge replies never crash

_VERDICTS = st.sampled_from(["VERDICT: PASS", "VERDICT: FAIL", "**verdict: pass**", "VERDICT:",
                             "VERDICT: PASSFAIL"])


@settings(max_examples=400, deadline=None)
@given(text=ODD_TEXT | JSON_VALUES | st.builds(lambda a, v, b: f"{a}\n{v}\n{b}", ODD_TEXT, _VERDICTS,
                                               ODD_TEXT | st.just("")),
       finish_reason=st.sampled_from(["stop", "length", ""]) | JSON_VALUES)
def test_any_reply_gives_a_verdict_or_a_judge_error(text, finish_reason):
    try:
        passed, reason = parse_verdict(text, finish_reason)
    except JudgeReplyInvalid:
        return
    assert isinstance(passed, bool) and isinstance(reason, str)
    assert isinstance(text, str) and finish_reason != "length"


# What a broken server may answer with (HTTP 200); the openai client checks none of it.
_BROKEN_BODIES = [
    {"choices": []}, {"choices": "x"}, {"choices": [5]}, {"choices": [{"message": None}]},
    {"choices": [{"message": {"content": ["VERDICT: PASS"]}, "finish_reason": "stop"}]},
    {"choices": [{"message": {"content": {"text": "VERDICT: PASS"}}}]}, [1, 2], "VERDICT: PASS", None,
]


@pytest.mark.parametrize("body", _BROKEN_BODIES)
async def test_a_malformed_completion_is_a_judge_error_never_a_pass(scripted_openai, body):
    server = scripted_openai([{"body": body}])
    async with judge_for(server, reply_retries=1) as judge:
        result = await judge.score(played("t", answer="a", screenshots=[png("red")]))
    assert result.reward == 0.0 and result.error_kind == "judge_reply_invalid"
    assert len(server.requests) == 2  # asked again once, as for any invalid reply


async def test_odd_usage_and_finish_reason_fields_do_not_stop_the_judge(scripted_openai):
    body = {"choices": [{"message": {"content": "bad byte \ud800 seen\nVERDICT: PASS"}, "finish_reason": 3}],
            "usage": {"prompt_tokens": "many", "completion_tokens": None}}
    server = scripted_openai([{"body": body}])
    async with judge_for(server) as judge:
        result = await judge.score(played("t", answer="a", screenshots=[png("red")]))
    assert result.reward == 1.0 and result.prompt_tokens == 0
    for verdict in result.verdicts:  # the reason is stored with the episode: it must be valid text
        verdict.reason.encode("utf-8")
    assert "bad byte" in result.verdicts[0].reason


@pytest.mark.parametrize("body", [b"not json", b"[" * 100_000, b'{"choices": [1' + b"0" * 5000 + b"]}"])
async def test_a_body_that_is_not_json_is_an_unavailable_judge_naming_the_url(scripted_openai, body):
    server = scripted_openai([{"body": body}])
    async with judge_for(server, max_retries=1) as judge:
        with pytest.raises(JudgeUnavailable, match="not a chat completion") as caught:
            await judge.score(request())
    assert server.base_url in str(caught.value)
    assert len(server.requests) == 2


# ------------------------------------------------- the request's wire format: the bodies the LLM gets

WIRE_GOLDEN = Path(__file__).with_name("judge_requests.json")
"""The bodies the judge sent for the episodes below, recorded before the judge took typed
`FactGroup`s (and before it took the `Episode`, and any later change): it must send exactly the same
JSON."""


def wire_bodies(bodies: list[dict]) -> list[str]:
    """The request bodies as sorted JSON texts (fact questions are asked concurrently), each inline
    image replaced by a digest of its data URL."""
    texts = []
    for body in bodies:
        body = json.loads(json.dumps(body))
        for message in body["messages"]:
            for part in message["content"] if isinstance(message["content"], list) else ():
                if part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    part["image_url"]["url"] = "sha256:" + hashlib.sha256(url.encode()).hexdigest()[:16]
        texts.append(json.dumps(body, sort_keys=True, ensure_ascii=False))
    return sorted(texts)


async def recorded_wire_bodies(scripted_openai) -> dict[str, list[str]]:
    recorded = {}
    cases = {"rubric": (scripted_judge(), request()),
             "task_only": (task_only_judge, shop_episode()),
             "url_fact": (task_only_judge, shop_episode(task={
                 **SHOP_TASK, "evaluator_reference": [
                     {"id": "store", "description": "the store",
                      "facts": ["Visits a URL whose store parameter is 2630"]}]}))}
    for name, (replies, judged) in cases.items():
        server = scripted_openai(replies)
        async with judge_for(server, max_screenshots=3) as judge:
            await judge.score(judged)
        recorded[name] = wire_bodies(server.requests)
    return recorded


async def test_the_bodies_sent_to_the_judge_model_are_unchanged(scripted_openai):
    expected = json.loads(WIRE_GOLDEN.read_text(encoding="utf-8"))
    assert await recorded_wire_bodies(scripted_openai) == expected


def test_the_request_carries_the_tasks_fact_groups_as_they_are():
    judged = request()
    assert judged.task.evaluator_reference == TASK.evaluator_reference
    assert all(isinstance(group, FactGroup) for group in judged.task.evaluator_reference)
    episode = shop_episode(task={**SHOP_TASK, "evaluator_reference": [
        {"id": 7, "description": "the store", "facts": ["store 2630 is chosen", "the price is given"]}]})
    (group,) = episode.task.evaluator_reference
    assert group is episode.task.evaluator_reference[0] and group.id == "7"
    # turned into text only in the question: the group's description, its facts numbered, the one asked
    question = fact_question(episode, group, 1)
    assert ("Rubric group: the store\nFacts of this group:\n1. store 2630 is chosen\n"
            "2. the price is given\n\nQuestion: does the episode establish fact 2 ('the price is given')"
            ) in question


def test_a_result_goes_onto_its_episode_the_same_way_wherever_it_is_judged():
    verdicts = (Verdict("answer_grounded", True), Verdict("task", True))
    passed = JudgeResult(reward=1.0, verdicts=verdicts, judge_model="m")
    undecided = JudgeResult(reward=0.0, verdicts=verdicts[:1], judge_model="m",
                            error="judge_reply_invalid: task: cut off")
    assert passed.passed and not undecided.passed
    assert not JudgeResult(reward=0.0, verdicts=(), judge_model="m").passed

    episode = shop_episode()
    record_result(episode, passed)
    assert (episode.status, episode.reward, episode.verdicts) == (EpisodeStatus.OK, 1.0, list(verdicts))
    assert episode.success and episode.trainable
    record_result(episode, undecided)  # the judge could not decide: not a failure of the agent
    assert episode.status is EpisodeStatus.JUDGE_REPLY_INVALID and not episode.success
    assert not episode.trainable
    episode = shop_episode()
    record_result(episode, passed)
    record_failure(episode, "judge_timeout")
    assert (episode.status, episode.reward, episode.verdicts) == (EpisodeStatus.JUDGE_TIMEOUT, 0.0, [])


async def test_a_judge_request_is_deprecated_and_still_judged(scripted_openai):
    import webgym_rollout.judge as judge_package

    with pytest.warns(DeprecationWarning, match="JudgeRequest"):
        legacy = judge_package.JudgeRequest.from_task(TASK, answer=ANSWER, screenshots=SHOTS)
    server = scripted_openai(scripted_judge())
    async with judge_for(server, max_screenshots=3) as judge:
        with pytest.warns(DeprecationWarning, match="takes the Episode"):
            old = await judge.score(legacy)
        new = await judge.score(request())
    assert old.reward == new.reward == 1.0 and old.verdicts == new.verdicts
    half = len(server.requests) // 2
    assert wire_bodies(server.requests[:half]) == wire_bodies(server.requests[half:])
