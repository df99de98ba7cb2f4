"""The order in which the asynchronous schedule starts its episodes (`StartQueue`).

A finite run ends with a drain: once the last episode has started, slots fall idle one by one
until the slowest of the last episodes ends. With ``start_order: longest`` (the default) the
episodes expected to take the most steps start first, so the run ends on short episodes and the
drain is short; ``given`` starts them in the order of the tasks (each task's attempts together).

Expected length: episodes are grouped by website and step budget (the task kind's horizon, which
follows the task's difficulty for web and local-site tasks). A group's expected length is the mean
step count of its ended episodes with the budget counted once, so a group nobody has played yet is
expected to run to its budget; it is updated as the run's episodes end. Earlier episodes of the same
tasks (`history`: the rows already in the output folder on ``--resume``) count from the start, and
within a group the tasks whose earlier episodes were longer start first (a task not played before
counts as long as its group). Among groups expected to be
equally long, the one with fewer episodes started goes first. The order changes only when episodes
start; every job is started exactly once, whatever the order.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from webgym_data.schema import Task
from webgym_rollout.runner.episode import Job

__all__ = ["START_ORDERS", "StartQueue", "step_history"]

START_ORDERS = ("longest", "given")
"""The start orders `RolloutSettings.start_order` accepts."""


@dataclass
class _Group:
    """The pending jobs of one (website, step budget) and the steps of its ended episodes."""

    rank: int
    budget: int
    jobs: list[Job] = field(default_factory=list)
    """Pending jobs, the next one to start last (popped from the end)."""
    steps: int = 0
    ended: int = 0
    started: int = 0

    @property
    def expected(self) -> float:
        return (self.budget + self.steps) / (1 + self.ended)

    def key(self) -> tuple[float, int, int]:
        """Larger is started first: longer expected, then fewer started, then first in the tasks."""
        return self.expected, -self.started, -self.rank


class StartQueue:
    """The jobs of a run in the order they start: `next` gives the job to start now (None when every
    job has started), `ended` tells the queue how many steps an episode took."""

    def __init__(self, jobs: Sequence[Job], budget: Callable[[Task], int], *, order: str = "longest",
                 history: Mapping[str, Sequence[int]] | None = None):
        if order not in START_ORDERS:
            raise ValueError(f"start_order: one of {', '.join(START_ORDERS)}, got {order!r}")
        self.order = order
        self._given = list(reversed(jobs)) if order == "given" else []
        self._groups: dict[tuple[str, int], _Group] = {}
        self._group_of: dict[str, _Group] = {}
        if order == "longest":
            self._group(jobs, budget, history or {})

    def _group(self, jobs: Sequence[Job], budget: Callable[[Task], int],
               history: Mapping[str, Sequence[int]]) -> None:
        budgets: dict[str, int] = {}
        for job in jobs:
            task = job.task
            if task.task_id not in budgets:
                budgets[task.task_id] = budget(task)
            key = (task.website, budgets[task.task_id])
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group(rank=len(self._groups), budget=key[1])
            group.jobs.append(job)
            self._group_of[job.episode_id] = group
        seen = {job.task.task_id: self._group_of[job.episode_id] for job in jobs}
        for task_id, steps in history.items():
            if task_id in seen and steps:
                seen[task_id].steps += sum(steps)
                seen[task_id].ended += len(steps)
        own = {task_id: statistics.fmean(steps) for task_id, steps in history.items() if steps}
        for group in self._groups.values():
            # A task not played before is expected to be as long as its group. Stable: equally long
            # tasks keep the given order; the list is popped from its end.
            group.jobs.sort(key=lambda job, g=group: own.get(job.task.task_id, g.expected), reverse=True)
            group.jobs.reverse()

    def __len__(self) -> int:
        return len(self._given) + sum(len(group.jobs) for group in self._groups.values())

    def next(self) -> Job | None:
        """The job to start now, or None when every job has started."""
        if self.order == "given":
            return self._given.pop() if self._given else None
        live = [group for group in self._groups.values() if group.jobs]
        if not live:
            return None
        group = max(live, key=_Group.key)
        group.started += 1
        job = group.jobs.pop()
        if not group.jobs:
            self._drop_empty()
        return job

    def _drop_empty(self) -> None:
        # Groups with nothing left to start no longer take part in the choice; their episodes'
        # lengths are no longer needed either.
        self._groups = {key: group for key, group in self._groups.items() if group.jobs}

    def ended(self, job: Job, steps: int) -> None:
        """`job`'s episode ended after `steps` steps: its group's expected length follows."""
        group = self._group_of.pop(job.episode_id, None)
        if group is not None:
            group.steps += steps
            group.ended += 1

    def expected_steps(self, job: Job) -> float:
        """How many steps `job`'s episode is expected to take now (``given``: 0, not estimated)."""
        group = self._group_of.get(job.episode_id)
        return group.expected if group is not None else 0.0


def step_history(rows: Iterable[Mapping[str, object]]) -> dict[str, list[int]]:
    """Step counts per task of earlier episodes (rows with ``task_id`` and ``num_steps``)."""
    history: dict[str, list[int]] = {}
    for row in rows:
        history.setdefault(str(row["task_id"]), []).append(int(row["num_steps"]))  # type: ignore[call-overload]
    return history
