"""Which tasks an iteration rolls out: `TaskSampler`, set by `SamplerSettings` (``--sampler*``).

Filters first (every one optional): benchmark names, domains, difficulty levels (``easy``,
``medium``, ``hard``, ``unknown``), websites (a host and its subdomains) and task kinds (``web``,
``miniwob``). Then one of four strategies draws iteration ``i``'s batch of `batch_size` tasks:

- ``all``: the tasks in their order, the first `batch_size` of them (every one when unset).
- ``epoch``: random batches without replacement across iterations: the tasks are shuffled once per
  epoch and iteration ``i`` takes the next `batch_size` of that order; when an epoch is used up the
  next one starts with a new shuffle. Every task is drawn once per epoch (without a batch size,
  every iteration plays every task, in a new order).
- ``uniform_difficulty``: as ``epoch``, but the batch is split evenly over the difficulty levels
  present, each level drawing from its own epochs: a level gets the same share whatever its size
  (the paper's depth ablation trains on one level with ``--sampler-difficulties``).
- ``success_aware``: weighted draws without replacement. A task the policy already solves reliably
  (success rate >= `solved_rate` over at least `min_attempts` attempts) weighs `solved_weight`, any
  other 1; a task never solved in `min_attempts` or more attempts waits before it is drawn again,
  ``retry_after * 2 ** (n - 1)`` iterations after its last attempt, n being the number of
  iterations it was attempted in (a retry schedule that backs off).

The batch of iteration ``i`` is a pure function of the tasks, the settings, the seed, ``i`` and (for
``success_aware``) the outcomes of the earlier iterations (`TaskHistory`): a rerun draws the same
batches, and the loop records each batch beside the iteration's trajectories.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from webgym_data.schema import TASK_DIFFICULTY_LEVELS, Task

__all__ = ["SamplerSettings", "TaskHistory", "TaskSampler", "history_from"]

Strategy = Literal["all", "epoch", "uniform_difficulty", "success_aware"]


@dataclass(frozen=True)
class SamplerSettings:
    """Which tasks each iteration rolls out (the ``--sampler*`` flags)."""

    kind: Strategy = "all"
    """all (the first --sampler-batch-size tasks), epoch (random batches, without replacement
    across iterations), uniform_difficulty (epoch batches split evenly over difficulty levels) or
    success_aware (reliably solved tasks drawn less, never-solved ones retried on a schedule)."""
    batch_size: int | None = None
    """Tasks per iteration (unset: every task that passes the filters; success_aware needs one)."""
    benchmarks: tuple[str, ...] = ()
    """Keep only tasks of these benchmarks (benchmark_name)."""
    domains: tuple[str, ...] = ()
    """Keep only tasks of these domains."""
    difficulties: tuple[str, ...] = ()
    """Keep only tasks of these difficulty levels (easy, medium, hard, unknown)."""
    websites: tuple[str, ...] = ()
    """Keep only tasks on these websites (a host matches itself and its subdomains)."""
    kinds: tuple[str, ...] = ()
    """Keep only tasks of these kinds (web, miniwob)."""
    solved_rate: float = 0.8
    """success_aware: a task solved in at least this share of its attempts counts as solved."""
    solved_weight: float = 0.2
    """success_aware: the draw weight of a solved task (an unsolved one weighs 1)."""
    min_attempts: int = 2
    """success_aware: attempts before a task counts as solved or as never solved."""
    retry_after: int = 1
    """success_aware: iterations a never-solved task waits before its first retry (doubling after
    each further attempted iteration)."""
    seed: int = 0
    """Seed of the draws (the loop derives it from its own seed)."""

    def __post_init__(self) -> None:
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {self.batch_size}")
        unknown = sorted(set(self.difficulties) - set(TASK_DIFFICULTY_LEVELS))
        if unknown:
            raise ValueError(f"difficulties: {', '.join(unknown)} unknown; "
                             f"choose from {', '.join(TASK_DIFFICULTY_LEVELS)}")
        if not 0 < self.solved_rate <= 1:
            raise ValueError(f"solved_rate: must be in (0, 1], got {self.solved_rate}")
        if not 0 < self.solved_weight <= 1:
            raise ValueError(f"solved_weight: must be in (0, 1], got {self.solved_weight}")
        if self.min_attempts < 1 or self.retry_after < 0:
            raise ValueError("min_attempts: must be >= 1 (and retry_after >= 0)")
        if self.kind == "success_aware" and self.batch_size is None:
            raise ValueError("batch_size: the success_aware sampler draws weighted batches: give their size")


@dataclass
class TaskHistory:
    """What earlier iterations did with each task: the attempts per iteration and the successes."""

    attempts: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    """task id -> iteration -> episodes played."""
    successes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """task id -> episodes with reward 1."""

    def add(self, task_id: str, iteration: int, success: bool) -> None:
        """Count one judged episode (infrastructure failures are not outcomes: do not add them)."""
        by_iteration = self.attempts[task_id]
        by_iteration[iteration] = by_iteration.get(iteration, 0) + 1
        self.successes[task_id] += int(success)

    def count(self, task_id: str) -> int:
        return sum(self.attempts.get(task_id, {}).values())

    def rate(self, task_id: str) -> float:
        count = self.count(task_id)
        return self.successes.get(task_id, 0) / count if count else 0.0


class TaskSampler:
    """Draws the batch of each iteration from `tasks` (see the module docstring)."""

    def __init__(self, tasks: Sequence[Task], settings: SamplerSettings):
        self.settings, self.seed = settings, settings.seed
        self.tasks = [task for task in tasks if self._keep(task)]
        """The tasks that pass the filters, in their order."""

    def _keep(self, task: Task) -> bool:
        s = self.settings
        if s.benchmarks and task.benchmark_name not in s.benchmarks:
            return False
        if s.domains and task.domain not in s.domains:
            return False
        if s.difficulties and task.difficulty_level not in s.difficulties:
            return False
        if s.kinds and task.environment_kind not in s.kinds:
            return False
        if s.websites:
            host = (urlsplit(task.website).hostname or task.website).lower().removeprefix("www.")
            return any(host == w.lower() or host.endswith("." + w.lower()) for w in s.websites)
        return True

    def batch(self, iteration: int, history: TaskHistory | None = None) -> list[Task]:
        """The tasks of `iteration` (0-based), in drawing order."""
        size = min(self.settings.batch_size or len(self.tasks), len(self.tasks))
        if self.settings.kind == "all":
            return self.tasks[:size]
        if self.settings.kind == "epoch":
            return _epoch_batch(self.tasks, size, iteration, f"{self.seed}")
        if self.settings.kind == "uniform_difficulty":
            return self._uniform_difficulty(size, iteration)
        return self._success_aware(size, iteration, history or TaskHistory())

    def _uniform_difficulty(self, size: int, iteration: int) -> list[Task]:
        by_level: dict[str, list[Task]] = defaultdict(list)
        for task in self.tasks:
            by_level[task.difficulty_level].append(task)
        levels = [level for level in TASK_DIFFICULTY_LEVELS if by_level[level]]
        batch: list[Task] = []
        for position, level in enumerate(levels):
            share = size // len(levels) + (1 if position < size % len(levels) else 0)
            share = min(share, len(by_level[level]))
            batch += _epoch_batch(by_level[level], share, iteration, f"{self.seed}:{level}")
        return batch

    def _success_aware(self, size: int, iteration: int, history: TaskHistory) -> list[Task]:
        s = self.settings
        keyed = []
        for task in self.tasks:
            attempts = history.count(task.task_id)
            weight = 1.0
            if attempts >= s.min_attempts:
                if history.rate(task.task_id) >= s.solved_rate:
                    weight = s.solved_weight
                elif history.successes.get(task.task_id, 0) == 0:
                    rounds = sorted(history.attempts[task.task_id])
                    if iteration < rounds[-1] + s.retry_after * 2 ** (len(rounds) - 1):
                        continue  # never solved: waiting for its next retry
            # Weighted sampling without replacement (Efraimidis-Spirakis): the largest u ** (1 / w).
            u = 1.0 - random.Random(f"{self.seed}:{iteration}:{task.task_id}").random()  # in (0, 1]
            keyed.append((math.log(u) / weight, task))
        keyed.sort(key=lambda pair: pair[0], reverse=True)
        return [task for _, task in keyed[:size]]

    def describe(self) -> dict[str, object]:
        """What the sampler draws from, for logs and the loop state."""
        return {"kind": self.settings.kind, "tasks": len(self.tasks), "batch_size": self.settings.batch_size,
                "seed": self.seed}


def _epoch_batch(tasks: Sequence[Task], size: int, iteration: int, seed: str) -> list[Task]:
    """Iteration `iteration`'s `size` tasks from an endless sequence of shuffles (one per epoch)."""
    if not tasks or size <= 0:
        return []
    n = len(tasks)
    orders: dict[int, list[int]] = {}

    def order(epoch: int) -> list[int]:
        if epoch not in orders:
            indices = list(range(n))
            random.Random(f"{seed}:epoch:{epoch}").shuffle(indices)
            orders[epoch] = indices
        return orders[epoch]

    batch: list[int] = []
    position = iteration * size
    while len(batch) < size:
        index = order(position // n)[position % n]
        if index not in batch:  # a batch that straddles two epochs takes no task twice
            batch.append(index)
        position += 1
    return [tasks[i] for i in batch]


def history_from(outcomes: Iterable[tuple[str, int, bool]]) -> TaskHistory:
    """A `TaskHistory` from (task id, iteration, success) triples."""
    history = TaskHistory()
    for task_id, iteration, success in outcomes:
        history.add(task_id, iteration, success)
    return history
