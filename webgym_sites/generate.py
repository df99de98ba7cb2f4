"""Every site's generated tasks in one place: `site_tasks` draws them, `expert_plan` plans them.

    site_tasks(per_site=100, seed=0)        -> tasks of every site (shop, reference, travel), task rows
    expert_plan(task)                       -> the scripted expert's moves for one of them

`SITES` maps each site (the ``site`` of a task's ``source.metadata``, the argument of its
``site:<name>`` environment) to its generator and its planner; a task's own truth (``params``)
stays in its metadata, where only the expert and the tests read it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from webgym_data.schema import DIFFICULTY_LEVELS, Task
from webgym_sites import reference_tasks, shop_tasks, travel_tasks
from webgym_sites.drawing import DEFAULT_BASE_URL
from webgym_sites.plans import Answer, Move

__all__ = ["SITES", "SiteGenerator", "expert_plan", "site_tasks", "site_tasks_command", "task_params"]


@dataclass(frozen=True)
class SiteGenerator:
    """One site's task generator (``(count, seed=, base_url=) -> tasks``) and expert planner."""

    tasks: Callable[..., list[Task]]
    plan: Callable[[dict[str, Any], Task], list[Move]]


SITES: dict[str, SiteGenerator] = {
    "shop": SiteGenerator(shop_tasks.shop_tasks, shop_tasks.expert_moves),
    "reference": SiteGenerator(reference_tasks.reference_tasks, reference_tasks.expert_moves),
    "travel": SiteGenerator(travel_tasks.travel_tasks, travel_tasks.expert_moves),
}


def site_tasks(per_site: int, *, seed: int = 0, base_url: str = DEFAULT_BASE_URL,
               sites: tuple[str, ...] = ()) -> list[Task]:
    """`per_site` tasks of each site in `sites` (default: all), drawn with `seed`, for the sites
    served with their default seeds at `base_url`."""
    unknown = sorted(set(sites) - set(SITES))
    if unknown:
        raise ValueError(f"sites: unknown {', '.join(unknown)} (known: {', '.join(SITES)})")
    return [task for name in (sites or tuple(SITES))
            for task in SITES[name].tasks(per_site, seed=seed, base_url=base_url)]


def task_params(task: Task) -> tuple[str, dict[str, Any]]:
    """The site and the ``params`` a generated site task keeps in ``source.metadata``."""
    try:
        metadata = json.loads(task.source.metadata or "{}")
    except ValueError:
        metadata = {}
    site = metadata.get("site") if isinstance(metadata, dict) else None
    if not isinstance(site, str) or not isinstance(metadata.get("params"), dict):
        raise ValueError(f"task {task.task_id}: not a generated site task (no site and params in "
                         "source.metadata)")
    return site, metadata["params"]


def _answer_texts(check: dict[str, Any]) -> list[str]:
    """What an answer check asks the answer to say, as the site writes it."""
    if check.get("type") == "answer_value":
        return [check["value"]]
    if check.get("type") == "answer_number":
        return [str(check["value"])]
    return list(check.get("texts", [])) if check.get("type") == "answer" else []


def expert_plan(task: Task) -> list[Move]:
    """The scripted expert's moves for a generated site task (ValueError when no site plans it).

    A subtask of decomposition keeps its parent's truth: the expert does the parent's work, and
    answers with every value the parent's answer checks ask for (a subtask has no definite
    answer)."""
    site, params = task_params(task)
    generator = SITES.get(site)
    if generator is None:
        raise ValueError(f"task {task.task_id}: no expert planner for the site {site!r} "
                         f"(known: {', '.join(SITES)})")
    moves = generator.plan(params, task)
    if task.parent_task_id and moves and isinstance(moves[-1], Answer):
        checks = json.loads(task.source.metadata or "{}").get("checks") or []
        texts = [text for check in checks for text in _answer_texts(check)]
        moves[-1] = Answer("; ".join(texts) or moves[-1].text)
    return moves


@click.command("site-tasks")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSONL file of task rows to write (its folder is created).")
@click.option("--per-site", default=100, show_default=True, type=click.IntRange(min=1),
              help="Tasks per site (about a third each easy, medium, hard).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the draw.")
@click.option("--sites", "names", default=",".join(SITES), show_default=True,
              help="Comma-separated sites to draw from.")
@click.option("--sites-url", default=DEFAULT_BASE_URL, show_default=True,
              help="Where serve-sites will listen; the start URLs are under it (a run's --sites-url "
                   "moves them to another host and port).")
def site_tasks_command(out: Path, per_site: int, seed: int, names: str, sites_url: str) -> None:
    """Write generated tasks of the local sites as task rows (JSONL), for `webgym-data build`.

    Each row carries its rubric, its definite answer (information-seeking tasks), a
    site:<name> environment and, in source.metadata, one machine check per fact and the
    truth the scripted expert plays (never shown to an agent). The sites are served with
    their default seeds by `webgym-rollout serve-sites`.

    \b
    Example:
      webgym-rollout site-tasks --out seeds/local_sites/tasks.jsonl --per-site 100
      webgym-data build --seeds seeds --out out/tasks      # or --importer local_sites=FILE
      webgym-rollout serve-sites --port 8400 --truth-port 8401 &
      webgym-rollout run --tasks out/tasks --servers http://127.0.0.1:8300 \\
          --sites-url http://127.0.0.1:8400 --policy expert --judge site \\
          --truth-url http://127.0.0.1:8401 --out out/expert
    """
    chosen = tuple(name.strip() for name in names.split(",") if name.strip())
    try:
        tasks = site_tasks(per_site, seed=seed, base_url=sites_url, sites=chosen)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sites") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with partial.open("w", encoding="utf-8") as file:
        for task in tasks:
            file.write(json.dumps(task.to_row(), ensure_ascii=False) + "\n")
    partial.replace(out)
    levels = Counter(task.difficulty_level for task in tasks)
    shown = ", ".join(f"{levels[name]} {name}" for name in (*DIFFICULTY_LEVELS, "unknown") if levels[name])
    click.echo(f"{len(tasks)} tasks of {', '.join(chosen)} ({shown}) -> {out}")
