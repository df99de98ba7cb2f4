"""Where the browsers may go: the egress decision and the URL guard.

One set of rules decides every destination, at two places:

- `UrlGuard.reason(url)`: before a request leaves the page (the page's request interception,
  `webgym_rollout.browser.navigation`, and the server's checks of a navigate or create request).
  Pure: no DNS. Only ``http(s)`` URLs (and ``about:blank``); never an IP literal that is not a
  public address (`address_reason`), nor a ``localhost``-style or single-label name, unless the
  host is allowlisted.
- `UrlGuard.connect_reason(host, port, address)`: in the egress proxy
  (`webgym_rollout.browser.egress`), which every connection of Chromium passes, after it resolved
  the name itself: the address it is about to connect to must be public (`address_reason`) unless
  the host, as spelled in the request, is allowlisted for that port.

`address_reason` refuses loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local
(169.254/16, fe80::/10, where cloud metadata services live), CGNAT (100.64/10), multicast,
reserved, unspecified and documentation ranges, and judges an IPv6 address that carries an IPv4
address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``, 6to4
``2002::/16``) by the IPv4 address it carries.

Allowlist entries (``--allow-hosts``) open hosts the rules refuse. The rule: allowlist a
``host:port``, never a whole host. ``127.0.0.1:8400``, ``localhost:8400`` and ``[::1]:8400`` open
that port only; a bare loopback, private, link-local or other non-public IP literal, ``localhost``
or a ``*.localhost`` name (no port) is refused when the guard is built (`AllowlistError`, naming
the entry): on this machine every port but the site's belongs to something a page must never
reach (the browser server's API, the policy server, Ray, a metadata service). A name without a port
(``intranet.example``, ``*.example``: the domain and its subdomains) stays allowed, for intranet
sites: it opens that name on every port at the addresses it resolves to, private ones included,
but never a loopback, unspecified or link-local address (the egress proxy checks what it resolved;
give ``name:port`` to reach this machine through a name). An entry matches the host as the URL
spells it, never the address a name resolves to: a public name whose DNS answer points at an
allowlisted local address is refused (DNS rebinding).

`origin_of` is the key of the failure blocklist (`webgym_rollout.browser.blocklist`), which never
counts an origin an allowlist entry with a port opens (`UrlGuard.allowlisted_port`).

Exceptions: `NavigationRefused` (names the URL, from `webgym_rollout.errors`); `AllowlistError`
(``RolloutError`` and ``ValueError``: an allowlist entry the guard does not take).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from webgym_rollout.errors import AllowlistError, NavigationRefused

__all__ = [
    "AllowlistError",
    "IPAddress",
    "UrlGuard",
    "address_reason",
    "ip_literal",
    "is_loopback_host",
    "origin_of",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_INTERNAL_URLS = frozenset({"about:blank"})
# Suffixes that name the local machine or a private network, never a public website.
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".lan")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# IPv6 prefixes whose last 32 bits are an IPv4 address the packets are translated to (NAT64).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# Deprecated site-local addresses: used as private ones, yet `is_global` calls them global.
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")


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


def ip_literal(host: str) -> IPAddress | None:
    """The address `host` spells literally, legacy IPv4 forms included (``2130706433``, ``0x7f.1``,
    ``0177.0.0.1``); None for a name. Never does DNS."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        if not host or not all(part.isalnum() for part in host.split(".")):
            return None
        try:
            # inet_aton parses the shorthand/hex/octal forms browsers accept; it never does DNS.
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None


def _carried_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """(what kind of translation, the IPv4 address) for an IPv6 address that carries one."""
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", address.ipv4_mapped
    if any(address in net for net in _NAT64):
        return "NAT64", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return "6to4", address.sixtofour
    return None


def address_reason(address: IPAddress) -> str | None:
    """Why a browser may not connect to `address`, or None for a public unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = _carried_ipv4(address)
        if carried is not None:
            kind, inner = carried
            why = address_reason(inner)
            return None if why is None else f"{kind} address {address} carries {inner}: {why}"
        if address in _SITE_LOCAL:
            return f"address {address} is site-local (private)"
    if address.is_loopback:
        return f"address {address} is loopback"
    if address.is_link_local:
        return f"address {address} is link-local (e.g. a cloud metadata service)"
    if address.is_multicast:
        return f"address {address} is multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.IPv4Network("100.64.0.0/10"):
        return f"address {address} is shared (CGNAT) address space"
    if address.is_unspecified or address.is_reserved:
        return f"address {address} is reserved"
    if address.is_private or not address.is_global:
        return f"address {address} is private"
    return None


def _machine_local(address: IPAddress) -> bool:
    """Whether connecting to `address` reaches this machine or its link (loopback, unspecified,
    link-local), judging an IPv6 address that carries an IPv4 one by the IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = _carried_ipv4(address)
        if carried is not None:
            address = carried[1]
    return address.is_loopback or address.is_unspecified or address.is_link_local


@dataclass(frozen=True)
class _Entry:
    """One parsed allowlist entry: a host (``*.`` prefix: the domain and its subdomains) and a port
    (None: every port; only for names and public addresses)."""

    host: str
    port: int | None

    def matches(self, host: str, port: int | None) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.host.startswith("*."):
            return host == self.host[2:] or host.endswith(self.host[1:])
        return host == self.host


def _parse_entry(entry: str) -> _Entry:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port``, ``v6`` or ``*.domain[:port]`` -> `_Entry`;
    `AllowlistError` naming the entry for a malformed one or a whole local host."""
    text = entry.strip().lower()
    port = ""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise AllowlistError(f"allow_hosts: {entry!r} is not host or host:port ([::1]:8400 for IPv6)")
        port = rest.removeprefix(":")
        if rest and not port:
            raise AllowlistError(f"allow_hosts: {entry!r} has an empty port")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
        if not port:
            raise AllowlistError(f"allow_hosts: {entry!r} has an empty port")
    else:
        host = text  # a name, an IPv4 literal, or an IPv6 literal without brackets (no port)
    host = host.rstrip(".")
    if not host or any(c in host for c in "/@?#[] ") or host in ("*", "*."):
        raise AllowlistError(f"allow_hosts: {entry!r} names no host (give host:port, e.g. 127.0.0.1:8400)")
    number = None
    if port:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise AllowlistError(f"allow_hosts: {entry!r} has a bad port {port!r} (1..65535)")
        number = int(port)
    if number is None:
        address = None if host.startswith("*.") else ip_literal(host)
        why = address_reason(address) if address is not None else None
        if why is None and (host == "localhost" or host.endswith(".localhost")):
            why = f"'{host}' names this machine"
        if why is not None:
            example = f"[{host}]:8400" if ":" in host else f"{host}:8400"
            raise AllowlistError(
                f"allow_hosts: {entry!r} would open every port of a whole local host ({why}), where the "
                "browser server's API, the policy server and other control planes listen; allowlist a "
                f"host:port instead, e.g. {example} for a site on port 8400")
    return _Entry(host, number)


class UrlGuard:
    """Decides where a browser may go (see the module docstring for the rules).

    `allow_hosts` entries open hosts the default rules refuse: ``127.0.0.1:8400`` (that port only),
    ``intranet.example``, ``*.example`` (the name and its subdomains, every port, never a loopback or
    link-local address). A bare local address or ``localhost`` raises `AllowlistError`.
    """

    def __init__(self, allow_hosts: Iterable[str] = ()):
        self.allow_hosts = tuple(h.strip().lower() for h in allow_hosts if h.strip())
        self._entries = tuple(_parse_entry(h) for h in self.allow_hosts)

    def _match(self, host: str, port: int | None) -> _Entry | None:
        host = host.strip("[]").rstrip(".").lower()
        exact = next((e for e in self._entries if e.port is not None and e.matches(host, port)), None)
        return exact or next((e for e in self._entries if e.matches(host, port)), None)

    def allowlisted(self, host: str, port: int | None) -> bool:
        """Whether `host` (as the URL or the proxy request spells it) is allowlisted on `port`."""
        return self._match(host, port) is not None

    def allowlisted_port(self, url: str) -> bool:
        """Whether an allowlist entry with a port opens `url`'s host and port (``127.0.0.1:8400``
        opens ``http://127.0.0.1:8400/shop/``): a site the operator named, such as the local site
        server, which answers every session; the failure blocklist never counts it."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return False
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            return False
        entry = self._match(parts.hostname or "", port or _DEFAULT_PORTS[scheme])
        return entry is not None and entry.port is not None

    def host_reason(self, host: str, port: int | None) -> str | None:
        """Why `host` on `port` is refused before any name is resolved, or None (a public IP
        literal, an allowlisted host, or a name whose address decides: `connect_reason`)."""
        host = host.strip("[]").rstrip(".").lower()
        if not host:
            return "URL has no host"
        if self.allowlisted(host, port):
            return None
        address = ip_literal(host)
        if address is not None:
            return address_reason(address)
        if host == "localhost" or host.endswith(_LOCAL_SUFFIXES):
            return f"host '{host}' names a local machine"
        if "." not in host:
            return f"single-label host '{host}' names a private network machine"
        return None

    def connect_reason(self, host: str, port: int, address: IPAddress) -> str | None:
        """Why the egress proxy may not connect to `address` (what it resolved `host` to) on
        `port`, or None. A host allowlisted with its port may go to any address; one allowlisted
        by name alone (no port) to any but a loopback, unspecified or link-local one; any other host
        only to a public one."""
        entry = self._match(host, port)
        if entry is not None:
            if entry.port is not None or not _machine_local(address):
                return None
            return (f"{host} resolves to {address}, and the allowlist entry '{entry.host}' has no port: "
                    f"a whole host never opens this machine or its link; allowlist {host}:{port}")
        why = address_reason(address)
        if why is None or ip_literal(host.strip("[]")) == address:
            return why
        return f"{host} resolves to {address}: {why}"

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
        return self.host_reason(parts.hostname or "", port or _DEFAULT_PORTS[scheme])

    def allows(self, url: str) -> bool:
        return self.reason(url) is None

    def check(self, url: str) -> None:
        """Raise `NavigationRefused` naming `url` when it may not be loaded."""
        why = self.reason(url)
        if why is not None:
            raise NavigationRefused(f"refused {url}: {why}{refusal_hint(why)}", url=url)


def refusal_hint(reason: str) -> str:
    """What an operator can do about a refusal: ``--allow-hosts`` opens a host:port, never a scheme."""
    if reason.startswith(("scheme ", "malformed ", "URL has no host")):
        return ""
    return "; use --allow-hosts host:port to open it"


def origin_of(url: str) -> str:
    """The blocklist key of a URL: its origin, ``scheme://host[:port]`` in lower case, the port
    left out when it is the scheme's default (``http://127.0.0.1:8400``, ``https://example.com``).
    A URL without a host is its own key."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return url
    scheme, host = parts.scheme.lower(), (parts.hostname or "").rstrip(".").lower()
    if not scheme or not host:
        return url
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"
