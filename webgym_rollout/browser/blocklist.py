"""The failure blocklist: origins that keep failing are refused, and one session never blocks a
site for the others.

An origin is ``scheme://host[:port]`` (`webgym_rollout.browser.guard.origin_of`). A failure is a
page load that timed out, failed in the network, that the egress proxy could not forward, that
answered 403 or 429, or that shows a block page (a captcha). Failures are counted in two places,
kept apart:

- **per site**, from what the toolkit itself asks: the start page of a new session. An origin
  whose start page failed in ``threshold`` different sessions within ``window_s`` is blocked for
  every session for ``ttl_s`` seconds (new sessions get `SiteBlocked`, which the runner records as
  ``blocked``), or until an operator lifts it (`SiteBlocklist.lift`);
- **per session**, from what the agent asks (its navigations): ``threshold`` failures at one
  origin within ``window_s`` block that origin for that session only (its next navigations there
  are refused at once, an agent's mistake in its own episode), until the session ends.

What an agent does therefore never blocks a site for another episode: a policy that makes failing
requests on purpose only spends its own steps. An origin that `exempt` names is never counted at
all: the browser server exempts every ``host:port`` entry of its allowlist (the local site server
answers every session, and a request one episode makes it fail says nothing about the others'),
and a replayed session's failures come from its recording, not the site
(`webgym_rollout.browser.operations` leaves them out). A success at an origin clears its counts
(the site's and the session's). `stats` counts failures, exemptions and blocks by scope and kind
for ``/metrics``; `entries` lists what is blocked for everyone and why.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from webgym_rollout.browser.guard import origin_of
from webgym_rollout.errors import SiteBlocked

__all__ = ["FAILURE_KINDS", "BlockEntry", "BlocklistStats", "SiteBlocklist"]

FAILURE_KINDS = ("timeout", "network", "egress", "http_status", "block_page")
"""What failed: the load timed out, Chromium's network error, the egress proxy could not forward
it, HTTP 403/429, a block page (captcha). An operator's own block has the kind ``operator``."""


@dataclass(frozen=True)
class BlockEntry:
    origin: str
    """``scheme://host[:port]`` (`origin_of`)."""
    reason: str
    until: float
    """`time.monotonic()` value at which the entry expires."""
    kind: str = "operator"
    """The kind of the last failure (`FAILURE_KINDS`), or ``operator``."""


@dataclass
class BlocklistStats:
    """What a `SiteBlocklist` counted since it started; the scope is ``site`` or ``session``."""

    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Failures counted, by (scope, kind)."""
    exempt: Counter[str] = field(default_factory=Counter)
    """Failures at an exempt origin (never counted), by kind."""
    blocks: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Blocks made, by (scope, kind of the failure that made them)."""
    session_blocks: int = 0
    """Origins blocked for one session now."""
    entries: list[BlockEntry] = field(default_factory=list)
    """Origins blocked for every session now."""
    now: float = 0.0
    """The blocklist's clock when these were read (`BlockEntry.until` - `now`: seconds left)."""


def _never(url: str) -> bool:
    return False


class SiteBlocklist:
    """Failure counts per site and per session, and the blocks they lead to (see the module
    docstring). Thread-safe; the clock is injectable for tests."""

    def __init__(
        self,
        *,
        threshold: int = 3,
        window_s: float = 600.0,
        ttl_s: float = 3600.0,
        exempt: Callable[[str], bool] = _never,
        clock: Callable[[], float] = time.monotonic,
    ):
        if threshold < 1:
            raise ValueError(f"threshold: must be >= 1, got {threshold}")
        self.threshold, self.window_s, self.ttl_s = threshold, window_s, ttl_s
        self._exempt, self._clock = exempt, clock
        self._lock = threading.Lock()
        self._site_failures: dict[str, dict[str, float]] = {}
        """origin -> {session whose start page failed there: when}."""
        self._session_failures: dict[tuple[str, str], dict[int, float]] = {}
        """(session, origin) -> {failure number: when}."""
        self._failure_ids = itertools.count()
        self._blocked: dict[str, BlockEntry] = {}
        self._session_blocked: dict[tuple[str, str], BlockEntry] = {}
        self._stats = BlocklistStats()

    def record_failure(self, url: str, reason: str, *, kind: str, session: str, start: bool = False) -> bool:
        """Count a failure of kind `kind` (`FAILURE_KINDS`) at the origin of `url`: against the site
        when it was `session`'s start page (`start`; a session counts once), else against `session`
        alone. True when the origin is now blocked (for every session, or for `session`)."""
        if kind not in FAILURE_KINDS:
            raise ValueError(f"kind: {kind!r} is not one of {', '.join(FAILURE_KINDS)}")
        origin, now = origin_of(url), self._clock()
        exempt = self._exempt(url)
        with self._lock:
            if exempt:
                self._stats.exempt[kind] += 1
                return False
            scope = "site" if start else "session"
            self._stats.failures[scope, kind] += 1
            if start:  # a session counts once for the site
                count = self._recent(self._site_failures, origin, session, now)
                if count < self.threshold:
                    return False
                why = f"its start page failed in {count} sessions, last: {reason}"
                self._blocked[origin] = BlockEntry(origin, why, now + self.ttl_s, kind)
            else:  # every failure counts, for the session alone
                key = (session, origin)
                count = self._recent(self._session_failures, key, next(self._failure_ids), now)
                if count < self.threshold:
                    return False
                why = f"{count} failures in session {session}, last: {reason}"
                self._session_blocked[key] = BlockEntry(origin, why, now + self.ttl_s, kind)
            self._stats.blocks[scope, kind] += 1
            return True

    def _recent(self, table: dict, key: object, token: object, now: float) -> int:
        """Add `token` (seen `now`) to what `table` holds for `key` and drop what left the window;
        how many are left. At the threshold the key starts over (it is about to be blocked)."""
        seen = table.get(key, {}) | {token: now}
        seen = {t: when for t, when in seen.items() if now - when < self.window_s}
        if len(seen) < self.threshold:
            table[key] = seen
        else:
            table.pop(key, None)
        return len(seen)

    def record_success(self, url: str, session: str) -> None:
        """The origin of `url` answered `session`: forget its failures (the site's and the session's)."""
        origin = origin_of(url)
        with self._lock:
            self._site_failures.pop(origin, None)
            self._session_failures.pop((session, origin), None)

    def forget(self, session: str) -> None:
        """Drop what `session` counted and blocked for itself (it ended)."""
        with self._lock:
            for table in (self._session_failures, self._session_blocked):
                for key in [k for k in table if k[0] == session]:
                    del table[key]

    def block(self, url: str, reason: str, ttl_s: float | None = None) -> None:
        """Block the origin of `url` for every session now (an operator saw a CAPTCHA)."""
        origin = origin_of(url)
        with self._lock:
            self._blocked[origin] = BlockEntry(origin, reason, self._clock() + (ttl_s or self.ttl_s))
            self._stats.blocks["site", "operator"] += 1

    def lift(self, url: str) -> BlockEntry | None:
        """Unblock the origin of `url` (an origin or any URL of it) for every session and forget
        its failures; returns the site's entry lifted, or None when it was not blocked."""
        origin = origin_of(url)
        with self._lock:
            self._site_failures.pop(origin, None)
            for table in (self._session_failures, self._session_blocked):
                for key in [k for k in table if k[1] == origin]:
                    del table[key]
            found = self._blocked.pop(origin, None)
        return found if found is not None and found.until > self._clock() else None

    def entry(self, url: str, session: str | None = None) -> BlockEntry | None:
        """Why the origin of `url` is refused (for every session, else for `session`), or None."""
        found = self._find(origin_of(url), session)
        return found[0] if found is not None else None

    def check(self, url: str, session: str | None = None) -> None:
        """Raise `SiteBlocked` when the origin of `url` is blocked for every session, or for `session`."""
        found = self._find(origin_of(url), session)
        if found is None:
            return
        entry, own = found
        if own:
            raise SiteBlocked(f"{entry.origin} is blocked for session {session} ({entry.reason}); refusing "
                              f"{url} (other sessions may still load it)")
        left = entry.until - self._clock()
        raise SiteBlocked(f"{entry.origin} is blocked for another {left:.0f} s ({entry.reason}); "
                          f"refusing {url}")

    def _find(self, origin: str, session: str | None) -> tuple[BlockEntry, bool] | None:
        """The entry that refuses `origin`: the site's, else `session`'s own (then True); expired
        entries are dropped on the way."""
        now = self._clock()
        with self._lock:
            site = self._blocked.get(origin)
            if site is not None and site.until > now:
                return site, False
            self._blocked.pop(origin, None)
            if session is None:
                return None
            own = self._session_blocked.get((session, origin))
            if own is not None and own.until > now:
                return own, True
            self._session_blocked.pop((session, origin), None)
            return None

    def entries(self) -> list[BlockEntry]:
        """The origins blocked for every session now."""
        now = self._clock()
        with self._lock:
            for origin in [o for o, e in self._blocked.items() if e.until <= now]:
                del self._blocked[origin]
            return sorted(self._blocked.values(), key=lambda e: e.origin)

    def stats(self) -> BlocklistStats:
        """A copy of the counters, with what is blocked now."""
        entries, now = self.entries(), self._clock()
        with self._lock:
            return BlocklistStats(
                failures=Counter(self._stats.failures), exempt=Counter(self._stats.exempt),
                blocks=Counter(self._stats.blocks),
                session_blocks=sum(e.until > now for e in self._session_blocked.values()), entries=entries,
                now=now)
