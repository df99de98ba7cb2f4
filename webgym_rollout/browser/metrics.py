"""The browser server's ``/metrics``: its counters and lanes in the Prometheus text format.

`render_prometheus` writes the series (queue depth, running and finished operations and latency
quantiles per operation kind; sessions, browsers, restarts, screenshot retries, blocked sites and
errors by kind). The pool gathers the values (`BrowserPool.metrics_text`); the lanes are
`webgym_rollout.browser.lanes`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from webgym_rollout.browser.lanes import Lane, percentile

__all__ = ["render_prometheus"]


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
