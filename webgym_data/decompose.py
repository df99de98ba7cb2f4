"""Decomposition: easier subtasks from a task's rubric.

A task with at least two fact groups, at least one of them *large* (``>= large_threshold`` facts),
yields one subtask per proper, non-empty subset of its groups that holds a large group. The
subtask's rubric is that subset, its difficulty their fact count (``Task`` derives it), its
``parent_task_id`` the parent's id and its ``task_id`` a stable hash of the parent id and the group
ids. At most ``max_subtasks`` subsets are kept per task, chosen deterministically: smaller subsets
first (they are the easier tasks decomposition is for), then in the parent's group order.

The subtask instruction asks only for its groups. With an `LLMClient` it is rewritten by the LLM
(purpose ``"decompose"``, cached on disk by the client) and the row says ``instruction_source =
"llm"``; without one, or when the LLM's reply stays invalid after retries, a deterministic template
is used (``"template"``). Either stays within `MAX_INSTRUCTION_CHARS`.

A subtask's difficulty level is its fact count: the parent's seed label (`seed_difficulty_level`)
and seed criteria describe the whole task, so a subtask does not carry them.

Exceptions (defined in `webgym_data.errors`)::

    WebgymDataError
     └── DecomposeError   (bad settings)
    LLMUnavailable (from webgym_data.llm) propagates: an endpoint that is down is not hidden.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from webgym_data.errors import DecomposeError
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
    "rewrite_instruction",
    "template_instruction",
]

logger = logging.getLogger(__name__)

PROMPT_VERSION = "decompose-v1"
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
    """A deterministic instruction that asks only for `groups` of the parent task, at most
    `MAX_INSTRUCTION_CHARS` long (a long parent is quoted in part, long facts give way to the groups'
    descriptions)."""
    parts = []
    for group in groups:
        facts = "; ".join(f.rstrip(".") for f in group.facts)
        parts.append(f"{group.description.rstrip('.')} ({facts})" if group.description else facts)
    asked = " and ".join(parts)
    if len(asked) > MAX_INSTRUCTION_CHARS // 2:
        asked = " and ".join(g.description.rstrip(".") or "; ".join(g.facts) for g in groups)
        asked = _shorten(asked, MAX_INSTRUCTION_CHARS // 2)
    quoted = _shorten(parent.task_name.rstrip(), MAX_INSTRUCTION_CHARS - len(asked) - 80)
    return f"Part of the task \"{quoted}\": do only the following and report what you find: {asked}."


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(0, limit - 3)].rstrip() + "..."


def _subtask(parent: Task, subset: tuple[int, ...], instruction: str, source: str) -> Task:
    groups = tuple(parent.evaluator_reference[i] for i in subset)
    return replace(
        parent,
        task_id=make_task_id("subtask", parent.task_id, *(g.id for g in groups)),
        task_name=instruction,
        evaluator_reference=groups,
        # A subtask asks for part of the work; the parent's final answer no longer applies.
        definite_answer="",
        difficulty=0,
        parent_task_id=parent.task_id,
        instruction_source=source,
        seed_criteria=(),
        seed_difficulty_level="",
    )


def decompose_task(parent: Task, settings: DecomposeSettings = DecomposeSettings()) -> list[Task]:
    """The subtasks of `parent` with template instructions (none for a subtask or a small rubric)."""
    if parent.parent_task_id:
        return []
    subtasks = []
    for subset in candidate_subsets(parent.evaluator_reference, settings):
        groups = [parent.evaluator_reference[i] for i in subset]
        subtasks.append(_subtask(parent, subset, template_instruction(parent, groups), "template"))
    return subtasks


async def rewrite_instruction(parent: Task, groups: Sequence[FactGroup], client: LLMClient) -> str:
    """Ask the LLM for an instruction that asks only for `groups` (cached by the client).

    Raises `LLMReplyInvalid` when no valid reply comes back and `LLMUnavailable` when the endpoint
    is down.
    """
    rubric = [{"description": g.description, "facts": list(g.facts)} for g in groups]
    dropped = [g.description for g in parent.evaluator_reference if g not in groups]
    messages = [
        {"role": "system", "content": (
            "You rewrite web-task instructions. Given an original task and the part of its rubric "
            "to keep, write one self-contained instruction, in the same style and language, that "
            "asks only for the kept part, on the same website. Do not ask for the dropped parts. "
            'Reply with JSON {"instruction": "..."}.')},
        {"role": "user", "content": (
            f"Website: {parent.website}\nOriginal task: {parent.task_name}\n"
            f"Rubric groups to keep: {rubric}\nRubric groups to drop: {dropped}")},
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
        return text

    return await client.complete_json(
        purpose="decompose", prompt_version=PROMPT_VERSION, messages=messages,
        schema=_INSTRUCTION_SCHEMA, validate=validate,
        cache_key=(parent.task_name, parent.website, *(g.id for g in groups)),
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
        from webgym_data.llm import run_sync

        report.subtasks = run_sync(_rewrite_all(report, tasks, client, llm_progress), client)
    return report


async def _rewrite_all(report: DecomposeReport, tasks: Sequence[Task], client: LLMClient,
                       progress: bool) -> list[Task]:
    from webgym_data.llm import LLMReplyInvalid, gather_all

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
