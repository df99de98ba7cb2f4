"""How the browser pool runs its browsers: `PoolSettings`, every field a flag of ``webgym-rollout serve``.

Its own module, below the pool, the processes and the operations that all read it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from webgym_rollout.browser.guard import UrlGuard

__all__ = ["DEFAULT_CHROMIUM", "OP_KINDS", "PoolSettings"]

DEFAULT_CHROMIUM = "/usr/lib/chromium/chromium-headless-shell"
"""Debian's chromium-headless-shell (``WEBGYM_CHROMIUM`` overrides it)."""

_DEFAULT_CONCURRENCY = {"create": 4, "navigate": 8, "screenshot": 8, "execute": 8, "page_info": 8}
OP_KINDS = tuple(_DEFAULT_CONCURRENCY)
"""The operation kinds, each with its own lane (``env_state`` runs in the ``page_info`` lane)."""


@dataclass
class PoolSettings:
    """How the pool runs its browsers; every field is a CLI flag of ``webgym-rollout serve``."""

    executable_path: str = field(default_factory=lambda: os.environ.get("WEBGYM_CHROMIUM", DEFAULT_CHROMIUM))
    """Chromium binary (Debian's headless shell; `WEBGYM_CHROMIUM` overrides the default)."""
    browsers: int = 2
    """Browser processes kept running."""
    contexts_per_browser: int = 6
    """Sessions per browser (the measured sweet spot on 2 cores is 4-8)."""
    allow_hosts: tuple[str, ...] = ()
    """Hosts opened despite the URL guard's rules: ``host:port``, e.g. ``127.0.0.1:8400`` for a local
    site server; a bare local address or ``localhost`` is refused (every other port of this machine
    is a control plane), a name without a port (``intranet.example``, ``*.example``) opens it on every
    port but never at a loopback or link-local address (`webgym_rollout.browser.guard`)."""
    idle_timeout_s: float = 300.0
    """A session untouched this long is closed (a client that died leaks nothing)."""
    create_timeout_s: float = 30.0
    """Bound on opening a session, its first page load and MiniWoB episode start included."""
    navigate_timeout_s: float = 20.0
    """Bound on a navigation (until the page's load event)."""
    action_timeout_s: float = 10.0
    """Bound on screenshot, execute, page_info and env_state."""
    recycle_after_sessions: int = 200
    """A browser is replaced after hosting this many sessions."""
    max_browser_mib: float = 2048.0
    """A browser whose process tree passes this PSS is replaced once its sessions end."""
    memory_check_s: float = 10.0
    """How often the browsers' PSS is read (reading smaps costs a few ms per process)."""
    concurrency: dict[str, int] = field(default_factory=lambda: dict(_DEFAULT_CONCURRENCY))
    """Operations of each kind (create, navigate, screenshot, execute, page_info) running at once;
    a kind not given keeps its default. Screenshots are not held below the other kinds: measured
    with 8 sessions on 2 cores, a limit of 4 cost 10-15 % of the steps/s."""
    spare_contexts: int = 2
    """Cleared contexts each browser keeps for reuse (each costs ~23 MiB)."""
    max_queue: int = 256
    """Operations of one kind that may wait; beyond that the server answers `ServerBusy` (429)."""
    episode_max_time_s: float | None = 60.0
    """Time limit of environments that keep one (MiniWoB pages: their own 10 s is too short for a
    slow policy); none = the environment's own."""
    blocklist_threshold: int = 3
    """Failures (timeouts, network errors, block pages) at one origin (scheme, host, port) within 10
    minutes after which it is blocked: for every session when its start page failed in that many
    sessions, for one session when its own navigations failed that often. An allowlisted host:port
    is never blocked."""
    blocklist_ttl_s: float = 3600.0
    """How long an origin stays blocked for every session (``DELETE /blocklist/{origin}`` lifts it
    sooner); for one session: until it ends, at most this long."""
    extra_args: tuple[str, ...] = ()
    """More Chromium flags, each given after an = sign (``=--some-flag``): a value that starts with -
    would be read as an option."""
    page_modules: tuple[str, ...] = ("webgym_rollout.tasks",)
    """Modules imported when the pool starts; importing them registers the page hooks of their
    environments (`webgym_rollout.browser.pages`). Add your own module to serve a new task kind."""
    replay_cache_mib: float = 512.0
    """Bodies of recordings kept for replays (``PUT /bodies/{sha256}``), in MiB; the least recently
    used go first (a replay under way keeps its own)."""

    def __post_init__(self) -> None:
        for name in ("browsers", "contexts_per_browser", "recycle_after_sessions", "blocklist_threshold"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("spare_contexts", "max_queue"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        UrlGuard(self.allow_hosts)  # AllowlistError (a ValueError) naming a bad entry, before any launch
        for name in ("idle_timeout_s", "create_timeout_s", "navigate_timeout_s", "action_timeout_s",
                     "max_browser_mib", "memory_check_s", "blocklist_ttl_s", "replay_cache_mib"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.episode_max_time_s is not None and not self.episode_max_time_s > 0:
            raise ValueError(f"episode_max_time_s: must be > 0 or none, got {self.episode_max_time_s}")
        for kind, limit in self.concurrency.items():
            if kind not in _DEFAULT_CONCURRENCY:
                raise ValueError(f"concurrency: unknown operation kind {kind!r} "
                                 f"(expected {', '.join(OP_KINDS)})")
            if not isinstance(limit, int) or limit < 1:
                raise ValueError(f"concurrency: {kind} must be an integer >= 1, got {limit!r}")

    @property
    def max_sessions(self) -> int:
        return self.browsers * self.contexts_per_browser

    @property
    def lane_limits(self) -> dict[str, int]:
        """`concurrency` for every operation kind, the defaults filling the kinds not given."""
        return {kind: self.concurrency.get(kind, default) for kind, default in _DEFAULT_CONCURRENCY.items()}
