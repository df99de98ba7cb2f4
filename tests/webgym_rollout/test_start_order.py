"""Tests of `webgym_rollout.runner.order.StartQueue`: the order the asynchronous schedule starts its
episodes in (no browser needed; the runner's own run is in test_runner.py)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from webgym_data.schema import Task
from webgym_rollout.runner.episode import Job, episode_id
from webgym_rollout.runner.order import StartQueue, step_history


def _jobs(spec: list[tuple[str, str, int]], attempts: int = 1) -> tuple[list[Job], dict[str, int]]:
    """Jobs of tasks (task_id, website, step budget), each with `attempts` attempts; and the budgets."""
    jobs, budgets = [], {}
    for task_id, website, budget in spec:
        budgets[task_id] = budget
        task = Task(task_id=task_id, task_name=f"Do {task_id}", website=website, benchmark_name="test")
        jobs += [Job(task, a, episode_id(task_id, a, 0)) for a in range(attempts)]
    return jobs, budgets


def _drain(queue: StartQueue) -> list[Job]:
    started = []
    while (job := queue.next()) is not None:
        started.append(job)
    return started


def test_given_keeps_the_order_of_the_tasks_and_longest_starts_the_largest_budgets_first():
    jobs, budgets = _jobs([("a", "site-a", 10), ("b", "site-b", 30), ("c", "site-c", 20),
                           ("d", "site-b", 30)])
    assert _drain(StartQueue(jobs, lambda t: budgets[t.task_id], order="given")) == jobs
    started = _drain(StartQueue(jobs, lambda t: budgets[t.task_id]))
    assert [j.task.task_id for j in started] == ["b", "d", "c", "a"]
    with pytest.raises(ValueError, match="start_order: one of longest, given"):
        StartQueue(jobs, lambda t: 1, order="shortest")


def test_groups_expected_equally_long_take_turns_then_the_ended_episodes_decide():
    spec = [(f"{site}-{i}", site, 8) for site in ("short", "long") for i in range(4)]
    jobs, _ = _jobs(spec)
    queue = StartQueue(jobs, lambda t: 8)
    first, second = queue.next(), queue.next()
    assert [first.task.website, second.task.website] == ["short", "long"]  # one each: nothing known yet
    queue.ended(first, 1)
    queue.ended(second, 8)
    assert queue.expected_steps(jobs[1]) == pytest.approx((8 + 1) / 2)
    assert queue.expected_steps(jobs[5]) == pytest.approx((8 + 8) / 2)
    rest = [j.task.website for j in _drain(queue)]
    assert rest == ["long"] * 3 + ["short"] * 3  # the run ends on the short episodes


def test_earlier_episodes_order_the_groups_and_the_tasks_within_one():
    jobs, _ = _jobs([("x1", "x", 8), ("x2", "x", 8), ("x3", "x", 8), ("y1", "y", 8)], attempts=2)
    history = step_history([{"task_id": "x1", "num_steps": 2}, {"task_id": "x2", "num_steps": 7},
                            {"task_id": "x3", "num_steps": 3}, {"task_id": "y1", "num_steps": 8},
                            {"task_id": "gone", "num_steps": 1}])
    assert history["x2"] == [7] and history["gone"] == [1]
    queue = StartQueue(jobs, lambda t: 8, history=history)
    started = _drain(queue)
    # y (8 steps before) outranks x (4 on average); within x the longer tasks first, attempts together
    assert [(j.task.task_id, j.attempt) for j in started] == [
        ("y1", 0), ("y1", 1), ("x2", 0), ("x2", 1), ("x3", 0), ("x3", 1), ("x1", 0), ("x1", 1)]


@pytest.mark.parametrize("order", ["longest", "given"])
def test_every_job_starts_exactly_once_whatever_the_episodes_lengths(order):
    rng = random.Random(7)
    spec = [(f"t{i}", f"site-{rng.randrange(5)}", rng.choice((10, 20, 30))) for i in range(40)]
    jobs, budgets = _jobs(spec, attempts=3)
    queue = StartQueue(jobs, lambda t: budgets[t.task_id], order=order)
    assert len(queue) == 120
    started = []
    while (job := queue.next()) is not None:
        started.append(job)
        queue.ended(job, rng.randint(1, budgets[job.task.task_id]))
    assert sorted(j.episode_id for j in started) == sorted(j.episode_id for j in jobs)
    assert len(queue) == 0 and queue.next() is None


def test_a_resumed_run_starts_by_the_lengths_of_the_episodes_already_written(tmp_path):
    from tests.webgym_rl.synthetic import episode, task, write_shards
    from webgym_rollout.runner.rollout import _start_queue
    from webgym_rollout.runner.settings import RolloutSettings, RunSettings

    out = write_shards(tmp_path / "out", [episode(task_id="a", num_steps=1),
                                          episode(task_id="b", num_steps=5)])
    jobs = [Job(task(t), 1, episode_id(t, 1, 0)) for t in ("a", "b", "c")]
    settings = RunSettings(tasks=tmp_path / "tasks.jsonl", servers=("http://127.0.0.1:1",), out=out,
                           resume=True)
    queue = _start_queue(jobs, settings, resumed=2)
    # one group (same website and budget: 10 steps for an easy web task): expected (10 + 1 + 5) / 3;
    # c, never played, is expected as long as its group, b as long as before, a as short
    assert queue.expected_steps(jobs[2]) == pytest.approx(16 / 3)
    assert [j.task.task_id for j in _drain(queue)] == ["c", "b", "a"]
    given = dataclasses.replace(settings, rollout=RolloutSettings(start_order="given"))
    assert _drain(_start_queue(jobs, given, resumed=2)) == jobs
