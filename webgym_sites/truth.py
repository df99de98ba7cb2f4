"""The truth listener: the sessions' ground truth, for the toolkit only, on its own port.

The egress guard allowlists the site server's ``host:port``, so a page can reach every path on
that port; the facts are therefore never served there. `TruthServer` serves them on a second
listener, always bound to 127.0.0.1 and never allowlisted, and only to a caller that sends
``Authorization: Bearer <token>`` (a request carrying ``Origin``, which a web page's fetch does,
is refused too). `TruthClient` is its typed client, which a judge uses when the site server runs
in another process; in-process, call `SiteServer.facts` instead. Either way the facts are the
snapshot of the session's last finished request (`webgym_sites.router`): a request
of the session still running never holds a read up.

    GET /facts?session=<id>   -> SessionFacts as JSON (200), 401 without the token, 400 bad id
    GET /health               -> {"ok": true} (with the token)
"""

from __future__ import annotations

import hmac
import http.server
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import httpx

from webgym_sites.errors import TruthTimeout, TruthUnavailable
from webgym_sites.facts import SessionFacts
from webgym_sites.serving import ServerThread
from webgym_sites.state import valid_session_id

__all__ = ["TRUTH_TOKEN_ENV", "TruthClient", "TruthServer", "TruthSettings", "TruthTimeout",
           "TruthUnavailable"]

log = logging.getLogger(__name__)

TRUTH_TOKEN_ENV = "WEBGYM_TRUTH_TOKEN"
"""The environment variable that holds the truth listener's bearer token (`serve-sites` reads it
too, else it draws one and prints it)."""


@dataclass(frozen=True)
class TruthSettings:
    """Where a run reads the ground truth of its local-site episodes (the ``--truth-*`` flags)."""

    truth_url: str | None = None
    """The site server's truth listener (``webgym-rollout serve-sites`` prints it). With it, each
    site-task episode's facts are kept in the run's truth.jsonl and ``--judge site`` can judge them."""
    truth_token: str | None = field(default=None, metadata={"env": TRUTH_TOKEN_ENV})
    """The truth listener's bearer token."""

    def __post_init__(self) -> None:
        if self.truth_url and not self.truth_token:
            raise ValueError(f"truth_token: --truth-url needs the listener's bearer token (--truth-token or "
                             f"${TRUTH_TOKEN_ENV})")

    def client(self) -> TruthClient | None:
        """A client of the listener, or None when no URL is set."""
        return TruthClient(self.truth_url, self.truth_token or "") if self.truth_url else None


class _TruthHandler(http.server.BaseHTTPRequestHandler):
    server: _TruthHTTPServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        log.debug("truth %s " + format, self.address_string(), *args)

    def _send(self, status: int, payload: dict | str) -> None:
        body = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.headers.get("Origin") is not None:
            self._send(403, {"error": "not for web pages"})
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.server.token}".encode()):
            self._send(401, {"error": "missing or wrong bearer token"})
            return
        parts = urlsplit(self.path)
        if parts.path == "/health":
            self._send(200, {"ok": True})
        elif parts.path == "/facts":
            session_id = (parse_qs(parts.query).get("session") or [""])[0]
            if not valid_session_id(session_id):
                self._send(400, {"error": f"session: {session_id!r} is not a session id"})
                return
            self._send(200, self.server.facts(session_id).model_dump_json())
        else:
            self._send(404, {"error": f"no such path {parts.path}"})


class _TruthHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, token: str, facts: Callable[[str], SessionFacts]):
        super().__init__(("127.0.0.1", port), _TruthHandler)
        self.token = token
        self.facts = facts


class TruthServer:
    """The truth listener on 127.0.0.1:`port` (0: any free port) in a background thread."""

    def __init__(self, facts: Callable[[str], SessionFacts], port: int = 0, token: str | None = None):
        self.token = token or secrets.token_urlsafe(24)
        self._serving = ServerThread(_TruthHTTPServer(port, self.token, facts), "webgym-truth")
        self.port = self._serving.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> TruthServer:
        self._serving.start()
        return self

    def stop(self) -> None:
        self._serving.stop()


class TruthClient:
    """Reads a session's facts from a truth listener. Raises `TruthUnavailable` naming the URL
    (`TruthTimeout` when no answer came within `timeout_s`)."""

    def __init__(self, url: str, token: str, timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self._timeout_s = timeout_s
        self._http = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s,
                                  trust_env=False)

    def facts(self, session_id: str) -> SessionFacts:
        url = f"{self.url}/facts"
        try:
            response = self._http.get(url, params={"session": session_id})
        except httpx.TimeoutException as exc:
            raise TruthTimeout(f"{url}: no answer within {self._timeout_s:g} s "
                               f"({exc.__class__.__name__})") from exc
        except httpx.HTTPError as exc:
            raise TruthUnavailable(f"{url}: {exc.__class__.__name__}: {exc}") from exc
        if response.status_code != 200:
            raise TruthUnavailable(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
        try:
            return SessionFacts.model_validate_json(response.content)
        except ValueError as exc:
            raise TruthUnavailable(f"{url}: the answer is not a SessionFacts record: {exc}") from exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TruthClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
