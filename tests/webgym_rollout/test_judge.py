"""Judges: the rubric judge against a real OpenAI-protocol server with scripted replies, and the
programmatic judge. Only a reply that ends with an explicit pass verdict can ever give reward 1."""

from __future__ import annotations

import pytest

from tests.webgym_rollout.test_agent import png
from webgym_core.endpoint import Endpoint
from webgym_rollout.judge import (
    JudgeReplyInvalid,
    JudgeRequest,
    JudgeSettings,
    JudgeUnavailable,
    ProgrammaticJudge,
    RubricJudge,
    make_judge,
    parse_verdict,
    select_key_screenshots,
)
from webgym_rollout.trajectory import TaskOutcome

TASK = {
    "task_name": "Find the cheapest Boston to Denver flight on May 3 and its airline.",
    "evaluator_reference": [
        {"id": "g1", "description": "the flight search", "facts": ["Searched flights from Boston to Denver",
                                                                  "Departure date May 3"]},
        {"id": "g2", "description": "the answer", "facts": ["Cheapest price is $120 or $119 with a coupon",
                                                           "Airline is United"]},
    ],
    "definite_answer": "$120, United",
}
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


def request(answer: str = ANSWER) -> JudgeRequest:
    return JudgeRequest.from_task(TASK, answer=answer, screenshots=SHOTS)


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
        result = await judge.score(JudgeRequest(task_name="t", answer="a", screenshots=(png("red"),)))
    assert result.reward == 1.0 and len(server.requests) == 2


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


def test_key_screenshots_are_the_last_of_each_unchanged_run():
    assert select_key_screenshots(SHOTS, 10) == [1, 2, 4, 5]
    assert select_key_screenshots(SHOTS, 2) == [4, 5]
    assert select_key_screenshots(SHOTS, 1) == [5]
    assert select_key_screenshots([], 3) == []


async def test_programmatic_judge_uses_the_environment_reward():
    judge = ProgrammaticJudge()
    cases = [(True, 1.0, 1.0), (True, -1.0, 0.0), (False, 1.0, 0.0), (True, None, 0.0), (False, None, 0.0)]
    for done, raw, reward in cases:
        result = await judge.score(JudgeRequest(task_name="click", outcome=TaskOutcome(
            done=done, raw_reward=raw, reason="clicked")))
        assert result.reward == reward, (done, raw)
        assert result.verdicts[0].criterion == "environment"
        assert result.verdicts[0].passed is (reward == 1.0)
    assert result.judge_model == "programmatic"
    assert (await judge.score(JudgeRequest(task_name="web task"))).reward == 0.0  # no outcome at all
    with pytest.raises(ValueError, match="base_url: the rubric judge needs"):
        JudgeSettings(kind="rubric")
