"""Rubric generation: ask an LLM for the fact groups a judge checks for a task.

A rubric is a list of fact groups ``{id, description, facts: [str]}`` (see `webgym_data.schema`);
the task's difficulty then follows from its fact count. Only tasks without a rubric are asked for,
concurrently through one `LLMClient` (cached on disk, so a rerun costs nothing). Every reply is
validated; a task whose replies stay invalid is reported in `RubricReport.failed` and left out of
`RubricReport.tasks`, never kept half-done.

Errors: the `webgym_data.llm` tree (`LLMUnavailable` and `LLMRequestRejected` stop the whole run:
they are infrastructure failures; `LLMReplyInvalid` only fails its task).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from webgym_data.llm import LLMClient, LLMReplyInvalid, LLMSettings, Usage, gather_all, run_sync
from webgym_data.schema import FactGroup, Task, TaskValidationError, WebgymDataError

__all__ = [
    "MAX_FACTS_PER_GROUP",
    "MAX_GROUPS",
    "RUBRIC_PROMPT_VERSION",
    "RubricReport",
    "agenerate_rubrics",
    "generate_rubrics",
    "parse_rubric",
    "read_tasks",
    "rubric_messages",
    "rubrics_command",
    "write_tasks",
]

logger = logging.getLogger(__name__)

# Bump when the prompt or the schema changes: it is part of the cache key, so old replies are not reused.
RUBRIC_PROMPT_VERSION = "rubric-v1"
MAX_GROUPS = 8
MAX_FACTS_PER_GROUP = 10
MAX_FACT_CHARS = 500

_SYSTEM_PROMPT = """\
You write grading rubrics for web-browsing tasks. An agent will do the task in a real browser; a judge \
then checks its screenshots and final answer against your rubric.

Split what a complete, correct result must show into fact groups. Each group has:
- "id": a short unique identifier ("1", "2", ...);
- "description": a few words naming the part of the task the group covers (e.g. "Item Information");
- "facts": one or more atomic, checkable statements that must hold, each verifiable from the screenshots \
(e.g. "The price of each listed item is shown").

Rules: cover every requirement of the task and nothing more; one fact per requirement; group facts that \
belong to the same sub-goal; at most {max_groups} groups and {max_facts} facts per group; write facts as \
conditions, not as instructions. Reply with JSON only: {{"fact_groups": [...]}}."""

_USER_PROMPT = "Website: {website}\nTask: {task}"

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
    """``(task_id, reason)`` for each task whose replies stayed invalid."""
    usage: Usage = field(default_factory=Usage)
    """Requests, cache hits, tokens and cost spent by this run."""
    generated: int = 0
    """How many tasks got a new rubric (from the LLM or its cache)."""


def rubric_messages(task: Task) -> list[dict]:
    """The chat messages that ask for `task`'s rubric."""
    system = _SYSTEM_PROMPT.format(max_groups=MAX_GROUPS, max_facts=MAX_FACTS_PER_GROUP)
    return [{"role": "system", "content": system},
            {"role": "user", "content": _USER_PROMPT.format(website=task.website, task=task.task_name)}]


def parse_rubric(reply: Any) -> tuple[FactGroup, ...]:
    """Validate a rubric reply and return its fact groups; ValueError says what is wrong."""
    if isinstance(reply, dict):
        if "fact_groups" not in reply:
            raise ValueError("missing 'fact_groups'")
        reply = reply["fact_groups"]
    if not isinstance(reply, list):
        raise ValueError(f"'fact_groups' must be a list, got {type(reply).__name__}")
    if not reply:
        raise ValueError("'fact_groups' is empty")
    if len(reply) > MAX_GROUPS:
        raise ValueError(f"{len(reply)} fact groups (at most {MAX_GROUPS})")
    groups: list[FactGroup] = []
    for position, item in enumerate(reply):
        if not isinstance(item, dict):
            raise ValueError(f"group {position} is not an object")
        group_id = item.get("id")
        if isinstance(group_id, int) and not isinstance(group_id, bool):
            group_id = str(group_id)
        if not isinstance(group_id, str) or not group_id.strip():
            raise ValueError(f"group {position}: 'id' must be a non-empty string")
        description = item.get("description")
        if not isinstance(description, str) or not description.strip():
            raise ValueError(f"group {position}: 'description' must be a non-empty string")
        facts = item.get("facts")
        if not isinstance(facts, list) or not facts:
            raise ValueError(f"group {position}: 'facts' must be a non-empty list")
        if len(facts) > MAX_FACTS_PER_GROUP:
            raise ValueError(f"group {position}: {len(facts)} facts (at most {MAX_FACTS_PER_GROUP})")
        for index, fact in enumerate(facts):
            if not isinstance(fact, str) or not fact.strip():
                raise ValueError(f"group {position}: fact {index} must be a non-empty string")
            if len(fact) > MAX_FACT_CHARS:
                raise ValueError(f"group {position}: fact {index} is longer than {MAX_FACT_CHARS} characters")
        groups.append(FactGroup(id=group_id.strip(), description=" ".join(description.split()),
                                facts=tuple(" ".join(f.split()) for f in facts)))
    ids = [g.id for g in groups]
    if len(set(ids)) != len(ids):
        raise ValueError(f"fact group ids are not unique: {ids}")
    return tuple(groups)


def _needs_rubric(task: Task) -> bool:
    # MiniWoB-style tasks are scored by their page, not by a rubric.
    return not task.evaluator_reference and task.environment == "web"


async def agenerate_rubrics(tasks: Iterable[Task], client: LLMClient, *,
                            progress: bool = True) -> RubricReport:
    """Async `generate_rubrics`."""
    tasks = list(tasks)
    before = client.usage.copy()
    todo = [i for i, task in enumerate(tasks) if _needs_rubric(task)]
    results: dict[int, tuple[FactGroup, ...] | str] = {}
    # Tasks with the same text on the same site share one request (and one cache entry).
    by_key: dict[tuple[str, str], list[int]] = {}
    for index in todo:
        by_key.setdefault((tasks[index].task_name, tasks[index].website), []).append(index)

    async def one(key: tuple[str, str], indices: list[int]) -> None:
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

    kept: list[Task] = []
    failed: list[tuple[str, str]] = []
    for index, task in enumerate(tasks):
        outcome = results.get(index)
        if outcome is None:
            kept.append(task)
        elif isinstance(outcome, str):
            failed.append((task.task_id, outcome))
        else:
            kept.append(replace(task, evaluator_reference=outcome))
    if failed:
        logger.warning("%d of %d tasks got no valid rubric", len(failed), len(todo))
    return RubricReport(tasks=kept, failed=failed, usage=client.usage - before,
                        generated=len(todo) - len(failed))


def generate_rubrics(tasks: Iterable[Task], client: LLMClient, *, progress: bool = True) -> RubricReport:
    """Generate rubrics for the tasks that have none (from a synchronous caller).

    Raises `LLMUnavailable` / `LLMRequestRejected` (one error, the other requests cancelled) when
    the endpoint is down or refuses; a task whose replies stay invalid goes to `failed`.
    """
    return run_sync(agenerate_rubrics(tasks, client, progress=progress), client, "agenerate_rubrics")


# -- CLI -------------------------------------------------------------------------------------------
def read_tasks(path: Path) -> list[Task]:
    """Tasks from a JSONL file of task rows or from a built dataset folder (all its splits)."""
    path = Path(path)
    if not path.exists():
        raise WebgymDataError(f"{path}: no such file or folder")
    tasks: list[Task] = []
    if path.is_dir():
        import datasets

        try:
            dataset = datasets.load_dataset(str(path))
        except Exception as exc:  # datasets raises many unrelated types for a folder it cannot read
            raise WebgymDataError(f"{path}: not a built task dataset ({type(exc).__name__}: {exc})") from None
        for split, rows in dataset.items():
            for index, row in enumerate(rows):
                tasks.append(Task.from_row(row, file=f"{path} [{split}]", row_index=index))
        return tasks
    with path.open(encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskValidationError(f"not JSON ({exc.msg})", file=str(path), row=index) from None
            tasks.append(Task.from_row(row, file=str(path), row_index=index))
    return tasks


def write_tasks(tasks: Sequence[Task], path: Path) -> None:
    """Write task rows as JSONL, atomically (a temp file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for task in tasks:
                handle.write(json.dumps(task.to_row(), ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "webgym" / "llm"


@click.command("rubrics")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="JSONL file to write the tasks to (failed tasks are left out).")
@click.option("--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.")
@click.option("--model", required=True, help="Model name at that endpoint.")
@click.option("--api-key-env", default=None,
              help="Environment variable holding the API key [default: OPENAI_API_KEY, else 'EMPTY'].")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True,
              help="Most requests in flight.")
@click.option("--max-retries", type=click.IntRange(min=0), default=3, show_default=True,
              help="Retries per task for errors and invalid replies.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Reply cache folder [default: $XDG_CACHE_HOME/webgym/llm].")
@click.option("--price-in", type=float, default=0.0, show_default=True, help="Price per 1k prompt tokens.")
@click.option("--price-out", type=float, default=0.0, show_default=True,
              help="Price per 1k completion tokens.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
def rubrics_command(source: Path, out: Path, base_url: str, model: str, api_key_env: str | None,
                    concurrency: int, max_retries: int, cache_dir: Path | None, price_in: float,
                    price_out: float, no_progress: bool) -> None:
    """Generate fact-group rubrics for the tasks in SOURCE that have none.

    SOURCE is a JSONL file of task rows (e.g. from `webgym-data import`) or a built dataset folder.
    Replies are cached, so a rerun with the same cache folder sends no requests.

    \b
    Example:
      vllm serve Qwen/Qwen3-8B --port 8000 &
      webgym-data rubrics tasks.jsonl --out tasks.rubrics.jsonl \\
          --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B --concurrency 32
    """
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise click.UsageError(f"--api-key-env {api_key_env}: that environment variable is not set")
    try:
        tasks = read_tasks(source)
        settings = LLMSettings(base_url=base_url, model=model, api_key=api_key,
                               max_concurrency=concurrency, max_retries=max_retries,
                               cache_dir=cache_dir or _default_cache_dir(),
                               price_per_1k_input=price_in, price_per_1k_output=price_out)
        report = generate_rubrics(tasks, LLMClient(settings), progress=not no_progress)
    except (WebgymDataError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    write_tasks(report.tasks, out)
    click.echo(f"{len(tasks)} tasks read, {report.generated} rubrics generated, "
               f"{len(report.failed)} failed; wrote {len(report.tasks)} tasks to {out}")
    click.echo(f"usage: {report.usage.summary()}")
    for task_id, reason in report.failed:
        click.echo(f"failed {task_id}: {reason}", err=True)
    if report.failed:
        raise SystemExit(1)
