"""Lane: at most `concurrency` operations run, at most `max_queue` wait, the rest get ServerBusy."""

from __future__ import annotations

import asyncio

import pytest

from webgym_rollout.browser.lanes import Lane, percentile
from webgym_rollout.errors import ServerBusy


async def _settle() -> None:
    """Let every task that can run reach its next wait."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_lane_bounds_concurrency_and_refuses_beyond_its_queue():
    lane = Lane("navigate", concurrency=2, max_queue=3)
    gate = asyncio.Event()
    inside, most_inside, order = 0, 0, []

    async def operation(number: int) -> None:
        nonlocal inside, most_inside
        async with lane.slot():
            inside += 1
            most_inside = max(most_inside, inside)
            order.append(number)
            await gate.wait()
            inside -= 1

    tasks = [asyncio.create_task(operation(n)) for n in range(5)]
    await _settle()
    assert (lane.running, lane.waiting, order) == (2, 3, [0, 1])
    with pytest.raises(ServerBusy, match="the navigate queue is full \\(3 waiting\\)"):
        async with lane.slot():
            pytest.fail("a full lane must not run the operation")
    assert (lane.running, lane.waiting) == (2, 3)  # the refusal took nothing

    gate.set()
    await asyncio.gather(*tasks)
    assert most_inside == 2 and sorted(order) == [0, 1, 2, 3, 4] and order[:2] == [0, 1]
    assert (lane.running, lane.waiting, lane.completed, len(lane.latencies)) == (0, 0, 5, 5)
    async with lane.slot():  # free again
        assert lane.running == 1


async def test_a_lane_without_a_queue_refuses_only_when_every_slot_is_taken():
    lane = Lane("create", concurrency=1, max_queue=0)
    async with lane.slot():
        with pytest.raises(ServerBusy):
            async with lane.slot():
                pass
    async with lane.slot():
        assert lane.running == 1


async def test_a_failing_operation_frees_its_slot():
    lane = Lane("execute", concurrency=1, max_queue=1, window=2)
    for _ in range(3):
        with pytest.raises(RuntimeError):
            async with lane.slot():
                raise RuntimeError("page died")
    assert (lane.running, lane.completed, len(lane.latencies)) == (0, 3, 2)  # the window keeps the last 2
    async with lane.slot():
        assert lane.running == 1


def test_lane_limits_are_checked():
    with pytest.raises(ValueError, match="lane screenshot"):
        Lane("screenshot", concurrency=0, max_queue=1)
    with pytest.raises(ValueError, match="lane screenshot"):
        Lane("screenshot", concurrency=1, max_queue=-1)


def test_percentile_by_nearest_rank():
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0], 0.95) == 3.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(reversed(values), 0.5) == 51.0
    assert percentile(values, 0.95) == 95.0
    assert (percentile(values, 0.0), percentile(values, 1.0)) == (1.0, 100.0)
