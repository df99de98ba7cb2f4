"""The browser server's ``/metrics``: its counters and lanes in the Prometheus text format, written
by ``prometheus_client``.

`render_prometheus` writes the series (queue depth, running and finished operations and latency
quantiles per operation kind; sessions, browsers, open pages and contexts per browser, popups
closed, restarts, screenshot retries, the blocklist: what is blocked and why, failures counted per
site and per session, blocks made, failures at exempt origins; the egress proxy's requests,
refusals and CPU seconds, the page requests the URL guard refused, the server's refused callers (a
foreign Host or Origin: `webgym_rollout.browser.callers`), and errors by kind). The pool gathers
the values (`BrowserPool.metrics_text`); the lanes are `webgym_rollout.browser.lanes`, the
blocklist's counters `webgym_rollout.browser.blocklist.BlocklistStats`. Each call collects one
snapshot into a registry of its own, so two servers in one process never share a series.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from webgym_rollout.browser.blocklist import FAILURE_KINDS, BlocklistStats
from webgym_rollout.browser.egress import EgressStats
from webgym_rollout.browser.lanes import Lane, percentile

__all__ = ["render_prometheus"]

_PREFIX = "webgym_"


def _family(name: str, help_text: str, samples: Iterable[tuple[Sequence[str], float]],
            labels: Sequence[str] = ()) -> Metric:
    """One metric family: a counter when its name ends in ``_total``, a gauge otherwise."""
    kind = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
    family = kind(_PREFIX + name, help_text, labels=list(labels))
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


@dataclass(eq=False)
class _Snapshot:
    """The server's values at one moment, as a ``prometheus_client`` collector."""

    lanes: list[Lane]
    active_sessions: int
    browsers: int
    browser_restarts: int
    errors: Counter
    sessions_created: int
    sessions_expired: int
    capture_retries: int
    blocklist: BlocklistStats
    tabs: Mapping[str, tuple[int, int]]
    popups_closed: int
    egress: EgressStats
    guard_refused: int = 0
    refused_callers: Mapping[str, int] = field(default_factory=dict)

    def collect(self) -> Iterator[Metric]:
        yield from _lane_series(self.lanes)
        yield from self._browser_series()
        yield from _blocklist_series(self.blocklist)
        yield from self._traffic_series()

    def _browser_series(self) -> Iterator[Metric]:
        """Sessions, browsers and their pages, restarts and screenshot retries."""
        tabs = sorted(self.tabs.items())
        yield _family("active_sessions", "Open browser sessions.", [((), self.active_sessions)])
        yield _family("browsers", "Running browser processes.", [((), self.browsers)])
        yield _family("browser_pages",
                      "Open pages (tabs) per browser process: one per session; popups are closed at once.",
                      [((pid,), pages) for pid, (pages, _contexts) in tabs], ["browser"])
        yield _family("browser_contexts",
                      "Browser contexts per browser process: one per session, plus cleared spare ones.",
                      [((pid,), contexts) for pid, (_pages, contexts) in tabs], ["browser"])
        yield _family("popups_closed_total",
                      "Pages a session's context opened (popups, new tabs) and the server closed at once.",
                      [((), self.popups_closed)])
        yield _family("browser_restarts_total", "Browsers replaced after a crash, recycling or memory bound.",
                      [((), self.browser_restarts)])
        yield _family("sessions_created_total", "Sessions created.", [((), self.sessions_created)])
        yield _family("sessions_expired_total", "Sessions closed after being idle.",
                      [((), self.sessions_expired)])
        yield _family("screenshot_retries_total",
                      "Screenshots Chromium failed to capture on a live page and that were taken again.",
                      [((), self.capture_retries)])

    def _traffic_series(self) -> Iterator[Metric]:
        """The egress proxy, the URL guard, refused callers and errors returned."""
        egress = self.egress
        yield _family("egress_requests_total", "Browser requests through the egress proxy, by outcome.",
                      [(("forwarded",), egress.connections), (("refused",), egress.refused),
                       (("failed",), egress.failed)], ["outcome"])
        yield _family("egress_open_connections", "Browser connections to the egress proxy open now.",
                      [((), egress.open)])
        yield _family("egress_cpu_seconds_total", "CPU seconds of the egress proxy's thread.",
                      [((), egress.cpu_s)])
        yield _family("guard_refused_total",
                      "Requests of pages the URL guard refused before they left the browser (the egress "
                      "proxy counts what it refuses in egress_requests_total).", [((), self.guard_refused)])
        refused = {"misdirected": 0, "foreign_origin": 0, **self.refused_callers}
        yield _family("callers_refused_total",
                      "Requests to this server refused for their Host (misdirected) or Origin "
                      "(foreign_origin).",
                      [((kind,), count) for kind, count in sorted(refused.items())], ["kind"])
        yield _family("errors_total", "Errors returned, by kind.",
                      [((kind,), count) for kind, count in sorted(self.errors.items())], ["kind"])


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
    snapshot = _Snapshot(
        lanes=list(lanes), active_sessions=active_sessions, browsers=browsers,
        browser_restarts=browser_restarts, errors=errors, sessions_created=sessions_created,
        sessions_expired=sessions_expired, capture_retries=capture_retries, blocklist=blocklist, tabs=tabs,
        popups_closed=popups_closed, egress=egress, guard_refused=guard_refused,
        refused_callers=dict(refused_callers or {}))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(snapshot)
    return generate_latest(registry).decode("utf-8")


def _lane_series(lanes: list[Lane]) -> Iterator[Metric]:
    """Per operation kind: waiting, running, finished, and latency quantiles over the recent window."""
    yield _family("queue_depth", "Operations waiting for a slot, by kind.",
                  [((lane.name,), lane.waiting) for lane in lanes], ["op"])
    yield _family("ops_running", "Operations running, by kind.",
                  [((lane.name,), lane.running) for lane in lanes], ["op"])
    yield _family("ops_total", "Operations finished, by kind.",
                  [((lane.name,), lane.completed) for lane in lanes], ["op"])
    yield _family("op_latency_seconds", "Operation latency quantiles over the recent window.",
                  [((lane.name, str(q)), percentile(lane.latencies, q))
                   for lane in lanes for q in (0.5, 0.95)],
                  ["op", "quantile"])


def _blocklist_series(blocklist: BlocklistStats) -> Iterator[Metric]:
    """What the blocklist blocks now and why (the kind of the failure; ``/info`` has the whole
    reason), and what it counted, per scope: ``site`` (start pages) and ``session``."""
    entries = blocklist.entries
    yield _family("blocked_sites", "Origins blocked for every session now.", [((), len(entries))])
    yield _family("blocked_site_seconds",
                  "Seconds left of each origin blocked for every session, by the kind of failure "
                  "that blocked it.",
                  [((e.origin, e.kind), round(e.until - blocklist.now)) for e in entries], ["origin", "kind"])
    yield _family("session_blocks", "Origins blocked for one session only (its own failures) now.",
                  [((), blocklist.session_blocks)])
    scoped = [(scope, kind) for scope in ("site", "session") for kind in FAILURE_KINDS]
    yield _family("blocklist_failures_total",
                  "Failed page loads counted for the site (a start page) or for one session (a navigation).",
                  [((scope, kind), blocklist.failures[scope, kind]) for scope, kind in scoped],
                  ["scope", "kind"])
    yield _family("blocklist_exempt_total",
                  "Failed page loads at an allowlisted host:port: never counted (the site answers "
                  "every session).",
                  [((kind,), blocklist.exempt[kind]) for kind in FAILURE_KINDS], ["kind"])
    yield _family("blocks_total",
                  "Origins blocked for every session (site) or for one (session), by the kind of failure.",
                  [((scope, kind), blocklist.blocks[scope, kind])
                   for scope, kind in [*scoped, ("site", "operator")]],
                  ["scope", "kind"])
