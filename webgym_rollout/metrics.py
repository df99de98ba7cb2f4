"""Operation lanes (one bounded queue + concurrency limit per operation kind) and their metrics.

A `Lane` is what keeps a burst of slow navigations from starving screenshots: each operation kind
waits only behind operations of its own kind, up to `max_queue` waiters (then `ServerBusy`), and at
most `concurrency` run at once. `render_prometheus` writes the text exposition format.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterable

from webgym_rollout.errors import ServerBusy

__all__ = ["Lane", "percentile", "render_prometheus"]


def percentile(values: Iterable[float], q: float) -> float:
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


def render_prometheus(
    *,
    lanes: Iterable[Lane],
    active_sessions: int,
    browsers: int,
    browser_restarts: int,
    errors: Counter,
    sessions_created: int,
    sessions_expired: int,
    capture_retries: int,
    blocked_sites: int,
) -> str:
    """The server's metrics in the Prometheus text format."""
    lanes = list(lanes)
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]) -> None:
        lines.append(f"# HELP webgym_{name} {help_text}")
        lines.append(f"# TYPE webgym_{name} {kind}")
        for labels, value in samples:
            lines.append(f"webgym_{name}{labels} {value:g}")

    metric(
        "queue_depth",
        "gauge",
        "Operations waiting for a slot, by kind.",
        [(f'{{op="{lane.name}"}}', lane.waiting) for lane in lanes],
    )
    metric(
        "ops_running",
        "gauge",
        "Operations running, by kind.",
        [(f'{{op="{lane.name}"}}', lane.running) for lane in lanes],
    )
    metric(
        "ops_total",
        "counter",
        "Operations finished, by kind.",
        [(f'{{op="{lane.name}"}}', lane.completed) for lane in lanes],
    )
    metric(
        "op_latency_seconds",
        "gauge",
        "Operation latency quantiles over the recent window.",
        [
            (f'{{op="{lane.name}",quantile="{q}"}}', percentile(lane.latencies, q))
            for lane in lanes
            for q in (0.5, 0.95)
        ],
    )
    metric("active_sessions", "gauge", "Open browser sessions.", [("", active_sessions)])
    metric("browsers", "gauge", "Running browser processes.", [("", browsers)])
    metric(
        "browser_restarts_total",
        "counter",
        "Browsers replaced after a crash, recycling or memory bound.",
        [("", browser_restarts)],
    )
    metric("sessions_created_total", "counter", "Sessions created.", [("", sessions_created)])
    metric("sessions_expired_total", "counter", "Sessions closed after being idle.", [("", sessions_expired)])
    metric(
        "screenshot_retries_total",
        "counter",
        "Screenshots Chromium failed to capture on a live page and that were taken again.",
        [("", capture_retries)],
    )
    metric("blocked_sites", "gauge", "Sites currently on the failure blocklist.", [("", blocked_sites)])
    metric(
        "errors_total",
        "counter",
        "Errors returned, by kind.",
        [(f'{{kind="{kind}"}}', count) for kind, count in sorted(errors.items())],
    )
    return "\n".join(lines) + "\n"
