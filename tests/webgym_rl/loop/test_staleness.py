"""webgym_rl.loop.staleness: the staleness bound of the asynchronous schedule, on its own."""

from __future__ import annotations

import threading
from collections import deque

import pytest

from webgym_rl.loop.staleness import StalenessCounts, StalenessManager


def test_the_capacity_of_a_version_is_what_the_batches_up_to_the_bound_take():
    # Bound 1, batches of 4, 2 over-provisioned: while v0 serves, the batches of rounds 0 and 1
    # (8 episodes) plus 2 may begin; v1 opens one more batch; the run's total caps it all.
    staleness = StalenessManager(1, 4, overprovision=2, total=30)
    assert [staleness.limit(v) for v in (0, 1, 5, 6, 10)] == [10, 14, 30, 30, 30]
    assert staleness.capacity() == staleness.capacity(0) == 10
    for _ in range(10):
        staleness.submit()
    assert (staleness.submitted, staleness.capacity()) == (10, 0)
    staleness.publish(1)
    assert (staleness.version, staleness.capacity()) == (1, 4)
    assert staleness.capacity(0) == 0  # never negative
    assert StalenessManager(0, 3).limit(7) == 24  # no total: no cap


def test_episodes_begun_before_count_toward_the_bound_under_no_version():
    staleness = StalenessManager(0, 5, version=2, submitted=12)  # a resumed run: 12 committed
    assert (staleness.submitted, staleness.capacity()) == (12, 3)
    assert staleness.submit() == 2
    assert staleness.counts() == StalenessCounts(submitted={2: 1})
    assert staleness.submitted == 13


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_a_rollout_within_capacity_never_makes_an_episode_too_stale_for_its_batch(bound):
    # The schedule the loop runs: the rollout begins episodes while there is capacity (each under the
    # version serving), the trainer takes each round's batch in the order they began, trains it at
    # version r and publishes r + 1. Every episode taken is within the bound, and the bound is used:
    # some episode is exactly `bound` versions behind (the rollout ran that far ahead).
    batch, rounds = 3, 8
    staleness = StalenessManager(bound, batch, total=rounds * batch)
    begun: deque[int] = deque()
    behind = []
    for r in range(rounds):
        while staleness.capacity():
            begun.append(staleness.submit())
        taken = [begun.popleft() for _ in range(batch)]
        for version in taken:
            assert not staleness.too_stale(version, r), (version, r)
            staleness.accept(version)
            behind.append(staleness.staleness(version, r))
        staleness.publish(r + 1)
    assert max(behind) == bound and not begun
    counts = staleness.counts()
    assert sum(counts.submitted.values()) == sum(counts.accepted.values()) == rounds * batch
    assert counts.rejected == {}


def test_too_stale_is_more_than_the_bound_behind():
    staleness = StalenessManager(2, 1)
    assert [staleness.too_stale(v, 5) for v in (2, 3, 4, 5, 6)] == [True, False, False, False, False]
    assert [staleness.staleness(v, 5) for v in (2, 5, 6)] == [3, 0, 0]  # a newer episode is 0 behind


def test_it_counts_submitted_accepted_and_rejected_by_version():
    staleness = StalenessManager(1, 10)
    for _ in range(3):
        staleness.submit()
    staleness.publish(2)
    staleness.submit()
    for version, stale in ((0, True), (0, False), (2, False), (0, False)):
        (staleness.reject if stale else staleness.accept)(version)
    counts = staleness.counts()
    assert counts == StalenessCounts(submitted={0: 3, 2: 1}, accepted={0: 2, 2: 1}, rejected={0: 1})
    staleness.accept(1)
    assert counts.accepted == {0: 2, 2: 1}  # a copy: later counts do not change it
    assert list(staleness.counts().accepted) == [0, 1, 2]  # by version


def test_the_version_never_goes_back_and_bad_settings_name_the_field():
    staleness = StalenessManager(1, 2, version=3)
    staleness.publish(3)
    with pytest.raises(ValueError, match="^version: 2 would go back from 3"):
        staleness.publish(2)
    assert staleness.version == 3
    for kwargs, field in (({"max_staleness": -1}, "max_staleness"), ({"batch_episodes": 0}, "batch_episodes"),
                          ({"overprovision": -2}, "overprovision"), ({"total": -1}, "total"),
                          ({"version": -1}, "version"), ({"submitted": -5}, "submitted")):
        with pytest.raises(ValueError, match=f"^{field}: must be >= "):
            StalenessManager(**{"max_staleness": 1, "batch_episodes": 2, **kwargs})


def test_counts_from_several_threads_are_all_kept():
    # The rollout thread submits while the trainer thread accepts, rejects and reads the counts.
    staleness = StalenessManager(0, 1)
    per_thread = 5000

    def submit():
        for _ in range(per_thread):
            staleness.submit()

    def judge():
        for i in range(per_thread):
            (staleness.accept if i % 2 else staleness.reject)(i % 3)
            staleness.counts()

    threads = [threading.Thread(target=submit) for _ in range(2)] + [threading.Thread(target=judge)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = staleness.counts()
    assert staleness.submitted == counts.submitted[0] == 2 * per_thread
    assert sum(counts.accepted.values()) + sum(counts.rejected.values()) == per_thread
