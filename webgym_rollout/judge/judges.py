"""Judges: ``await judge.score(episode) -> JudgeResult`` after an episode has ended.

`RubricJudge` asks an LLM (any OpenAI-compatible endpoint, same client as the policy), one question
per criterion, in this order:

1. (B) ``answer_grounded``: every claim of the final answer is visible in the key screenshots (or
   stated by a visited page's URL or title);
2. (A) ``fact:<group id>:<n>``: each fact of each rubric group holds, asked with its whole group as
   context (a fact written as alternatives, "A or B", holds if either does); a task without a
   rubric is asked instead ``task``: does the episode accomplish the task as stated (the paper's
   task-only evaluation), so that no task ever passes on answer grounding alone;
3. ``definite_answer``: when the task has a reference answer, the final answer agrees with it.

The reward is 1 only if every criterion passes. Each reply must end with the line
``VERDICT: PASS`` or ``VERDICT: FAIL``; a reply cut off (``finish_reason == "length"``), without
that final line, or with conflicting verdict lines is a judge error: the criterion fails, the
result carries ``error`` (kind ``judge_reply_invalid``), and it is never read as a pass.

A judge takes the ended `Episode` itself (its `Task` and its `Step`s) and builds what its model
needs from it. What the rubric judge sees: the task's instruction (``Task.task_name``; its rubric as
the task's own `FactGroup`s, turned into prompt text only when a question is written), the final
answer, the pages the agent visited in order (each step's URL and title, consecutive repeats
collapsed) and the key screenshots, each labelled with its step, URL and title. The key
screenshots (`select_key_screenshots`, at most ``max_screenshots``) come from the whole episode,
in this order of priority: the last screenshot, the first, those the answer cites (the last step of
each visit to a page whose title or URL the answer quotes; the most recent first), those right
after a page change (the URL differs from the previous step's; without URLs, the screenshot does),
then the other screen changes; a group that does not fit is thinned evenly over the episode, and a
screenshot identical to one already chosen is not sent twice. The rubric-fact and task questions
carry the visited pages, so URL facts ("visits a URL whose store parameter is 2630") can be checked.

`ProgrammaticJudge` uses the reward an environment reports (MiniWoB++: raw reward 1 -> reward 1).

A result goes onto its episode through `record_result` (the reward and verdicts; a judge that could
not decide makes the episode an infrastructure failure of that kind), a judge endpoint's failure
through `record_failure`: the runner and `rejudge` both call them.

`JudgeSettings` is what the CLI fills (``--judge``, ``--judge-base-url``, ...); `make_judge(settings)`
builds the judge it describes. The LLM is called through the toolkit's one retry client
(`webgym_core.endpoint.ChatClient`).

Exceptions (endpoint failures raise; bad replies are recorded on the result)::

    RolloutError
     └── JudgeError                 (webgym_rollout.errors)
          ├── JudgeUnavailable      connection failed, HTTP 5xx/429 or a body that is not JSON, after the
          │                         retries; names the URL
          ├── JudgeTimeout          no answer within timeout_s, after the retries
          ├── JudgeRejected         HTTP 4xx other than 429; not retried
          └── JudgeReplyInvalid     truncated, missing or ambiguous verdict, or a completion without a
                                    text message (recorded, not raised by score)
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

from webgym_core.endpoint import ChatClient, Endpoint, EndpointErrors
from webgym_core.settings import flat
from webgym_data.schema import FactGroup, Task
from webgym_rollout.agent.protocol import image_data_url, strip_think
from webgym_rollout.errors import JudgeRejected, JudgeReplyInvalid, JudgeTimeout, JudgeUnavailable
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step, TaskOutcome, Verdict, succeeded

__all__ = [
    "SYSTEM_PROMPT",
    "Judge",
    "JudgeRejected",
    "JudgeReplyInvalid",
    "JudgeResult",
    "JudgeSettings",
    "JudgeTimeout",
    "JudgeUnavailable",
    "ProgrammaticJudge",
    "RubricJudge",
    "cited_steps",
    "fact_question",
    "grounding_question",
    "make_judge",
    "parse_verdict",
    "record_failure",
    "record_result",
    "reference_question",
    "select_key_screenshots",
    "task_question",
    "visited_pages",
]


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

    @property
    def passed(self) -> bool:
        """The judge passed the episode: its reward is a success (`succeeded`) and it decided."""
        return succeeded(self.reward) and not self.error


def record_result(episode: Episode, result: JudgeResult) -> None:
    """Put `result` on `episode`: its reward and verdicts; a judge that could not decide on some
    criterion (`JudgeResult.error`) makes the episode an infrastructure failure of that kind
    (``error:judge_reply_invalid``), not a failure of the agent."""
    episode.reward, episode.verdicts = float(result.reward), list(result.verdicts)
    if result.error_kind:
        episode.status = EpisodeStatus.for_error(result.error_kind)


def record_failure(episode: Episode, kind: str) -> None:
    """Mark `episode` unjudged because the judge endpoint failed with an error of `kind`
    (`RolloutError.kind`): an infrastructure failure, reward 0, no verdicts."""
    episode.status, episode.reward, episode.verdicts = EpisodeStatus.for_error(kind), 0.0, []


@dataclass(frozen=True)
class _JudgeRequest:
    """Deprecated (0.3.0): what a judge took before it took the `Episode`. ``JudgeRequest`` still
    names it, with a DeprecationWarning, for one release; a judge given one judges `to_episode()`."""

    task_name: str
    evaluator_reference: tuple[FactGroup, ...] = ()
    definite_answer: str = ""
    answer: str = ""
    screenshots: tuple[bytes, ...] = ()
    urls: tuple[str, ...] = ()
    titles: tuple[str, ...] = ()
    outcome: TaskOutcome | None = None
    task_id: str = ""

    @classmethod
    def from_task(cls, task: Task, *, answer: str = "", screenshots: Sequence[bytes] = (),
                  urls: Sequence[str] = (), titles: Sequence[str] = (),
                  outcome: TaskOutcome | None = None) -> _JudgeRequest:
        return cls(task_name=task.task_name, task_id=task.task_id,
                   evaluator_reference=tuple(task.evaluator_reference),
                   definite_answer=task.definite_answer, answer=answer or "",
                   screenshots=tuple(screenshots), urls=tuple(u or "" for u in urls),
                   titles=tuple(t or "" for t in titles), outcome=outcome)

    @classmethod
    def from_episode(cls, episode: Episode) -> _JudgeRequest:
        steps = episode.steps
        return cls.from_task(episode.task, answer=episode.answer,
                             screenshots=[step.screenshot for step in steps],
                             urls=[step.url for step in steps], titles=[step.title for step in steps],
                             outcome=episode.outcome)

    def to_episode(self) -> Episode:
        """The episode this request described (a task of these fields, one step per screenshot,
        URL or title)."""
        task = Task(task_id=self.task_id, task_name=self.task_name, website="", benchmark_name="",
                    evaluator_reference=self.evaluator_reference, definite_answer=self.definite_answer)
        count = max(len(self.screenshots), len(self.urls), len(self.titles))

        def at(values: Sequence[Any], i: int, empty: Any) -> Any:
            return values[i] if i < len(values) else empty

        steps = [Step(index=i, screenshot=at(self.screenshots, i, b""), url=at(self.urls, i, ""),
                      title=at(self.titles, i, "")) for i in range(count)]
        return Episode(task=task, episode_id=self.task_id or "judge-request", answer=self.answer,
                       outcome=self.outcome or TaskOutcome(), steps=steps)


def judged_episode(value: Episode | _JudgeRequest) -> Episode:
    """`value` as the episode a judge scores: an `Episode` as it is; a deprecated ``JudgeRequest``
    as its `to_episode()`, with a DeprecationWarning (judges outside this package call this too)."""
    if isinstance(value, _JudgeRequest):
        warnings.warn("Judge.score takes the Episode (JudgeRequest is deprecated and goes away in the "
                      "next release)", DeprecationWarning, stacklevel=3)
        return value.to_episode()
    return value


def __getattr__(name: str) -> Any:
    if name == "JudgeRequest":
        warnings.warn("webgym_rollout.judge.JudgeRequest is deprecated: Judge.score takes the Episode; "
                      "it goes away in the next release", DeprecationWarning, stacklevel=2)
        return _JudgeRequest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@runtime_checkable
class Judge(Protocol):
    """Anything that scores an ended episode: reads the `Episode` (its task, answer, steps and the
    environment's outcome), never changes it (`record_result` puts the result on it)."""

    model_id: str

    async def score(self, episode: Episode) -> JudgeResult: ...


# ---------------------------------------------------------------------------- key screenshots

_MIN_CITED_TITLE = 6
"""Shortest page title that counts as cited when the answer contains it (shorter ones, "Home",
match by chance)."""
_MIN_CITED_URL = 8
"""Shortest URL part (host and path, or path and query) that counts as cited."""


def _url_forms(url: str) -> list[str]:
    """The spellings of `url` an answer may quote: without scheme, ``www.`` and trailing slash; and
    its path with query, when that is long enough to mean something. A site's home page (no path)
    has none: naming the site is not citing a page."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + (f"?{parts.query}" if parts.query else "")
    if not parts.netloc or not path:
        return []
    forms = [(parts.netloc.removeprefix("www.") + path).casefold()]
    if len(path) >= _MIN_CITED_URL:
        forms.append(path.casefold())
    return [form for form in forms if len(form) >= _MIN_CITED_URL]


def _quotes(text: str, form: str, *, url: bool) -> bool:
    """`text` holds `form` as a whole: a URL not followed by more of a URL (``?q=a`` is not
    quoted by ``?q=a&store=1``), a title not inside a longer word."""
    start = text.find(form)
    while start >= 0:
        after = text[start + len(form):start + len(form) + 2]
        if url:
            # (the text's whitespace is collapsed to single spaces)
            whole = not after or after[0] in " )]}>\"',;!" or (after[0] in ".:" and after[1:] in ("", " "))
        else:
            whole = not after or not after[0].isalnum()
        if whole:
            return True
        start = text.find(form, start + 1)
    return False


def cited_steps(answer: str, urls: Sequence[str], titles: Sequence[str]) -> list[int]:
    """Steps the answer cites: those whose page title (at least 6 characters) or URL (without its
    scheme, or its path and query, at least 8 characters; not a bare site name) the answer quotes
    whole, case-insensitively. Of several consecutive steps on one cited page, only the last is
    returned (the page as the agent left it, scrolled to what it read)."""
    text = " ".join(answer.split()).casefold()
    if not text:
        return []
    count = max(len(urls), len(titles))

    def cites(i: int) -> bool:
        url = urls[i] if i < len(urls) else ""
        title = " ".join((titles[i] if i < len(titles) else "").split()).casefold()
        if len(title) >= _MIN_CITED_TITLE and _quotes(text, title, url=False):
            return True
        return any(_quotes(text, form, url=True) for form in _url_forms(url))

    def page(i: int) -> tuple[str, str]:
        return (urls[i] if i < len(urls) else "", titles[i] if i < len(titles) else "")

    cited = [i for i in range(count) if cites(i)]
    return [i for i in cited if i + 1 >= count or i + 1 not in cited or page(i + 1) != page(i)]


def _evenly(items: Sequence[int], n: int) -> list[int]:
    """`n` of `items`, spread evenly from the first to the last."""
    if n >= len(items):
        return list(items)
    if n == 1:
        return [items[len(items) // 2]]
    return [items[round(k * (len(items) - 1) / (n - 1))] for k in range(n)]


def select_key_screenshots(screenshots: Sequence[bytes], max_n: int, *, urls: Sequence[str] = (),
                           titles: Sequence[str] = (), answer: str = "") -> list[int]:
    """Indices of the screenshots to show a judge, oldest first, at most `max_n`, chosen from the
    whole episode. In order of priority: the last screenshot; the first; the steps the answer
    cites (`cited_steps`, most recent first); the steps right after a page change (the URL differs
    from the previous step's, or, when no URL is known, the screenshot does); then the remaining
    screen changes (the last screenshot of each run of identical ones). A group that does not fit
    in what is left of the budget is thinned evenly over the episode; a screenshot identical to
    one already chosen is skipped, and so is a step without a screenshot. Identical bytes mean
    identical pixels for our PNG screenshots."""
    n = len(screenshots)
    if max_n < 1 or n == 0:
        return []
    digests = [hashlib.sha256(s).digest() for s in screenshots]
    url_at = [urls[i] if i < len(urls) else "" for i in range(n)]
    if any(url_at):
        changes = [i for i in range(1, n) if url_at[i] and url_at[i] != url_at[i - 1]]
    else:
        changes = [i for i in range(1, n) if digests[i] != digests[i - 1]]
    run_ends = [i for i in range(n) if i == n - 1 or digests[i] != digests[i + 1]]
    cited = [i for i in cited_steps(answer, urls, titles) if i < n]
    groups = [[n - 1], [0], list(reversed(cited)), changes, run_ends]
    chosen: list[int] = []
    seen: set[bytes] = set()
    for position, group in enumerate(groups):
        fresh: list[int] = []
        for i in group:
            if screenshots[i] and i not in chosen and i not in fresh and digests[i] not in seen:
                fresh.append(i)
                seen.add(digests[i])
        left = max_n - len(chosen)
        if len(fresh) > left:
            keep = fresh[:left] if position == 2 else _evenly(fresh, left)
            seen.difference_update(digests[i] for i in fresh if i not in keep)
            fresh = keep
        chosen.extend(fresh)
        if len(chosen) >= max_n:
            break
    return sorted(chosen)


_VERDICT_LINE = re.compile(r"^[\s*_`#>-]*VERDICT\s*:\s*(PASS|FAIL)[\s*_`.!]*$", re.IGNORECASE)


def parse_verdict(text: Any, finish_reason: str = "stop") -> tuple[bool, str]:
    """(passed, reason) from a judge reply whose last non-empty line is ``VERDICT: PASS|FAIL``.

    Raises `JudgeReplyInvalid` (and nothing else, whatever `text` is) for a truncated reply, a
    missing final verdict line, verdict lines that disagree, or a reply that is not text. The reason
    is the reply's text before the verdict line.
    """
    if finish_reason == "length":
        raise JudgeReplyInvalid("the judge reply was cut off (finish_reason=length)")
    if text is not None and not isinstance(text, str):
        raise JudgeReplyInvalid(f"the judge reply is not text but {type(text).__name__}")
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

    kind: Literal["programmatic", "rubric", "site"] = "programmatic"
    """programmatic (the environment's own reward, MiniWoB), rubric (an LLM judge) or site (the local
    sites' generated tasks, checked against the ground truth of the site server that served them)."""
    endpoint: Endpoint = flat(Endpoint)
    max_screenshots: int = 6
    """Most screenshots sent with a question, chosen from the whole episode: the last, the first,
    those the answer cites, those after a page change (see `select_key_screenshots`)."""
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
        if self.max_screenshots < 0:
            raise ValueError(f"max_screenshots: must be >= 0, got {self.max_screenshots}")
        if self.reply_retries < 0:
            raise ValueError(f"reply_retries: must be >= 0, got {self.reply_retries}")


def make_judge(settings: JudgeSettings) -> Judge:
    """The judge `settings` describe."""
    if settings.kind == "programmatic":
        return ProgrammaticJudge()
    if settings.kind == "site":
        raise ValueError("kind: the site judge needs the tasks and the sites' ground truth; the runner "
                         "builds it (webgym_rollout.judge.site.SiteJudge)")
    return RubricJudge(settings)


SYSTEM_PROMPT = (
    "You are a strict evaluator of a web agent. You are given a task, the agent's final answer, the "
    "pages the agent visited (URL and title, in order) and screenshots of key moments of the episode, "
    "and you answer one question about them. Judge only from what the screenshots, the visited pages "
    "and the answer show; do not use outside knowledge to fill gaps. Explain briefly, then end your "
    "reply with a last line that is exactly 'VERDICT: PASS' or 'VERDICT: FAIL'."
)
"""The system message of every judge question."""

_MAX_VISITS = 60
"""Most entries of the visited-pages list in a question (the first 20 and the last 40 are kept)."""
_MAX_URL = 1000
"""Longest URL quoted in a question (query strings can be long; their start holds the parameters)."""


class RubricJudge:
    """LLM judge of answer grounding, rubric facts (or, without a rubric, the task itself) and the
    reference answer."""

    def __init__(self, settings: JudgeSettings) -> None:
        if not settings.endpoint.configured:
            raise ValueError("base_url: the rubric judge needs the endpoint's base_url and model")
        self.settings = settings
        self.model_id = settings.endpoint.model
        self._client = ChatClient(settings.endpoint, errors=EndpointErrors(
            unavailable=JudgeUnavailable, timeout=JudgeTimeout, rejected=JudgeRejected,
            invalid=JudgeReplyInvalid))

    async def __aenter__(self) -> RubricJudge:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    async def score(self, episode: Episode) -> JudgeResult:
        episode = judged_episode(episode)
        started = time.perf_counter()
        tokens = [0, 0]  # per call: several episodes may be judged at once
        verdicts: list[Verdict] = []
        errors: list[str] = []
        settings, steps, task = self.settings, episode.steps, episode.task
        keys = select_key_screenshots([step.screenshot for step in steps], settings.max_screenshots,
                                      urls=[step.url for step in steps],
                                      titles=[step.title for step in steps], answer=episode.answer)
        images = [(_screenshot_label(episode, i, n + 1, len(keys)), steps[i].screenshot)
                  for n, i in enumerate(keys)]

        async def ask(criterion: str, question: str, with_images: bool) -> Verdict:
            try:
                passed, reason = await self._ask(question, images if with_images else [], tokens)
            except JudgeReplyInvalid as exc:
                errors.append(f"{JudgeReplyInvalid.kind}: {criterion}: {exc}")
                return Verdict(criterion, False, f"judge error: {exc}")
            return Verdict(criterion, passed, reason)

        def done() -> bool:
            return settings.short_circuit and any(not v.passed for v in verdicts)

        if not episode.answer.strip() and settings.require_answer:
            verdicts.append(Verdict("answer_grounded", False, "the episode ended without a final answer"))
        else:
            verdicts.append(await ask("answer_grounded", grounding_question(episode), True))
        if not done():
            questions = [(f"fact:{group.id}:{n}", fact_question(episode, group, n))
                         for group in task.evaluator_reference for n in range(len(group.facts))]
            if not questions:  # no rubric: the task itself is the criterion (task-only evaluation)
                questions = [("task", task_question(episode))]
            verdicts.extend(await asyncio.gather(*(ask(c, q, True) for c, q in questions)))
        if task.definite_answer.strip() and not done():
            verdicts.append(await ask("definite_answer", reference_question(episode), False))
        passed = all(v.passed for v in verdicts) and not errors
        return JudgeResult(reward=1.0 if passed else 0.0, verdicts=tuple(verdicts), judge_model=self.model_id,
                           error="; ".join(errors), prompt_tokens=tokens[0],
                           completion_tokens=tokens[1], duration_s=time.perf_counter() - started)

    async def _ask(self, question: str, images: Sequence[tuple[str, bytes]],
                   tokens: list[int]) -> tuple[bool, str]:
        content: list[dict[str, Any]] = [{"type": "text", "text": question}]
        for label, image in images:
            content += [{"type": "text", "text": label},
                        {"type": "image_url", "image_url": {"url": image_data_url(image)}}]
        body: dict[str, Any] = {
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}],
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        if self.settings.extra_body:
            body["extra_body"] = dict(self.settings.extra_body)
        for attempt in range(self.settings.reply_retries + 1):
            try:
                # A body without a text message raises JudgeReplyInvalid from the client (its
                # ``invalid`` class): asked again like any other invalid reply.
                reply = await self._client.complete(**body)
                tokens[0] += reply.prompt_tokens
                tokens[1] += reply.completion_tokens
                return parse_verdict(reply.text, reply.finish_reason)
            except JudgeReplyInvalid:
                if attempt >= self.settings.reply_retries:
                    raise
        raise AssertionError("unreachable")


def _clip(url: str) -> str:
    return url if len(url) <= _MAX_URL else url[:_MAX_URL] + "..."


def _page(step: Step) -> str:
    url, title = step.url or "", " ".join((step.title or "").split())
    if url and title:
        return f"{_clip(url)} (title: {title!r})"
    return _clip(url) or (f"(no URL; title: {title!r})" if title else "(no URL recorded)")


def visited_pages(episode: Episode) -> str:
    """The pages the agent visited, one line per visit (consecutive steps on one page are one
    visit): ``step 3: https://... (title: '...')``; "" when no step recorded a URL or title."""
    steps = episode.steps
    pages = [(step.url or "", step.title or "") for step in steps]
    visits = [i for i, page in enumerate(pages) if any(page) and (i == 0 or page != pages[i - 1])]
    if not visits:
        return ""
    lines = [f"step {i}: {_page(steps[i])}" for i in visits]
    if len(lines) > _MAX_VISITS:
        head, tail = _MAX_VISITS // 3, _MAX_VISITS - _MAX_VISITS // 3
        lines = lines[:head] + [f"... ({len(lines) - head - tail} more visits) ..."] + lines[-tail:]
    return "\n".join(lines)


def _screenshot_label(episode: Episode, index: int, n: int, total: int) -> str:
    return f"Screenshot {n} of {total}: step {index}, {_page(episode.steps[index])}"


def _header(episode: Episode, *, pages: bool = True) -> str:
    """The task's instruction (``Task.task_name``: the task as the task set states it), the answer
    and the visited pages."""
    answer = episode.answer.strip() or "(no answer)"
    text = f"Task: {episode.task.task_name}\n\nThe agent's final answer:\n{answer}\n"
    visits = visited_pages(episode) if pages else ""
    if visits:
        text += f"\nPages the agent visited, in order (step: URL and title):\n{visits}\n"
    return text


def grounding_question(episode: Episode) -> str:
    """Criterion ``answer_grounded``: is every claim of the answer shown?"""
    return (_header(episode) + "\nQuestion: is every claim in the final answer visible in the screenshots "
            "(or stated by a visited page's URL or title)? A claim counts as visible only if a screenshot "
            "or a visited page shows it; a claim you cannot find, or one they contradict, fails the check.")


def fact_question(episode: Episode, group: FactGroup, index: int) -> str:
    """Criterion ``fact:<group>:<n>``: does rubric fact `index` of `group` hold?"""
    facts = "\n".join(f"{n + 1}. {fact}" for n, fact in enumerate(group.facts))
    return (_header(episode)
            + f"\nRubric group: {group.description or group.id}\nFacts of this group:\n{facts}\n\n"
            f"Question: does the episode establish fact {index + 1} ({group.facts[index]!r}), as "
            "shown by the screenshots, the visited pages (their URLs and titles) and the final answer, "
            "read in the context of its group? A fact that gives alternatives ('A or B') holds if any "
            "one of them holds.")


def task_question(episode: Episode) -> str:
    """Criterion ``task`` of a task without a rubric: is the task accomplished as stated?"""
    return (_header(episode)
            + "\nQuestion: does the episode accomplish the task as stated? Check every requirement the "
            "task states (the item, its attributes, filters, sort order, place, dates, quantities, the "
            "action asked for) against the screenshots and the visited pages: a URL's parameters can "
            "show that a filter, a sort or a store was chosen. If the task asks for information, the "
            "final answer must give it and the screenshots must support it; if it asks for an action, "
            "the screenshots or the URLs must show it done. A requirement that nothing shows is not "
            "met, and a partly done task fails.")


def reference_question(episode: Episode) -> str:
    """Criterion ``definite_answer``: does the answer agree with the reference answer?"""
    return (_header(episode, pages=False) + f"\nReference answer: {episode.task.definite_answer}\n\n"
            "Question: does the final answer agree with the reference answer (same facts; wording, "
            "formatting and extra correct detail do not matter)?")


class ProgrammaticJudge:
    """Reward from the environment itself: raw reward 1 (MiniWoB++ success) gives reward 1."""

    model_id = "programmatic"

    async def score(self, episode: Episode) -> JudgeResult:
        outcome = judged_episode(episode).outcome
        raw = outcome.raw_reward
        passed = bool(outcome.done and raw is not None and raw >= 1)
        if raw is None:
            reason = "the environment reported no reward"
        elif not outcome.done:
            reason = f"the episode did not finish (raw reward {raw:g})"
        else:
            reason = f"raw reward {raw:g}" + (f": {outcome.reason}" if outcome.reason else "")
        return JudgeResult(reward=1.0 if passed else 0.0,
                           verdicts=(Verdict("environment", passed, reason),), judge_model=self.model_id)
