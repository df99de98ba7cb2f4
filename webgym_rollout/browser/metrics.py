"""The browser server's ``/metrics``: its counters and lanes in the Prometheus text format.

`render_prometheus` writes the series (queue depth, running and finished operations and latency
quantiles per operation kind; sessions, browsers, open pages and contexts per browser, popups
closed, restarts, screenshot retries, the blocklist: what is blocked and why, failures counted per
site and per session, blocks made, failures at exempt origins; the egress proxy's requests,
refusals and CPU seconds, the page requests the URL guard refused, the server's refused callers (a
foreign Host or Origin: `webgym_rollout.browser.callers`), and errors by kind). The pool gathers
the values (`BrowserPool.metrics_text`); the lanes are `webgym_rollout.browser.lanes`, the
blocklist's counters `webgym_rollout.browser.blocklist.BlocklistStats`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from webgym_rollout.browser.blocklist import FAILURE_KINDS, BlocklistStats
from webgym_rollout.browser.egress import EgressStats
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
    blocklist: BlocklistStats,
    tabs: Mapping[str, tuple[int, int]],
    popups_closed: int,
    egress: EgressStats,
    guard_refused: int = 0,
    refused_callers: Mapping[str, int] | None = None,
) -> str:
    """The server's metrics in the Prometheus text format; `tabs` maps a browser's process id to
    its (open pages, contexts)."""
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
        "browser_pages",
        "gauge",
        "Open pages (tabs) per browser process: one per session; popups are closed at once.",
        [(f'{{browser="{pid}"}}', pages) for pid, (pages, _contexts) in sorted(tabs.items())],
    )
    metric(
        "browser_contexts",
        "gauge",
        "Browser contexts per browser process: one per session, plus cleared spare ones.",
        [(f'{{browser="{pid}"}}', contexts) for pid, (_pages, contexts) in sorted(tabs.items())],
    )
    metric(
        "popups_closed_total",
        "counter",
        "Pages a session's context opened (popups, new tabs) and the server closed at once.",
        [("", popups_closed)],
    )
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
    _blocklist_series(metric, blocklist)
    metric(
        "egress_requests_total",
        "counter",
        "Browser requests through the egress proxy, by outcome.",
        [('{outcome="forwarded"}', egress.connections), ('{outcome="refused"}', egress.refused),
         ('{outcome="failed"}', egress.failed)],
    )
    metric("egress_open_connections", "gauge", "Browser connections to the egress proxy open now.",
           [("", egress.open)])
    metric(
        "egress_cpu_seconds_total",
        "counter",
        "CPU seconds of the egress proxy's thread.",
        [("", egress.cpu_s)],
    )
    metric(
        "guard_refused_total",
        "counter",
        "Requests of pages the URL guard refused before they left the browser (the egress proxy counts "
        "what it refuses in egress_requests_total).",
        [("", guard_refused)],
    )
    refused = {"misdirected": 0, "foreign_origin": 0, **(refused_callers or {})}
    metric(
        "callers_refused_total",
        "counter",
        "Requests to this server refused for their Host (misdirected) or Origin (foreign_origin).",
        [(f'{{kind="{kind}"}}', count) for kind, count in sorted(refused.items())],
    )
    metric(
        "errors_total",
        "counter",
        "Errors returned, by kind.",
        [(f'{{kind="{kind}"}}', count) for kind, count in sorted(errors.items())],
    )
    return "\n".join(lines) + "\n"



def _label(value: str) -> str:
    """`value` as a Prometheus label value (backslash, quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _blocklist_series(metric: Callable[[str, str, str, Iterable[tuple[str, float]]], None],
                      blocklist: BlocklistStats) -> None:
    """What the blocklist blocks now and why (the kind of the failure; ``/info`` has the whole
    reason), and what it counted, per scope: ``site`` (start pages) and ``session``."""
    entries = blocklist.entries
    metric("blocked_sites", "gauge", "Origins blocked for every session now.", [("", len(entries))])
    metric("blocked_site_seconds", "gauge",
           "Seconds left of each origin blocked for every session, by the kind of failure that blocked it.",
           [(f'{{origin="{_label(e.origin)}",kind="{e.kind}"}}', round(e.until - blocklist.now))
            for e in entries])
    metric("session_blocks", "gauge", "Origins blocked for one session only (its own failures) now.",
           [("", blocklist.session_blocks)])
    scoped = [(scope, kind) for scope in ("site", "session") for kind in FAILURE_KINDS]
    metric("blocklist_failures_total", "counter",
           "Failed page loads counted for the site (a start page) or for one session (a navigation).",
           [(f'{{scope="{scope}",kind="{kind}"}}', blocklist.failures[scope, kind])
            for scope, kind in scoped])
    metric("blocklist_exempt_total", "counter",
           "Failed page loads at an allowlisted host:port: never counted (the site answers every session).",
           [(f'{{kind="{kind}"}}', blocklist.exempt[kind]) for kind in FAILURE_KINDS])
    metric("blocks_total", "counter",
           "Origins blocked for every session (site) or for one (session), by the kind of failure.",
           [(f'{{scope="{scope}",kind="{kind}"}}', blocklist.blocks[scope, kind])
            for scope, kind in [*scoped, ("site", "operator")]])
