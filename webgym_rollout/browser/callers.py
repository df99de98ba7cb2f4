"""Who may call a local control API: the Host and Origin checks of the browser server and the CPU
policy server.

Both servers answer on a port of the machine where untrusted pages run. A page cannot read their
answers across origins, but it could still send them requests: by DNS rebinding (a name of the
page's site that starts resolving to 127.0.0.1, so the browser sends ``Host: evil.example:8300``)
or straight to ``http://127.0.0.1:8300`` (the browser adds ``Origin`` or ``Sec-Fetch-Site``).
Our own clients (`webgym_rollout.browser.client`, the OpenAI client, `push_weights`, httpx) send
``Host: <the URL's host:port>`` and neither of the others. So `CallerCheck` refuses a request:

- whose ``Host`` is not one of the server's own names (HTTP 421, kind ``misdirected``): its bind
  address on its port; on a loopback bind also ``127.0.0.1``, ``localhost`` and ``[::1]``; on a
  wildcard bind (``0.0.0.0``, ``::``) any IP literal and ``localhost`` (an IP literal cannot come
  from DNS rebinding); plus the names in `server_names` (``name`` for any port, ``name:port``);
- that carries ``Origin`` (a web page's request), unless the origin is in `allowed_origins` or is
  the server's own (its ``/docs`` page), or ``Sec-Fetch-Site: cross-site`` / ``same-site``
  (another page's navigation, image or no-cors request) (HTTP 403, kind ``foreign_origin``).

`CallerCheckMiddleware` applies it to every HTTP request of an ASGI app, answers a refusal with
the server's own JSON error shape and counts it (`CallerCheck.refused`, by kind, for ``/metrics``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from webgym_rollout.browser.guard import ip_literal, is_loopback_host

__all__ = ["CallerCheck", "CallerCheckMiddleware", "Refusal"]

log = logging.getLogger(__name__)

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_WILDCARDS = ("0.0.0.0", "::", "")
_FOREIGN_SITES = (b"cross-site", b"same-site")


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: its HTTP status, a snake_case kind and a message naming the header."""

    status: int
    kind: str
    message: str


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``host[:port]`` / ``[v6][:port]`` -> (lower-case host without brackets, port or None);
    None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
        if rest and not port:
            return None
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
        if not port:
            return None
    elif ":" in value:
        return None  # an IPv6 address must be in brackets in a Host header
    else:
        host, port = value, ""
    if not value.startswith("["):
        host = host.removesuffix(".")  # a fully qualified name: "localhost." is "localhost"
    if not host or any(c in host for c in "/@?#\\ \t"):
        return None
    if port and (not port.isdigit() or not 0 < int(port) < 65536):
        return None
    return host, int(port) if port else None


class CallerCheck:
    """The Host and Origin rules of the module docstring for a server bound to `bind_host` and
    `port` (0: not known yet; set `port` once bound). `server_names`: more names clients use
    (``browsers.example``, ``browsers.example:8300``); `allowed_origins`: web origins whose pages
    may call it (``https://dashboard.example``)."""

    def __init__(self, bind_host: str, port: int = 0, *, server_names: Iterable[str] = (),
                 allowed_origins: Iterable[str] = ()):
        self.bind_host = bind_host.strip().strip("[]").lower()
        self.port = port
        self.server_names: list[tuple[str, int | None]] = []
        for name in server_names:
            parsed = _split_host(name) if name.strip() else None
            if parsed is None:
                raise ValueError(f"server_names: {name!r} is not a host name or host:port")
            self.server_names.append(parsed)
        self.allowed_origins = frozenset(o.strip().lower().rstrip("/") for o in allowed_origins if o.strip())
        for origin in self.allowed_origins:
            if "://" not in origin or origin.count("/") != 2:
                raise ValueError(f"allowed_origins: {origin!r} is not an origin (scheme://host[:port])")
        self.refused: Counter[str] = Counter()
        """Requests refused, by kind (``misdirected``, ``foreign_origin``)."""
        self.checked = 0
        """HTTP requests checked (refused or not): every request the server received."""

    def _own_host(self, host: str, port: int | None) -> bool:
        for name, want in self.server_names:
            if name == host and (want is None or want == port):
                return True
        if self.port and port != self.port:
            return False
        if host == self.bind_host:
            return True
        if is_loopback_host(self.bind_host):
            return host in _LOOPBACK_NAMES
        if self.bind_host in _WILDCARDS:
            return host == "localhost" or ip_literal(host) is not None
        return False

    def refusal(self, headers: Iterable[tuple[bytes, bytes]]) -> Refusal | None:
        """The refusal of a request with these (lower-case name, value) headers, or None."""
        hosts, origins, sites = [], [], []
        for name, value in headers:
            if name == b"host":
                hosts.append(value)
            elif name == b"origin":
                origins.append(value)
            elif name == b"sec-fetch-site":
                sites.append(value)
        if len(hosts) != 1:
            return Refusal(421, "misdirected",
                           f"{len(hosts)} Host headers: send exactly one, the host:port of this server's URL")
        raw_host = hosts[0].decode("latin-1").strip()
        parsed = _split_host(raw_host)
        if parsed is None or not self._own_host(*parsed):
            return Refusal(421, "misdirected",
                           f"Host {raw_host[:200]!r} is not a name this server answers to; a client "
                           "that reaches it by another name needs the server's --server-names")
        if origins:
            origin = origins[-1].decode("latin-1").strip().lower().rstrip("/")
            own = f"http://{raw_host.lower()}"
            if len(origins) == 1 and (origin in self.allowed_origins or origin == own):
                return None
            return Refusal(403, "foreign_origin",
                           f"a web page's request (Origin {origin[:200]!r}) may not call this server; "
                           "list the origin in --allowed-origins to allow it")
        if any(site.strip().lower() in _FOREIGN_SITES for site in sites):
            return Refusal(403, "foreign_origin",
                           "a request another site's page made (Sec-Fetch-Site) may not call this server")
        return None


class CallerCheckMiddleware:
    """Plain ASGI middleware: a request `check` refuses gets `respond(refusal)` (an ASGI response
    in the server's own error shape), is counted in ``check.refused`` and never reaches the app."""

    def __init__(self, app: Any, check: CallerCheck, respond: Callable[[Refusal], Any]):
        self.app, self.check, self.respond = app, check, respond

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.check.checked += 1
            refusal = self.check.refusal(scope["headers"])
            if refusal is not None:
                self.check.refused[refusal.kind] += 1
                log.info("refused %s %s: %s", scope.get("method", ""), scope.get("path", ""), refusal.message)
                await self.respond(refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)
