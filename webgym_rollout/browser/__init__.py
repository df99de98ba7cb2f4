"""Real Chromium browsers behind an HTTP server, and the client that drives them.

    protocol    the wire models both sides speak (BrowserAction, Screenshot, ...)
    client      BrowserClient / BrowserSession: the typed async client (http: its connection pool)
    server      the FastAPI server, ServerSettings and ``webgym-rollout serve``
    settings    PoolSettings: how the pool runs its browsers (every field a flag of ``serve``)
    pool        BrowserPool: the session table, composing the parts below
    pages       the server-side page hooks of each environment kind, a registry the task kinds fill
    egress      the egress proxy every connection of the browsers passes (resolves, decides, forwards)
    processes   the Chromium processes: launch, replace, recycle, memory bound, context reuse, popups
    session     one session: a context + page on a process, its lock and navigation tracker
    navigation  the URL guard on every request of a page, and the tracking of its navigations
    operations  navigate, screenshot, execute, act, page_info, env_state: lanes, timeouts, errors
    lanes       Lane: one bounded queue + concurrency limit per operation kind
    metrics     the Prometheus text of /metrics
    guard       where pages may go: the one set of rules (URLs, resolved addresses)
    blocklist   origins refused after failing: counted per site and per session, never an allowlisted port
    callers     who may call the server: the Host and Origin checks (the policy server's too)
    traffic     recording a page's network traffic, and serving a page from a recording

May import `webgym_core` and `webgym_rollout.errors` only (import-linter checks it): the browser
server knows nothing of tasks, agents, judges or trajectories; environments reach it through the
page-hook registry (`pages`).

Only the client side is imported here; the server side needs Playwright.
"""

from webgym_rollout.browser.client import BrowserClient, BrowserSession
from webgym_rollout.browser.protocol import BrowserAction, Screenshot

__all__ = ["BrowserAction", "BrowserClient", "BrowserSession", "Screenshot"]
