"""Rubric generation: ask an LLM for the fact groups a judge checks for a task.

A rubric is a list of fact groups ``{id, description, facts: [str]}`` (see `webgym_data.schema`);
the task's difficulty then follows from its fact count. Requests go concurrently through one
`LLMClient` (cached on disk, so a rerun costs nothing); every reply is validated.

Which tasks are asked for (`wants_rubric`) is decided by the task's rubric alone, never by its kind,
and by the mode (`RUBRIC_MODES`):

- ``all`` (the default, the published method): every seed task whose rubric is not already an
  LLM's or given as a rubric: tasks without one, and tasks whose rubric an importer read from the
  seed's own criteria (``rubric_source == "seed"``: InSTA-v3 criteria as one group, Mind2Web-Live
  key nodes as one group, flattened Mind2Web-2 trees, DeepShop attributes), so that every rubric
  follows the same fact-group rules and decomposes the same way. The seed's criteria
  (`Task.seed_criteria`) go into the prompt as reference material and stay on the task.
- ``missing``: only tasks without a rubric.

A rubric that came with the row (``rubric_source == "given"``: a published or user-made task file,
the MiniWoB++ rubric "the environment reports success") and subtasks (their rubric is part of their
parent's) are never asked for. A task whose replies stay invalid keeps its seed rubric when it has
one (`RubricReport.kept_seed`); without one it is reported in `RubricReport.failed` and left out of
`RubricReport.tasks`, never kept half-done.

``webgym-data rubrics SOURCE --out FILE`` does this for a task file or folder (read by
`webgym_data.loading.load_tasks`) and writes JSONL.

Errors: the `webgym_data.llm` tree (`LLMUnavailable` and `LLMRequestRejected` stop the whole run:
they are infrastructure failures; `LLMReplyInvalid` only fails its task); `RubricError` (from
`webgym_data.schema`, a ValueError) from `parse_rubric`; `RubricsError` (a ValueError) for settings
that cannot work; those of `webgym_data.loading` for SOURCE.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import SettingsCommand, load_settings, settings_options
from webgym_data.errors import RubricError, RubricsError, WebgymDataError
from webgym_data.llm import LLMClient, LLMReplyInvalid, LLMSettings, Usage, gather_all, run_sync
from webgym_data.loading import load_tasks, write_tasks
from webgym_data.schema import FactGroup, Task

__all__ = [
    "MAX_FACTS_PER_GROUP",
    "MAX_GROUPS",
    "RUBRIC_MODES",
    "RUBRIC_PROMPT_VERSION",
    "RubricMode",
    "RubricReport",
    "RubricsError",
    "RubricsSettings",
    "agenerate_rubrics",
    "generate_rubrics",
    "parse_rubric",
    "rubric_messages",
    "rubrics_command",
    "run_rubrics",
    "wants_rubric",
]

logger = logging.getLogger(__name__)

# Bump when the prompt or the schema changes: it is part of the cache key, so old replies are not reused.
RUBRIC_PROMPT_VERSION = "rubric-v2"
MAX_GROUPS = 8
MAX_FACTS_PER_GROUP = 10
MAX_FACT_CHARS = 500
MAX_CRITERIA_IN_PROMPT = 40
"""Seed criteria shown in one prompt at most (a Mind2Web-2 tree can have many more leaves)."""

RubricMode = Literal["missing", "all"]
RUBRIC_MODES: tuple[str, ...] = ("missing", "all")
"""``all``: LLM rubrics for every task whose rubric is not an LLM's or given (the published method);
``missing``: only for tasks without a rubric."""

_SYSTEM_PROMPT = """\
You write grading rubrics for web-browsing tasks. An agent will do the task in a real browser; a judge \
then checks its screenshots and final answer against your rubric.

Split what a complete, correct result must show into fact groups. Each group has:
- "id": a short unique identifier ("1", "2", ...);
- "description": a few words naming the part of the task the group covers (e.g. "Item Information");
- "facts": one or more atomic, checkable statements that must hold, each verifiable from what the agent saw \
(screenshots, visited URLs) or its final answer (e.g. "The price of each listed item is shown").

Rules: cover every requirement of the task and nothing more; one fact per requirement; group facts that \
belong to the same sub-goal; at most {max_groups} groups and {max_facts} facts per group; write facts as \
conditions, not as instructions. When the task asks for several things (an item and its price, a \
filter and a sort order, a search and a comparison), give each its own group.

The task may come with reference criteria from the benchmark it was taken from. Use them as material: \
they name values, pages and checks the task's authors cared about, but they may be incomplete, merged \
into one line, redundant, or malformed. Follow the rules above, not their layout; the task text decides \
what is required. Reply with JSON only: {{"fact_groups": [...]}}."""

_USER_PROMPT = "Website: {website}\nTask: {task}"
_CRITERIA_PROMPT = "\nReference criteria from the seed benchmark:\n{criteria}"

RUBRIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "fact_groups": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "description": {"type": "string"},
                    "facts": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "description", "facts"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["fact_groups"],
    "additionalProperties": False,
}


@dataclass
class RubricReport:
    """The outcome of one `generate_rubrics` run."""

    tasks: list[Task]
    """Every input task except the failed ones, in input order; generated rubrics filled in."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """``(task_id, reason)`` for each task without a rubric whose replies stayed invalid (left out)."""
    kept_seed: list[tuple[str, str]] = field(default_factory=list)
    """``(task_id, reason)`` for each task that kept its seed rubric after invalid replies."""
    usage: Usage = field(default_factory=Usage)
    """Requests, cache hits, tokens and cost spent by this run."""
    generated: int = 0
    """How many tasks got a new rubric (from the LLM or its cache)."""
    replaced: int = 0
    """Of those, how many had a rubric read from their seed's criteria (mode ``all``)."""


def wants_rubric(task: Task, mode: RubricMode = "all") -> bool:
    """Whether `task` is asked for an LLM rubric in `mode` (see the module docstring)."""
    if mode not in RUBRIC_MODES:
        raise ValueError(f"mode: must be one of {', '.join(RUBRIC_MODES)}, got {mode!r}")
    if task.needs_rubric:
        return True
    return mode == "all" and task.rubric_source == "seed" and not task.parent_task_id


def rubric_messages(task: Task) -> list[dict]:
    """The chat messages that ask for `task`'s rubric: the task, its website and, when the seed gave
    any, its criteria (at most `MAX_CRITERIA_IN_PROMPT`)."""
    system = _SYSTEM_PROMPT.format(max_groups=MAX_GROUPS, max_facts=MAX_FACTS_PER_GROUP)
    user = _USER_PROMPT.format(website=task.website, task=task.task_name)
    if task.seed_criteria:
        shown = task.seed_criteria[:MAX_CRITERIA_IN_PROMPT]
        lines = [f"- {criterion}" for criterion in shown]
        if len(task.seed_criteria) > len(shown):
            lines.append(f"- ... and {len(task.seed_criteria) - len(shown)} more")
        user += _CRITERIA_PROMPT.format(criteria="\n".join(lines))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _storable(text: str) -> bool:
    """Encodable as UTF-8 (JSON's ``"\\ud800"`` decodes to a lone surrogate, which no file can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_rubric(reply: Any) -> tuple[FactGroup, ...]:
    """Validate a rubric reply and return its fact groups; `RubricError` (a ValueError) says what is
    wrong, and nothing else is raised, whatever `reply` is."""
    if isinstance(reply, dict):
        if "fact_groups" not in reply:
            raise RubricError("missing 'fact_groups'")
        reply = reply["fact_groups"]
    if not isinstance(reply, list):
        raise RubricError(f"'fact_groups' must be a list, got {type(reply).__name__}")
    if not reply:
        raise RubricError("'fact_groups' is empty")
    if len(reply) > MAX_GROUPS:
        raise RubricError(f"{len(reply)} fact groups (at most {MAX_GROUPS})")
    groups: list[FactGroup] = []
    for position, item in enumerate(reply):
        if not isinstance(item, dict):
            raise RubricError(f"group {position} is not an object")
        group_id = item.get("id")
        if isinstance(group_id, int) and not isinstance(group_id, bool):
            try:
                group_id = str(group_id)
            except ValueError:  # more digits than Python converts to text
                raise RubricError(f"group {position}: 'id' is an integer too large to be an id") from None
        if not isinstance(group_id, str) or not group_id.strip() or not _storable(group_id):
            raise RubricError(f"group {position}: 'id' must be a non-empty string of valid Unicode")
        description = item.get("description")
        if not isinstance(description, str) or not description.strip() or not _storable(description):
            raise RubricError(f"group {position}: 'description' must be a non-empty string of valid Unicode")
        facts = item.get("facts")
        if not isinstance(facts, list) or not facts:
            raise RubricError(f"group {position}: 'facts' must be a non-empty list")
        if len(facts) > MAX_FACTS_PER_GROUP:
            raise RubricError(f"group {position}: {len(facts)} facts (at most {MAX_FACTS_PER_GROUP})")
        for index, fact in enumerate(facts):
            if not isinstance(fact, str) or not fact.strip() or not _storable(fact):
                raise RubricError(f"group {position}: fact {index} must be a non-empty string of valid "
                                  "Unicode")
            if len(fact) > MAX_FACT_CHARS:
                raise RubricError(f"group {position}: fact {index} is longer than {MAX_FACT_CHARS} "
                                  "characters")
        groups.append(FactGroup(id=group_id.strip(), description=" ".join(description.split()),
                                facts=tuple(" ".join(f.split()) for f in facts)))
    ids = [g.id for g in groups]
    if len(set(ids)) != len(ids):
        raise RubricError(f"fact group ids are not unique: {ids}")
    return tuple(groups)


async def agenerate_rubrics(tasks: Iterable[Task], client: LLMClient, *, mode: RubricMode = "all",
                            progress: bool = True) -> RubricReport:
    """Async `generate_rubrics`."""
    tasks = list(tasks)
    before = client.usage.copy()
    todo = [i for i, task in enumerate(tasks) if wants_rubric(task, mode)]
    results: dict[int, tuple[FactGroup, ...] | str] = {}
    # Tasks with the same text and seed criteria on the same site share one request (and one
    # cache entry).
    by_key: dict[tuple[str, ...], list[int]] = {}
    for index in todo:
        task = tasks[index]
        by_key.setdefault((task.task_name, task.website, *task.seed_criteria), []).append(index)

    async def one(key: tuple[str, ...], indices: list[int]) -> None:
        try:
            outcome: tuple[FactGroup, ...] | str = await client.complete_json(
                purpose="rubric", prompt_version=RUBRIC_PROMPT_VERSION,
                messages=rubric_messages(tasks[indices[0]]), schema=RUBRIC_SCHEMA, validate=parse_rubric,
                cache_key=key)
        except LLMReplyInvalid as exc:
            outcome = exc.reason
        for index in indices:
            results[index] = outcome

    await gather_all([one(key, indices) for key, indices in by_key.items()], label="rubrics",
                     progress=progress)

    report = RubricReport(tasks=[])
    for index, task in enumerate(tasks):
        outcome = results.get(index)
        if outcome is None:
            report.tasks.append(task)
        elif isinstance(outcome, str):
            if task.needs_rubric:
                report.failed.append((task.task_id, outcome))
            else:  # an invalid reply does not take a usable seed rubric away
                report.kept_seed.append((task.task_id, outcome))
                report.tasks.append(task)
        else:
            report.replaced += not task.needs_rubric
            report.tasks.append(replace(task, evaluator_reference=outcome, rubric_source="llm"))
    if report.failed or report.kept_seed:
        logger.warning("%d of %d tasks got no valid rubric (%d of them keep their seed's)",
                       len(report.failed) + len(report.kept_seed), len(todo), len(report.kept_seed))
    report.usage = client.usage - before
    report.generated = len(todo) - len(report.failed) - len(report.kept_seed)
    return report


def generate_rubrics(tasks: Iterable[Task], client: LLMClient, *, mode: RubricMode = "all",
                     progress: bool = True) -> RubricReport:
    """Generate LLM rubrics for the tasks `mode` selects (from a synchronous caller; see the module
    docstring).

    Raises `LLMUnavailable` / `LLMRequestRejected` (one error, the other requests cancelled) when
    the endpoint is down or refuses; a task whose replies stay invalid keeps its seed rubric
    (`kept_seed`) or, without one, goes to `failed`.
    """
    return run_sync(agenerate_rubrics(tasks, client, mode=mode, progress=progress), client,
                    "agenerate_rubrics")


# -- CLI -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RubricsSettings:
    """Settings of ``webgym-data rubrics``."""

    source: Path | None = field(default=None, metadata={"cli": False})
    """Task file or folder to read (the SOURCE argument)."""
    out: Path | None = None
    """JSONL file to write the tasks to (required; failed tasks are left out)."""
    split: str | None = None
    """Split of a task-set folder to read; unset reads every split."""
    rubrics: RubricMode = "all"
    """Which tasks get an LLM rubric: all (also those whose rubric was read from the seed's
    criteria, kept as reference; the published method) or missing (only tasks without one)."""
    llm: LLMSettings = field(default_factory=LLMSettings)
    """The OpenAI-compatible LLM that writes the rubrics (base URL and model required)."""
    progress: bool = True
    """Show a progress bar on stderr."""

    def __post_init__(self) -> None:
        if self.source is None:
            raise RubricsError("source: required: a task file or folder")
        if self.out is None:
            raise RubricsError("out: required: the JSONL file to write")
        if not self.llm.configured:
            raise RubricsError("llm.base_url: required (with llm.model), e.g. http://127.0.0.1:8000/v1")


def run_rubrics(settings: RubricsSettings) -> tuple[list[Task], RubricReport]:
    """Read the tasks of `settings.source`, generate the missing rubrics, write `settings.out`;
    returns the tasks read and the report."""
    tasks = load_tasks(settings.source, split=settings.split)  # type: ignore[arg-type]
    report = generate_rubrics(tasks, LLMClient(settings.llm), mode=settings.rubrics,
                              progress=settings.progress)
    write_tasks(report.tasks, settings.out)  # type: ignore[arg-type]
    return tasks, report


@click.command("rubrics", cls=SettingsCommand)
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@settings_options(RubricsSettings)
def rubrics_command(source: Path, config: str | None, **flags: Any) -> None:
    """Generate fact-group rubrics for the tasks in SOURCE.

    SOURCE is a JSONL or parquet file of task rows (e.g. from `webgym-data import`) or a task-set
    folder. With --rubrics all (the default) every task whose rubric was read from its seed's
    criteria gets an LLM rubric too (the criteria go into the prompt and stay in seed_criteria);
    --rubrics missing asks only for tasks without one. Replies are cached, so a rerun with the same
    cache folder sends no requests.

    \b
    Example:
      vllm serve Qwen/Qwen3-8B --port 8000 &
      webgym-data rubrics tasks.jsonl --out tasks.rubrics.jsonl \\
          --llm-base-url http://127.0.0.1:8000/v1 --llm-model Qwen/Qwen3-8B --llm-max-concurrency 32
    """
    try:
        settings = load_settings(RubricsSettings, config, flags, source=str(source))
        tasks, report = run_rubrics(settings)
    except (SettingsError, WebgymDataError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{len(tasks)} tasks read, {report.generated} rubrics generated, {len(report.failed)} failed "
               f"({report.replaced} replaced a seed rubric, {len(report.kept_seed)} kept theirs after "
               f"invalid replies); wrote {len(report.tasks)} tasks to {settings.out}")
    click.echo(f"usage: {report.usage.summary()}")
    for task_id, reason in report.failed:
        click.echo(f"failed {task_id}: {reason}", err=True)
    for task_id, reason in report.kept_seed:
        click.echo(f"kept the seed rubric of {task_id}: {reason}", err=True)
    if report.failed:
        raise SystemExit(1)
