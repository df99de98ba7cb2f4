"""Operation lanes: one bounded queue + concurrency limit per operation kind.

A `Lane` is what keeps a burst of slow navigations from starving screenshots: each operation kind
waits only behind operations of its own kind, up to `max_queue` waiters (then `ServerBusy`), and at
most `concurrency` run at once. Each lane keeps the latencies of its recent operations for
``/metrics`` (`percentile`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable

from webgym_rollout.errors import ServerBusy

__all__ = ["Lane", "percentile"]


def percentile(values: Iterable[float], q: float) -> float:
    """The `q` quantile (0..1) of `values` by nearest rank; 0.0 for no values."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Lane:
    """Bounded queue + concurrency limit for one operation kind, with latency statistics."""

    def __init__(self, name: str, concurrency: int, max_queue: int, window: int = 2048):
        if concurrency < 1 or max_queue < 0:
            raise ValueError(f"lane {name}: concurrency must be >= 1 and max_queue >= 0")
        self.name, self.concurrency, self.max_queue = name, concurrency, max_queue
        self._semaphore = asyncio.Semaphore(concurrency)
        self.waiting = 0
        self.running = 0
        self.completed = 0
        self.latencies: deque[float] = deque(maxlen=window)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the lane's `concurrency` slots; raises `ServerBusy` when `max_queue`
        operations already wait for one."""
        if self.waiting >= self.max_queue and self._semaphore.locked():
            raise ServerBusy(f"the {self.name} queue is full ({self.waiting} waiting); retry later")
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self.running -= 1
            self.completed += 1
            self.latencies.append(time.perf_counter() - start)
            self._semaphore.release()
