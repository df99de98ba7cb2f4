"""Decomposition: easier subtasks from a task's rubric.

A task with at least two fact groups, at least one of them *large* (``>= large_threshold`` facts),
yields one subtask per proper, non-empty subset of its groups that holds a large group. The
subtask's rubric is that subset, its difficulty their fact count (``Task`` derives it), its
``parent_task_id`` the parent's id and its ``task_id`` a stable hash of the parent id and the group
ids. At most ``max_subtasks`` subsets are kept per task, chosen deterministically: smaller subsets
first (they are the easier tasks decomposition is for), then in the parent's group order.

The subtask instruction asks only for its groups, and is written from what the task asks for: the
parent's instruction and the kept groups' descriptions (their names: "Cart", "Answer"), never from
their facts. Facts and the definite answer grade the episode; an instruction that stated them would
pay an agent for echoing it. With an `LLMClient` the instruction is rewritten by the LLM (purpose
``"decompose"``, cached on disk by the client; its prompt holds the parent's instruction and the
groups' descriptions only) and the row says ``instruction_source = "llm"``; without one, or when the
LLM's reply stays invalid after retries, a deterministic template is used (``"template"``). Either
stays within `MAX_INSTRUCTION_CHARS`.

Both are checked by `instruction_leak`: an instruction may not contain, in words (case and
punctuation aside), a fact text of the parent's rubric, the parent's definite answer, or a name or
number that only the facts or the answer hold (``Ostsolford``, ``1032``), unless the parent's own
instruction states it (a multiple-choice question names its answer among the candidates; a task
names its product). A group description that fails the check is replaced by its id, or by its
position; an LLM reply that fails it is asked again, then falls back to the template (counted in
`DecomposeReport.llm_fallbacks`).

A subtask carries no definite answer: the part it keeps may not ask for the whole task's answer (the
site judge checks its facts alone). A subtask's difficulty level is its fact count: the parent's seed
label (`seed_difficulty_level`) and seed criteria describe the whole task, so a subtask does not
carry them either.

Exceptions (defined in `webgym_data.errors`)::

    WebgymDataError
     └── DecomposeError   (bad settings)
    LLMUnavailable (from webgym_data.llm) propagates: an endpoint that is down is not hidden.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from webgym_data.errors import DecomposeError
from webgym_data.llm import LLMReplyInvalid, gather_all, run_sync
from webgym_data.schema import MAX_INSTRUCTION_CHARS, FactGroup, Task, make_task_id

if TYPE_CHECKING:
    from webgym_data.llm import LLMClient

__all__ = [
    "DecomposeError",
    "DecomposeReport",
    "DecomposeSettings",
    "candidate_subsets",
    "decompose_task",
    "decompose_tasks",
    "instruction_leak",
    "rewrite_instruction",
    "template_instruction",
]

logger = logging.getLogger(__name__)

PROMPT_VERSION = "decompose-v2"
"""v2: the prompt names the groups kept and dropped, never their facts; replies are leak-checked."""
_INSTRUCTION_SCHEMA = {
    "type": "object",
    "properties": {"instruction": {"type": "string"}},
    "required": ["instruction"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class DecomposeSettings:
    """How tasks are decomposed into subtasks."""

    large_threshold: int = 3
    """A fact group with at least this many facts is *large*; every subtask holds one."""
    max_subtasks: int = 8
    """At most this many subtasks per parent task (0 disables decomposition)."""

    def __post_init__(self) -> None:
        if self.large_threshold < 1:
            raise DecomposeError(f"large_threshold: must be >= 1, got {self.large_threshold}")
        if self.max_subtasks < 0:
            raise DecomposeError(f"max_subtasks: must be >= 0, got {self.max_subtasks}")


@dataclass
class DecomposeReport:
    """What `decompose_tasks` produced."""

    subtasks: list[Task] = field(default_factory=list)
    parents: int = 0
    """Tasks that yielded at least one subtask."""
    llm_fallbacks: list[tuple[str, str]] = field(default_factory=list)
    """(subtask id, reason) for subtasks whose LLM rewrite failed validation; they use the template."""


def candidate_subsets(groups: Sequence[FactGroup], settings: DecomposeSettings = DecomposeSettings(),
                      ) -> list[tuple[int, ...]]:
    """Indices of the group subsets that become subtasks, in the order they are kept.

    Enumerates lazily (smallest subsets first, then lexicographically by group position) so a task
    with many groups costs only as much as the cap needs.
    """
    return list(itertools.islice(_valid_subsets(groups, settings.large_threshold), settings.max_subtasks))


def _valid_subsets(groups: Sequence[FactGroup], threshold: int) -> Iterator[tuple[int, ...]]:
    n = len(groups)
    large = [len(g.facts) >= threshold for g in groups]
    if n < 2 or not any(large):
        return
    for size in range(1, n):
        for subset in itertools.combinations(range(n), size):
            if any(large[i] for i in subset):
                yield subset


def template_instruction(parent: Task, groups: Sequence[FactGroup]) -> str:
    """A deterministic instruction that asks only for `groups` of the parent task, by their
    descriptions (never their facts), at most `MAX_INSTRUCTION_CHARS` long (a long parent is quoted
    in part)."""
    return _template_instruction(parent, groups, _Grading.of(parent))


def _template_instruction(parent: Task, groups: Sequence[FactGroup], grading: _Grading) -> str:
    labels = [_label(parent, group, grading) for group in groups]
    text, said = _template(parent, labels)
    if grading.said(said):  # descriptions that only give something away together: name positions
        text, _ = _template(parent, [_position(parent, group) for group in groups])
    return text


_TEMPLATE_WORDS = ("part of the task", "do only the following and report what you find")
"""`_words` of the template's own text around the quoted instruction and the parts asked for."""


def _template(parent: Task, labels: Sequence[str]) -> tuple[str, str]:
    """The template instruction and its `_words`, put together from the words of its pieces (the
    template's own text parts them with quotes and colons, so no word spans two), so the parent's
    instruction is read once for all its subtasks."""
    asked = _shorten(" and ".join(labels), MAX_INSTRUCTION_CHARS // 2)
    quoted = _shorten(parent.task_name.rstrip(), MAX_INSTRUCTION_CHARS - len(asked) - 80)
    text = f"Part of the task \"{quoted}\": do only the following and report what you find: {asked}."
    pieces = (_TEMPLATE_WORDS[0], _words(quoted).strip(), _TEMPLATE_WORDS[1], _words(asked).strip())
    return text, f" {' '.join(piece for piece in pieces if piece)} "


def _label(parent: Task, group: FactGroup, grading: _Grading) -> str:
    """What `group` is called in an instruction: its description, else its id when the id is a
    name (``key_nodes``), else its position; the first that gives nothing away."""
    for name in (group.description.strip().rstrip("."), group.id.replace("_", " ").strip()):
        if re.search(r"[^\W\d_]", name) and not grading.leak(name):
            return name
    return _position(parent, group)


def _position(parent: Task, group: FactGroup) -> str:
    return f"part {parent.evaluator_reference.index(group) + 1} of the task's rubric"


_WORD = re.compile(r"[^\W_]+")
_OPENERS = frozenset(".!?:;([{\"“‘'-")
"""Characters after which a capitalised word opens a sentence or a quote (not a name by itself)."""


@lru_cache(maxsize=1 << 16)
def _words(text: str) -> str:
    """`text` casefolded, its words joined by single spaces and padded with one on each side, so
    that ``_words(a) in _words(b)`` asks whether `b` holds `a` as whole words."""
    return f" {' '.join(_WORD.findall(text.casefold()))} "


@lru_cache(maxsize=1 << 16)
def _names(text: str, *, every_capital: bool = False) -> frozenset[str]:
    """The words of `text` that name or count something, casefolded: numbers of two characters or
    more, and capitalised words that do not open a sentence (every one when `every_capital`).
    Cached, like `_words`."""
    found = set()
    for match in _WORD.finditer(text):
        word = match.group()
        if not word.isalpha():
            if len(word) > 1 and any(c.isdigit() for c in word):
                found.add(word.casefold())
        elif word[0].isupper():
            before = text[:match.start()].rstrip()
            if every_capital or (before and before[-1] not in _OPENERS):
                found.add(word.casefold())
    return frozenset(found)


@dataclass(frozen=True)
class _Grading:
    """What grades a task that its own instruction does not state."""

    phrases: tuple[tuple[str, str], ...]
    """(normal form, what it is) of each fact text and of the definite answer."""
    names: frozenset[str]
    """Names and numbers that only the facts or the definite answer hold."""

    @classmethod
    def of(cls, task: Task) -> _Grading:
        own = _words(task.task_name)
        facts = [fact for group in task.evaluator_reference for fact in group.facts]
        written = [(fact, f"the fact {fact!r}") for fact in facts]
        names = set().union(*(_names(fact) for fact in facts))
        if task.definite_answer.strip():
            written.append((task.definite_answer, f"the definite answer {task.definite_answer!r}"))
            names |= _names(task.definite_answer, every_capital=True)
        normal = [(_words(text), what) for text, what in written]
        phrases = tuple((words, what) for words, what in normal if words.strip() and words not in own)
        return cls(phrases, frozenset(n for n in names if f" {n} " not in own))

    def leak(self, text: str) -> str:
        """What `text` gives away (``""``: nothing)."""
        return self.said(_words(text))

    def said(self, said: str) -> str:
        """What a text whose `_words` are `said` gives away (``""``: nothing)."""
        for words, what in self.phrases:
            if words in said:
                return what
        found = sorted(n for n in self.names if f" {n} " in said)
        return f"{found[0]!r}, which only the rubric or the answer names" if found else ""


def instruction_leak(text: str, parent: Task) -> str:
    """What instruction `text`, written for `parent` or a part of it, gives away of `parent`'s
    grading that `parent`'s own instruction does not state: one of its fact texts, its definite
    answer, or a name or number only those hold (``""`` when nothing). Words are compared with case
    and punctuation ignored."""
    return _Grading.of(parent).leak(text)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(0, limit - 3)].rstrip() + "..."


def _subtask(parent: Task, subset: tuple[int, ...], instruction: str, source: str) -> Task:
    groups = tuple(parent.evaluator_reference[i] for i in subset)
    fields = {
        "task_id": make_task_id("subtask", parent.task_id, *(g.id for g in groups)),
        "task_name": instruction,
        "evaluator_reference": groups,
        # A subtask asks for part of the work; the parent's final answer no longer applies.
        "definite_answer": "",
        "difficulty": 0,
        "parent_task_id": parent.task_id,
        "instruction_source": source,
        "seed_criteria": (),
        "seed_difficulty_level": "",
    }
    facts = sum(len(g.facts) for g in groups)
    if type(parent) is Task and hasattr(parent, "__dict__") and facts and parent.rubric_source:
        # Fast path (a build makes ~100k subtasks): what `Task.__post_init__` would derive is
        # known here (the groups are a non-empty part of the parent's, so the difficulty is their
        # fact count and the rubric source stays the parent's), so the fields are copied as they
        # are, the same as `replace` at a fraction of the cost.
        copy = object.__new__(Task)
        copy.__dict__.update(parent.__dict__, **fields)
        copy.__dict__["difficulty"] = facts
        return copy
    return replace(parent, **fields)


def decompose_task(parent: Task, settings: DecomposeSettings = DecomposeSettings()) -> list[Task]:
    """The subtasks of `parent` with template instructions (none for a subtask or a small rubric)."""
    if parent.parent_task_id:
        return []
    subtasks = []
    grading = None
    for subset in candidate_subsets(parent.evaluator_reference, settings):
        grading = grading or _Grading.of(parent)
        groups = [parent.evaluator_reference[i] for i in subset]
        subtasks.append(_subtask(parent, subset, _template_instruction(parent, groups, grading), "template"))
    return subtasks


async def rewrite_instruction(parent: Task, groups: Sequence[FactGroup], client: LLMClient) -> str:
    """Ask the LLM for an instruction that asks only for `groups` (cached by the client).

    The prompt holds the parent's instruction and the names of the groups kept and dropped, never
    their facts; a reply that `instruction_leak` flags is asked again like any invalid reply. Raises
    `LLMReplyInvalid` when no valid reply comes back and `LLMUnavailable` when the endpoint is down.
    """
    grading = _Grading.of(parent)
    kept = [_label(parent, g, grading) for g in groups]
    dropped = [_label(parent, g, grading) for g in parent.evaluator_reference if g not in groups]
    messages = [
        {"role": "system", "content": (
            "You rewrite web-task instructions. Given an original task and the names of the parts of "
            "it to keep, write one self-contained instruction, in the same style and language, that "
            "asks only for the kept parts, on the same website. Do not ask for the dropped parts. "
            "State no value, name or answer that the original task does not state: the agent is to "
            'find them. Reply with JSON {"instruction": "..."}.')},
        {"role": "user", "content": (
            f"Website: {parent.website}\nOriginal task: {parent.task_name}\n"
            f"Parts to keep: {json.dumps(kept, ensure_ascii=False)}\n"
            f"Parts to drop: {json.dumps(dropped, ensure_ascii=False)}")},
    ]

    def validate(reply: Any) -> str:
        text = reply.get("instruction") if isinstance(reply, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ValueError("'instruction' must be a non-empty string")
        text = " ".join(text.split())
        if text == parent.task_name:
            raise ValueError("the rewritten instruction equals the original one")
        if len(text) > MAX_INSTRUCTION_CHARS:
            raise ValueError(f"the instruction is longer than {MAX_INSTRUCTION_CHARS} characters")
        leak = grading.leak(text)
        if leak:
            raise ValueError(f"the instruction gives away {leak}")
        return text

    return await client.complete_json(
        purpose="decompose", prompt_version=PROMPT_VERSION, messages=messages,
        schema=_INSTRUCTION_SCHEMA, validate=validate,
        cache_key=(parent.task_name, parent.website, *(g.id for g in groups), *kept, "|", *dropped),
    )


def decompose_tasks(tasks: Sequence[Task], settings: DecomposeSettings = DecomposeSettings(),
                    client: LLMClient | None = None, *, progress: Any = None,
                    llm_progress: bool = False) -> DecomposeReport:
    """Decompose every seed task; returns only the new subtasks (parents are unchanged).

    `progress` is an optional callable ``progress(n_done)`` for a progress bar over the tasks;
    `llm_progress` shows a bar over the LLM rewrites.
    """
    report = DecomposeReport()
    if settings.max_subtasks == 0:
        return report
    for done, parent in enumerate(tasks, 1):
        # Most tasks have one group: skip them without building the subset generator.
        subtasks = decompose_task(parent, settings) if len(parent.evaluator_reference) > 1 else ()
        if subtasks:
            report.parents += 1
            report.subtasks.extend(subtasks)
        if progress is not None and done % 10_000 == 0:
            progress(10_000)
    if progress is not None:
        progress(len(tasks) % 10_000)
    if client is not None and report.subtasks:
        report.subtasks = run_sync(_rewrite_all(report, tasks, client, llm_progress), client)
    return report


async def _rewrite_all(report: DecomposeReport, tasks: Sequence[Task], client: LLMClient,
                       progress: bool) -> list[Task]:
    parents = {t.task_id: t for t in tasks}

    async def one(subtask: Task) -> Task:
        parent = parents[subtask.parent_task_id]
        try:
            text = await rewrite_instruction(parent, subtask.evaluator_reference, client)
        except LLMReplyInvalid as exc:
            # The template is a correct (if plainer) instruction: keep the subtask, say so.
            report.llm_fallbacks.append((subtask.task_id, str(exc)))
            return subtask
        return replace(subtask, task_name=text, instruction_source="llm")

    return await gather_all([one(s) for s in report.subtasks], label="subtask instructions",
                            progress=progress)
