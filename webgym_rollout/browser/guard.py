"""Where the browsers may go: the URL guard and the per-site failure blocklist.

`UrlGuard.check` is a pure decision function (no DNS, no network): only ``http(s)`` URLs (and
``about:blank``), and never a private, loopback, link-local or otherwise non-global IP literal, nor a
``localhost``-style or single-label name, unless the host is on the allowlist. The browser pool
applies it to every request a session's page makes, including each hop of a redirect chain and the
subresources of pages the agent opens (see `webgym_rollout.browser.navigation`).

Known limits: names are not resolved, so a public name that resolves to a private address passes
(DNS rebinding); WebSockets opened by workers are not intercepted (pages' WebSockets and workers'
other requests are).

`SiteBlocklist` counts failures per site (timeouts, crashes, CAPTCHA or block pages) and refuses new
sessions on a site that failed `threshold` times within `window_s`, until the entry expires.

Exceptions (from `webgym_rollout.errors`): `NavigationRefused` (names the URL), `SiteBlocked`.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from webgym_rollout.errors import NavigationRefused, SiteBlocked

__all__ = ["BlockEntry", "SiteBlocklist", "UrlGuard", "is_loopback_host", "site_of"]

_INTERNAL_URLS = frozenset({"about:blank"})
# Suffixes that name the local machine or a private network, never a public website.
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".lan")



def is_loopback_host(host: str) -> bool:
    """Whether `host` (a name or an IP literal, IPv6 possibly in brackets) is this machine only.

    Servers use it to decide whether binding `host` needs a token; clients to tell local URLs."""
    host = host.strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `host` spells literally, including legacy IPv4 forms (``2130706433``, ``0x7f.1``)."""
    host = host.strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not host or not all(part.isalnum() for part in host.split(".")):
            return None
        try:
            # inet_aton parses the shorthand/hex/octal forms browsers accept; it never does DNS.
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _host_matches(host: str, port: int | None, pattern: str) -> bool:
    pattern = pattern.lower().strip()
    want_host, _, want_port = pattern.rpartition(":") if pattern.count(":") == 1 else (pattern, "", "")
    if want_port and (not want_port.isdigit() or port != int(want_port)):
        return False
    want_host = want_host.strip("[]")
    if want_host.startswith("*."):
        return host == want_host[2:] or host.endswith(want_host[1:])
    return host == want_host


class UrlGuard:
    """Decides whether a browser may load a URL.

    `allow_hosts` entries open hosts the default rules refuse: ``127.0.0.1``, ``127.0.0.1:8400``
    (that port only), ``intranet.example``, ``*.example`` (the domain and its subdomains).
    """

    def __init__(self, allow_hosts: Iterable[str] = ()):
        self.allow_hosts = tuple(h.strip().lower() for h in allow_hosts if h.strip())

    def reason(self, url: str) -> str | None:
        """Why `url` is refused, or None when it may be loaded. Pure: no DNS, no network."""
        if url in _INTERNAL_URLS:
            return None
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            return f"malformed URL ({exc})"
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            return f"scheme '{scheme or '(none)'}' is not allowed (only http and https)"
        host = (parts.hostname or "").rstrip(".").lower()
        if not host:
            return "URL has no host"
        if any(_host_matches(host, port, pattern) for pattern in self.allow_hosts):
            return None
        address = _ip_literal(host)
        if address is not None:
            if not address.is_global or address.is_multicast:
                return f"address {address} is private, loopback, link-local or reserved"
            return None
        if host == "localhost" or host.endswith(_LOCAL_SUFFIXES):
            return f"host '{host}' names a local machine"
        if "." not in host:
            return f"single-label host '{host}' names a private network machine"
        return None

    def allows(self, url: str) -> bool:
        return self.reason(url) is None

    def check(self, url: str) -> None:
        """Raise `NavigationRefused` naming `url` when it may not be loaded."""
        why = self.reason(url)
        if why is not None:
            raise NavigationRefused(f"refused {url}: {why}; use --allow-hosts to open a host", url=url)


def site_of(url: str) -> str:
    """The blocklist key of a URL: its lower-case host without a leading ``www.``."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        host = ""
    return host.removeprefix("www.") or url


@dataclass(frozen=True)
class BlockEntry:
    site: str
    reason: str
    until: float
    """`time.monotonic()` value at which the entry expires."""


class SiteBlocklist:
    """Per-site failure counts; a site with `threshold` failures within `window_s` is refused
    for `ttl_s` seconds. Thread-safe; the clock is injectable for tests."""

    def __init__(
        self,
        *,
        threshold: int = 3,
        window_s: float = 600.0,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if threshold < 1:
            raise ValueError(f"blocklist threshold must be >= 1, got {threshold}")
        self.threshold, self.window_s, self.ttl_s = threshold, window_s, ttl_s
        self._clock = clock
        self._failures: dict[str, list[float]] = {}
        self._blocked: dict[str, BlockEntry] = {}
        self._lock = threading.Lock()

    def record_failure(self, url: str, reason: str) -> bool:
        """Count one failure of the site of `url`; True when the site is now blocked."""
        site, now = site_of(url), self._clock()
        with self._lock:
            recent = [t for t in self._failures.get(site, []) if now - t < self.window_s] + [now]
            self._failures[site] = recent
            if len(recent) >= self.threshold:
                self._blocked[site] = BlockEntry(
                    site, f"{len(recent)} failures, last: {reason}", now + self.ttl_s
                )
                self._failures.pop(site, None)
                return True
            return False

    def record_success(self, url: str) -> None:
        with self._lock:
            self._failures.pop(site_of(url), None)

    def block(self, url: str, reason: str, ttl_s: float | None = None) -> None:
        """Block a site now (e.g. an operator or a client saw a CAPTCHA)."""
        site = site_of(url)
        with self._lock:
            self._blocked[site] = BlockEntry(site, reason, self._clock() + (ttl_s or self.ttl_s))

    def entry(self, url: str) -> BlockEntry | None:
        site, now = site_of(url), self._clock()
        with self._lock:
            found = self._blocked.get(site)
            if found is not None and found.until <= now:
                del self._blocked[site]
                return None
            return found

    def check(self, url: str) -> None:
        """Raise `SiteBlocked` when the site of `url` is blocked."""
        found = self.entry(url)
        if found is not None:
            left = found.until - self._clock()
            raise SiteBlocked(
                f"site {found.site} is blocked for another {left:.0f} s ({found.reason}); refusing {url}"
            )

    def entries(self) -> list[BlockEntry]:
        now = self._clock()
        with self._lock:
            for site in [s for s, e in self._blocked.items() if e.until <= now]:
                del self._blocked[site]
            return sorted(self._blocked.values(), key=lambda e: e.site)
