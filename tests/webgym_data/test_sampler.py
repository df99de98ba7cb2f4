"""The task sampler: filters, epoch batches without replacement, uniform difficulty, success-aware
draws with a retry schedule; every batch a pure function of (tasks, settings, seed, iteration)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from webgym_data.sampler import SamplerSettings, TaskHistory, TaskSampler, history_from
from webgym_data.schema import Task


def _task(i: int, facts: int = 1, benchmark: str = "b1", domain: str = "shopping",
          website: str = "shop.example") -> Task:
    groups = [{"id": "1", "description": "d", "facts": [f"fact {n}" for n in range(facts)]}]
    return Task.from_row({"task_id": f"t{i:03d}", "task_name": f"Task {i}", "website": website,
                          "benchmark_name": benchmark, "domain": domain, "evaluator_reference": groups})


TASKS = [_task(i, facts=1 + i % 9) for i in range(30)]  # easy, medium and hard tasks, 10 of each


def ids(tasks) -> list[str]:
    return [task.task_id for task in tasks]


def test_filters_keep_only_the_named_tasks():
    tasks = [_task(0, benchmark="deepshop"), _task(1, domain="travel"), _task(2, website="https://www.a.example/x"),
             _task(3, website="https://m.a.example"), _task(4, facts=8),
             Task.from_row({"task_id": "mw", "task_name": "MiniWoB", "website": "miniwob:click-test",
                            "environment": "miniwob:click-test"})]
    def keep(**filters) -> list[str]:
        return ids(TaskSampler(tasks, SamplerSettings(**filters)).tasks)

    assert keep(benchmarks=("deepshop",)) == ["t000"]
    assert keep(domains=("travel",)) == ["t001"]
    assert keep(websites=("a.example",)) == ["t002", "t003"]  # the host and its subdomains
    assert keep(difficulties=("hard",)) == ["t004"]
    assert keep(kinds=("miniwob",)) == ["mw"] and "mw" not in keep(kinds=("web",))
    assert keep() == ids(tasks)


def test_all_takes_the_first_tasks_and_the_settings_are_checked():
    assert ids(TaskSampler(TASKS, SamplerSettings(batch_size=3)).batch(7)) == ["t000", "t001", "t002"]
    assert len(TaskSampler(TASKS, SamplerSettings()).batch(0)) == 30
    with pytest.raises(ValueError, match="batch_size: the success_aware sampler draws weighted batches"):
        SamplerSettings(kind="success_aware")
    # Without a batch size, epoch plays every task each iteration, in a new order each time.
    whole = TaskSampler(TASKS, SamplerSettings(kind="epoch", seed=1))
    first, second = ids(whole.batch(0)), ids(whole.batch(1))
    assert sorted(first) == sorted(second) == ids(TASKS) and first != second
    with pytest.raises(ValueError, match="difficulties: trivial unknown"):
        SamplerSettings(difficulties=("trivial",))


def test_epoch_batches_cover_every_task_once_per_epoch_and_repeat_with_the_seed():
    sampler = TaskSampler(TASKS, SamplerSettings(kind="epoch", batch_size=10, seed=7))
    first_epoch = [ids(sampler.batch(i)) for i in range(3)]
    assert sorted(sum(first_epoch, [])) == ids(TASKS)  # without replacement across iterations
    assert first_epoch[0] != ids(TASKS[:10])  # shuffled
    second_epoch = [ids(sampler.batch(i)) for i in range(3, 6)]
    assert sorted(sum(second_epoch, [])) == ids(TASKS) and second_epoch != first_epoch
    again = TaskSampler(TASKS, SamplerSettings(kind="epoch", batch_size=10, seed=7))
    assert [ids(again.batch(i)) for i in range(3)] == first_epoch  # same seed, same batches
    other = TaskSampler(TASKS, SamplerSettings(kind="epoch", batch_size=10, seed=8))
    assert [ids(other.batch(i)) for i in range(3)] != first_epoch
    # a batch that straddles two epochs holds no task twice
    straddle = TaskSampler(TASKS, SamplerSettings(kind="epoch", batch_size=7, seed=1))
    assert all(len(set(ids(straddle.batch(i)))) == 7 for i in range(10))


def test_uniform_difficulty_gives_each_level_an_even_share():
    skewed = [_task(i, facts=1) for i in range(20)] + [_task(100 + i, facts=5) for i in range(4)] + \
        [_task(200 + i, facts=8) for i in range(2)]
    sampler = TaskSampler(skewed, SamplerSettings(kind="uniform_difficulty", batch_size=6, seed=0))
    for iteration in range(4):
        levels = Counter(task.difficulty_level for task in sampler.batch(iteration))
        assert levels == {"easy": 2, "medium": 2, "hard": 2}
    hard = [ids(sampler.batch(i)) for i in range(2)]
    assert {t for batch in hard for t in batch if t.startswith("t2")} == {"t200", "t201"}


def test_success_aware_draws_solved_tasks_less_and_retries_unsolved_ones_on_a_schedule():
    settings = SamplerSettings(kind="success_aware", batch_size=5, min_attempts=2, solved_weight=0.05,
                               retry_after=1)
    tasks = TASKS[:20]
    solved, unsolved = [t.task_id for t in tasks[:5]], [t.task_id for t in tasks[5:8]]
    outcomes = [(task_id, 0, True) for task_id in solved for _ in range(2)]
    outcomes += [(task_id, 0, False) for task_id in unsolved for _ in range(2)]
    history = history_from(outcomes)
    sampler = TaskSampler(tasks, dataclasses.replace(settings, seed=3))
    draws = Counter(t for i in range(1, 201) for t in ids(sampler.batch(i, history)))
    assert sum(draws[t] for t in solved) < 0.3 * sum(draws[t] for t in ids(tasks[8:13]))
    # never solved after 2 attempts in iteration 0: waits until iteration 0 + 1 * 2 ** 0 = 1
    assert not set(unsolved) & set(ids(sampler.batch(0, history)))
    # attempted again (unsolved) in iterations 1 and 2: the next retry is at 2 + 1 * 2 ** 2 = 6
    for iteration in (1, 2):
        for task_id in unsolved:
            history.add(task_id, iteration, False)
    assert all(not set(unsolved) & set(ids(sampler.batch(i, history))) for i in range(3, 6))
    assert sum(1 for i in range(6, 60) for t in ids(sampler.batch(i, history)) if t in unsolved) > 0
    # the batch is a pure function of its inputs
    again = TaskSampler(tasks, dataclasses.replace(settings, seed=3))
    assert ids(sampler.batch(9, history)) == ids(again.batch(9, history))
    assert len(set(ids(sampler.batch(9, history)))) == 5
    empty = TaskSampler(tasks, dataclasses.replace(settings, seed=3))
    assert ids(empty.batch(4)) == ids(empty.batch(4, TaskHistory()))
