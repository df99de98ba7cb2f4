"""Every site's generated tasks in one place: `site_tasks` draws them, `expert_plan` plans them.

    site_tasks(per_site=100, seed=0)        -> tasks of every site (shop, travel), rows of the task schema
    expert_plan(task)                       -> the scripted expert's moves for one of them

`SITES` maps each site (the ``site`` of a task's ``source.metadata``, the argument of its
``site:<name>`` environment) to its generator and its planner; a task's own truth (``params``)
stays in its metadata, where only the expert and the tests read it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webgym_data.schema import Task
from webgym_rollout.tasks.websites import shop_tasks, travel_tasks
from webgym_rollout.tasks.websites.plans import Move

__all__ = ["SITES", "SiteGenerator", "expert_plan", "site_tasks", "task_params"]


@dataclass(frozen=True)
class SiteGenerator:
    """One site's task generator (``(count, seed=, base_url=) -> tasks``) and expert planner."""

    tasks: Callable[..., list[Task]]
    plan: Callable[[dict[str, Any], Task], list[Move]]


SITES: dict[str, SiteGenerator] = {
    "shop": SiteGenerator(shop_tasks.shop_tasks, shop_tasks.expert_moves),
    "travel": SiteGenerator(travel_tasks.travel_tasks, travel_tasks.expert_moves),
}


def site_tasks(per_site: int, *, seed: int = 0, base_url: str = shop_tasks.DEFAULT_BASE_URL,
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


def expert_plan(task: Task) -> list[Move]:
    """The scripted expert's moves for a generated site task (ValueError when no site plans it)."""
    site, params = task_params(task)
    generator = SITES.get(site)
    if generator is None:
        raise ValueError(f"task {task.task_id}: no expert planner for the site {site!r} "
                         f"(known: {', '.join(SITES)})")
    return generator.plan(params, task)
