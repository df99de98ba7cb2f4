"""render_prometheus: every series, with HELP and TYPE, in the Prometheus text format, read back by
prometheus_client's parser."""

from __future__ import annotations

from collections import Counter

from tests.support.prometheus import samples
from webgym_rollout.browser.blocklist import BlockEntry, BlocklistStats
from webgym_rollout.browser.egress import EgressStats
from webgym_rollout.browser.lanes import Lane
from webgym_rollout.browser.metrics import render_prometheus


def _text() -> str:
    navigate, screenshot = Lane("navigate", 8, 256), Lane("screenshot", 8, 256)
    navigate.waiting, navigate.running, navigate.completed = 2, 8, 40
    screenshot.latencies.extend([0.01, 0.02, 0.03, 0.5])
    return render_prometheus(
        lanes=[navigate, screenshot],
        active_sessions=6,
        browsers=2,
        browser_restarts=1,
        errors=Counter({"server_busy": 3, "navigation_refused": 1}),
        sessions_created=10,
        sessions_expired=4,
        capture_retries=5,
        blocklist=BlocklistStats(
            failures=Counter({("site", "timeout"): 6, ("session", "network"): 4}),
            exempt=Counter({"network": 3}),
            blocks=Counter({("site", "timeout"): 2, ("session", "network"): 1}),
            session_blocks=1,
            entries=[BlockEntry("https://slow.example", "start pages failed", 1100.0, "timeout"),
                     BlockEntry('http://we"ird.example', "an operator saw a captcha", 1030.0)],
            now=1000.0),
        tabs={"4242": (3, 5), "17": (1, 2)},
        popups_closed=9,
        egress=EgressStats(connections=120, refused=4, failed=2, open=6, cpu_s=1.5),
        guard_refused=11,
        refused_callers=Counter({"misdirected": 2}),
    )


_EXPECTED = [
    ("webgym_queue_depth", {"op": "navigate"}, 2),
    ("webgym_queue_depth", {"op": "screenshot"}, 0),
    ("webgym_ops_running", {"op": "navigate"}, 8),
    ("webgym_ops_total", {"op": "navigate"}, 40),
    ("webgym_op_latency_seconds", {"op": "screenshot", "quantile": "0.5"}, 0.03),
    ("webgym_op_latency_seconds", {"op": "screenshot", "quantile": "0.95"}, 0.5),
    ("webgym_op_latency_seconds", {"op": "navigate", "quantile": "0.95"}, 0),
    ("webgym_active_sessions", {}, 6),
    ("webgym_browsers", {}, 2),
    ("webgym_browser_restarts_total", {}, 1),
    ("webgym_sessions_created_total", {}, 10),
    ("webgym_sessions_expired_total", {}, 4),
    ("webgym_screenshot_retries_total", {}, 5),
    ("webgym_blocked_sites", {}, 2),
    ("webgym_blocked_site_seconds", {"origin": "https://slow.example", "kind": "timeout"}, 100),
    ("webgym_blocked_site_seconds", {"origin": 'http://we"ird.example', "kind": "operator"}, 30),
    ("webgym_session_blocks", {}, 1),
    ("webgym_blocklist_failures_total", {"scope": "site", "kind": "timeout"}, 6),
    ("webgym_blocklist_failures_total", {"scope": "session", "kind": "network"}, 4),
    ("webgym_blocklist_failures_total", {"scope": "session", "kind": "block_page"}, 0),
    ("webgym_blocklist_exempt_total", {"kind": "network"}, 3),
    ("webgym_blocks_total", {"scope": "site", "kind": "timeout"}, 2),
    ("webgym_blocks_total", {"scope": "session", "kind": "network"}, 1),
    ("webgym_blocks_total", {"scope": "site", "kind": "operator"}, 0),
    ("webgym_errors_total", {"kind": "navigation_refused"}, 1),
    ("webgym_errors_total", {"kind": "server_busy"}, 3),
    ("webgym_browser_pages", {"browser": "4242"}, 3),
    ("webgym_browser_contexts", {"browser": "4242"}, 5),
    ("webgym_browser_pages", {"browser": "17"}, 1),
    ("webgym_browser_contexts", {"browser": "17"}, 2),
    ("webgym_popups_closed_total", {}, 9),
    ("webgym_egress_requests_total", {"outcome": "forwarded"}, 120),
    ("webgym_egress_requests_total", {"outcome": "refused"}, 4),
    ("webgym_guard_refused_total", {}, 11),
    ("webgym_callers_refused_total", {"kind": "misdirected"}, 2),
    ("webgym_callers_refused_total", {"kind": "foreign_origin"}, 0),
    ("webgym_egress_requests_total", {"outcome": "failed"}, 2),
    ("webgym_egress_open_connections", {}, 6),
    ("webgym_egress_cpu_seconds_total", {}, 1.5),
]


def test_every_series_is_written():
    found = samples(_text())  # prometheus_client's parser reads the whole text
    for name, labels, value in _EXPECTED:
        assert found[name, frozenset(labels.items())] == value, (name, labels)


def test_the_text_is_well_formed():
    text = _text()
    assert text.endswith("\n")
    helped, typed = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, help_text = line.split(" ", 3)[2:]
            helped[name] = help_text
        elif line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            assert name in helped and kind in ("gauge", "counter")
            assert name.endswith("_total") == (kind == "counter")
            typed[name] = kind
        else:
            assert line.split("{")[0].split(" ")[0] in typed, line  # every sample has HELP and TYPE above it
    assert helped["webgym_queue_depth"] == "Operations waiting for a slot, by kind."
    assert helped["webgym_ops_total"] == "Operations finished, by kind."
    assert len(helped) == 25  # every family (4 per lane, 9 browser, 6 blocklist, 6 traffic)


def test_each_render_is_a_registry_of_its_own():
    # Two renders (two servers in one process) never mix their series.
    first = samples(_text())
    assert samples(_text()) == first
    assert first["webgym_active_sessions", frozenset()] == 6
