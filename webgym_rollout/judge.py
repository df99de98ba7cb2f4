"""Judges: ``await judge.score(JudgeRequest) -> JudgeResult`` after an episode has ended.

`RubricJudge` asks an LLM (any OpenAI-compatible endpoint, same client as the policy), one question
per criterion, in this order:

1. (B) ``answer_grounded``: every claim of the final answer is visible in the key screenshots;
2. (A) ``fact:<group id>:<n>``: each fact of each rubric group holds, asked with its whole group as
   context (a fact written as alternatives, "A or B", holds if either does);
3. ``definite_answer``: when the task has a reference answer, the final answer agrees with it.

The reward is 1 only if every criterion passes. Each reply must end with the line
``VERDICT: PASS`` or ``VERDICT: FAIL``; a reply cut off (``finish_reason == "length"``), without
that final line, or with conflicting verdict lines is a judge error: the criterion fails, the
result carries ``error`` (kind ``judge_reply_invalid``), and it is never read as a pass.
Only the key screenshots are sent (`select_key_screenshots`: the last screen of each run of
identical screenshots, the most recent ``max_screenshots`` of them).

`ProgrammaticJudge` uses the reward an environment reports (MiniWoB++: raw reward 1 -> reward 1).

`JudgeSettings` is what the CLI fills (``--judge``, ``--judge-base-url``, ...); `make_judge(settings)`
builds the judge it describes. The LLM is called through the toolkit's one retry client
(`webgym_core.endpoint.ChatClient`).

Exceptions (endpoint failures raise; bad replies are recorded on the result)::

    RolloutError
     └── JudgeError                 (webgym_rollout.errors)
          ├── JudgeUnavailable      connection failed, or HTTP 5xx/429 after the retries; names the URL
          ├── JudgeTimeout          no answer within timeout_s, after the retries
          ├── JudgeRejected         HTTP 4xx other than 429; not retried
          └── JudgeReplyInvalid     truncated, missing or ambiguous verdict (recorded, not raised by score)
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from webgym_core.endpoint import ChatClient, Endpoint, EndpointErrors
from webgym_core.settings import flat
from webgym_rollout.agent import image_data_url, strip_think
from webgym_rollout.errors import JudgeError
from webgym_rollout.trajectory import Episode, TaskOutcome, Verdict

__all__ = [
    "Judge",
    "JudgeRejected",
    "JudgeReplyInvalid",
    "JudgeRequest",
    "JudgeResult",
    "JudgeTimeout",
    "JudgeUnavailable",
    "JudgeSettings",
    "ProgrammaticJudge",
    "RubricJudge",
    "make_judge",
    "parse_verdict",
    "select_key_screenshots",
]


class JudgeUnavailable(JudgeError):
    """The judge endpoint could not be reached, or answered 5xx/429 through every retry."""

    kind = "judge_unavailable"


class JudgeTimeout(JudgeError):
    """The judge endpoint did not answer within the timeout, through every retry."""

    kind = "judge_timeout"


class JudgeRejected(JudgeError):
    """The judge endpoint refused the request (HTTP 4xx other than 429)."""

    kind = "judge_rejected"


class JudgeReplyInvalid(JudgeError):
    """A judge reply was truncated, or its verdict line was missing or ambiguous."""

    kind = "judge_reply_invalid"


@dataclass(frozen=True)
class JudgeResult:
    """The reward (1.0 or 0.0) and the verdicts behind it. `error` is set ("kind: message") when the
    judge itself failed on some criterion; such a result always has reward 0."""

    reward: float
    verdicts: tuple[Verdict, ...]
    judge_model: str
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_s: float = 0.0

    @property
    def error_kind(self) -> str:
        return self.error.split(":", 1)[0] if self.error else ""


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)


@dataclass(frozen=True)
class JudgeRequest:
    """What a judge needs from an ended episode."""

    task_name: str
    evaluator_reference: tuple[dict[str, Any], ...] = ()
    """Rubric fact groups ``{id, description, facts}``."""
    definite_answer: str = ""
    answer: str = ""
    """The agent's final answer ("" if it never answered)."""
    screenshots: tuple[bytes, ...] = ()
    """Every screenshot of the episode in order (PNG/JPEG bytes); the judge picks the key ones."""
    outcome: TaskOutcome | None = None
    """What the environment itself reported (MiniWoB++: done and raw reward 1 / -1), if anything."""

    @classmethod
    def from_task(cls, task: Any, *, answer: str = "", screenshots: Sequence[bytes] = (),
                  outcome: TaskOutcome | None = None) -> JudgeRequest:
        """Build from a task row (mapping) or task object (``webgym_data.schema.Task``)."""
        groups = []
        for position, group in enumerate(_get(task, "evaluator_reference", None) or ()):
            groups.append({"id": str(_get(group, "id", position + 1)),
                           "description": str(_get(group, "description", "") or ""),
                           "facts": [str(f) for f in (_get(group, "facts", None) or ())]})
        return cls(task_name=str(_get(task, "task_name", "")), evaluator_reference=tuple(groups),
                   definite_answer=str(_get(task, "definite_answer", "") or ""), answer=answer or "",
                   screenshots=tuple(screenshots), outcome=outcome)

    @classmethod
    def from_episode(cls, episode: Episode) -> JudgeRequest:
        """Everything the judge sees of an ended episode."""
        return cls.from_task(episode.task, answer=episode.answer,
                             screenshots=[step.screenshot for step in episode.steps], outcome=episode.outcome)


@runtime_checkable
class Judge(Protocol):
    """Anything that scores an ended episode."""

    model_id: str

    async def score(self, request: JudgeRequest) -> JudgeResult: ...


def select_key_screenshots(screenshots: Sequence[bytes], max_n: int) -> list[int]:
    """Indices of the screenshots to show a judge, oldest first: the last screenshot of each run of
    identical ones (the page as it stood before each change, and the final page), the most recent
    `max_n` of them. Identical bytes mean identical pixels for our PNG screenshots."""
    if max_n < 1 or not screenshots:
        return []
    digests = [hashlib.sha256(s).digest() for s in screenshots]
    ends = [i for i in range(len(digests)) if i == len(digests) - 1 or digests[i] != digests[i + 1]]
    return ends[-max_n:]


_VERDICT_LINE = re.compile(r"^[\s*_`#>-]*VERDICT\s*:\s*(PASS|FAIL)[\s*_`.!]*$", re.IGNORECASE)


def parse_verdict(text: str, finish_reason: str = "stop") -> tuple[bool, str]:
    """(passed, reason) from a judge reply whose last non-empty line is ``VERDICT: PASS|FAIL``.

    Raises `JudgeReplyInvalid` for a truncated reply, a missing final verdict line, or verdict
    lines that disagree. The reason is the reply's text before the verdict line.
    """
    if finish_reason == "length":
        raise JudgeReplyInvalid("the judge reply was cut off (finish_reason=length)")
    lines = [line.strip() for line in strip_think(text or "").splitlines() if line.strip()]
    if not lines:
        raise JudgeReplyInvalid("the judge reply is empty")
    last = _VERDICT_LINE.match(lines[-1])
    if last is None:
        raise JudgeReplyInvalid(f"the judge reply does not end with 'VERDICT: PASS' or 'VERDICT: FAIL' "
                                f"(last line: {lines[-1][:80]!r})")
    value = last.group(1).upper()
    others = {m.group(1).upper() for line in lines[:-1] if (m := _VERDICT_LINE.match(line))}
    if others - {value}:
        raise JudgeReplyInvalid("the judge reply gives both PASS and FAIL verdict lines")
    return value == "PASS", " ".join(" ".join(lines[:-1]).split())


@dataclass(frozen=True)
class JudgeSettings:
    """Which judge scores the episodes, and how (the ``--judge-*`` flags)."""

    kind: Literal["programmatic", "rubric"] = "programmatic"
    """programmatic (the environment's own reward, MiniWoB) or rubric (an LLM judge)."""
    endpoint: Endpoint = flat(Endpoint)
    max_screenshots: int = 6
    """Most screenshots sent with a question (see `select_key_screenshots`)."""
    reply_retries: int = 1
    """Times a question is asked again when the reply is invalid (truncated, no verdict line)."""
    temperature: float = 0.0
    """Sampling temperature of the judge."""
    max_tokens: int = 1024
    """Longest judge reply; a reply cut here is a judge error."""
    require_answer: bool = True
    """An episode without a final answer fails without asking the LLM."""
    short_circuit: bool = True
    """Stop asking once a criterion has failed (the reward is 0 whatever the rest say)."""
    extra_body: dict[str, Any] = field(default_factory=dict, metadata={"cli": False})
    """Server-specific request fields passed through."""

    def __post_init__(self) -> None:
        if self.kind == "rubric" and not self.endpoint.configured:
            raise ValueError("base_url: the rubric judge needs the endpoint's base_url and model "
                             "(--judge-base-url, --judge-model)")
        if self.max_screenshots < 0 or self.reply_retries < 0:
            raise ValueError("max_screenshots: max_screenshots and reply_retries must be >= 0")


def make_judge(settings: JudgeSettings) -> Judge:
    """The judge `settings` describe."""
    if settings.kind == "programmatic":
        return ProgrammaticJudge()
    return RubricJudge(settings)


_SYSTEM = (
    "You are a strict evaluator of a web agent. You are given a task, the agent's final answer and "
    "screenshots of the pages the agent saw, and you answer one question about them. Judge only from "
    "what the screenshots and the answer show; do not use outside knowledge to fill gaps. Explain "
    "briefly, then end your reply with a last line that is exactly 'VERDICT: PASS' or 'VERDICT: FAIL'."
)


class RubricJudge:
    """LLM judge of rubric facts, answer grounding and the reference answer."""

    def __init__(self, settings: JudgeSettings) -> None:
        if not settings.endpoint.configured:
            raise ValueError("base_url: the rubric judge needs the endpoint's base_url and model")
        self.settings = settings
        self.model_id = settings.endpoint.model
        self._client = ChatClient(settings.endpoint, errors=EndpointErrors(
            unavailable=JudgeUnavailable, timeout=JudgeTimeout, rejected=JudgeRejected))

    async def __aenter__(self) -> RubricJudge:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    async def score(self, request: JudgeRequest) -> JudgeResult:
        started = time.perf_counter()
        tokens = [0, 0]  # per call: several episodes may be judged at once
        verdicts: list[Verdict] = []
        errors: list[str] = []
        settings = self.settings
        images = [request.screenshots[i] for i in select_key_screenshots(request.screenshots,
                                                                         settings.max_screenshots)]

        async def ask(criterion: str, question: str, with_images: bool) -> Verdict:
            try:
                passed, reason = await self._ask(question, images if with_images else [], tokens)
            except JudgeReplyInvalid as exc:
                errors.append(f"{JudgeReplyInvalid.kind}: {criterion}: {exc}")
                return Verdict(criterion, False, f"judge error: {exc}")
            return Verdict(criterion, passed, reason)

        def done() -> bool:
            return settings.short_circuit and any(not v.passed for v in verdicts)

        if not request.answer.strip() and settings.require_answer:
            verdicts.append(Verdict("answer_grounded", False, "the episode ended without a final answer"))
        else:
            verdicts.append(await ask("answer_grounded", _grounding_question(request), True))
        if not done():
            questions = [(f"fact:{group['id']}:{n}", _fact_question(request, group, n))
                         for group in request.evaluator_reference for n in range(len(group["facts"]))]
            verdicts.extend(await asyncio.gather(*(ask(c, q, True) for c, q in questions)))
        if request.definite_answer.strip() and not done():
            verdicts.append(await ask("definite_answer", _reference_question(request), False))
        passed = all(v.passed for v in verdicts) and not errors
        return JudgeResult(reward=1.0 if passed else 0.0, verdicts=tuple(verdicts), judge_model=self.model_id,
                           error="; ".join(errors), prompt_tokens=tokens[0],
                           completion_tokens=tokens[1], duration_s=time.perf_counter() - started)

    async def _ask(self, question: str, images: Sequence[bytes], tokens: list[int]) -> tuple[bool, str]:
        content: list[dict[str, Any]] = [{"type": "text", "text": question}]
        content += [{"type": "image_url", "image_url": {"url": image_data_url(image)}} for image in images]
        body: dict[str, Any] = {
            "messages": [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": content}],
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        if self.settings.extra_body:
            body["extra_body"] = dict(self.settings.extra_body)
        for attempt in range(self.settings.reply_retries + 1):
            completion = await self._client.complete(**body)
            if completion.usage is not None:
                tokens[0] += completion.usage.prompt_tokens or 0
                tokens[1] += completion.usage.completion_tokens or 0
            choice = completion.choices[0] if completion.choices else None
            try:
                if choice is None:
                    raise JudgeReplyInvalid("the judge reply has no choices")
                return parse_verdict(choice.message.content or "", choice.finish_reason or "stop")
            except JudgeReplyInvalid:
                if attempt >= self.settings.reply_retries:
                    raise
        raise AssertionError("unreachable")


def _header(request: JudgeRequest) -> str:
    answer = request.answer.strip() or "(no answer)"
    return f"Task: {request.task_name}\n\nThe agent's final answer:\n{answer}\n"


def _grounding_question(request: JudgeRequest) -> str:
    return (_header(request) + "\nQuestion: is every claim in the final answer visible in the screenshots? "
            "A claim counts as visible only if a screenshot shows it; a claim you cannot find in any "
            "screenshot, or one the screenshots contradict, fails the check.")


def _fact_question(request: JudgeRequest, group: Mapping[str, Any], index: int) -> str:
    facts = "\n".join(f"{n + 1}. {fact}" for n, fact in enumerate(group["facts"]))
    return (_header(request)
            + f"\nRubric group: {group['description'] or group['id']}\nFacts of this group:\n{facts}\n\n"
            f"Question: does the episode establish fact {index + 1} ({group['facts'][index]!r}), as "
            "shown by the screenshots and the final answer, read in the context of its group? A fact "
            "that gives alternatives ('A or B') holds if any one of them holds.")


def _reference_question(request: JudgeRequest) -> str:
    return (_header(request) + f"\nReference answer: {request.definite_answer}\n\n"
            "Question: does the final answer agree with the reference answer (same facts; wording, "
            "formatting and extra correct detail do not matter)?")


class ProgrammaticJudge:
    """Reward from the environment itself: raw reward 1 (MiniWoB++ success) gives reward 1."""

    model_id = "programmatic"

    async def score(self, request: JudgeRequest) -> JudgeResult:
        outcome = request.outcome
        raw = outcome.raw_reward if outcome is not None else None
        passed = bool(outcome is not None and outcome.done and raw is not None and raw >= 1)
        if outcome is None or raw is None:
            reason = "the environment reported no reward"
        elif not outcome.done:
            reason = f"the episode did not finish (raw reward {raw:g})"
        else:
            reason = f"raw reward {raw:g}" + (f": {outcome.reason}" if outcome.reason else "")
        return JudgeResult(reward=1.0 if passed else 0.0,
                           verdicts=(Verdict("environment", passed, reason),), judge_model=self.model_id)
