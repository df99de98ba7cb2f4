"""From a raw HTTP request to a site's page: the session, the mount, the visit record.

`SiteRouter` is what the site server calls for any path under a stateful site's mount
(``/shop/...``). It finds the session (the ``?session=`` parameter, else the cookie, else a fresh
id; see `webgym_sites.state`), records a GET as a page visited, calls the site with
the session's lock held and turns its `PageResponse` into status, headers and bytes. Every answer
sets the session cookie and ``Cache-Control: no-store`` (a page depends on the session's state).

No request can hurt another session, nor the site:

- a site that raises answers a 500 page (logged with its traceback), never a dropped connection,
  which a browser server counts as the site failing; the session and the server serve on;
- a redirect goes only to a path of this server (`same_site_path`; any other target is a 500);
- `SiteRouter.facts`, the ground truth of one session across every site, is the snapshot taken
  when the session's last request ended: it never waits for a request of the session in flight
  (a page that keeps one running cannot hold the judge up), and it is the state the agent saw.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs, urlencode, urlsplit

from webgym_sites.base import PageRequest, PageResponse, Site, esc, layout, same_site_path
from webgym_sites.facts import SessionFacts
from webgym_sites.state import (
    COOKIE,
    Session,
    SessionStore,
    new_session_id,
    valid_session_id,
)

__all__ = ["MAX_BODY", "RawResponse", "SiteRouter"]

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
"""The largest form body a site reads (bytes); a longer one is refused (413)."""


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


class SiteRouter:
    """The stateful sites of one server and their sessions."""

    def __init__(self, sites: Sequence[Site], store: SessionStore | None = None):
        self.sites = {site.name: site for site in sites}
        self.store = store or SessionStore()

    def site_for(self, path: str) -> Site | None:
        """The site whose mount `path` (without query) is under, if any."""
        name = path.lstrip("/").split("/", 1)[0]
        site = self.sites.get(name)
        if site is None or not (path == site.mount or path.startswith(site.mount + "/")):
            return None
        return site

    def serve(self, method: str, target: str, cookie_header: str = "", body: bytes = b"") -> RawResponse:
        """Answer ``method target`` (target: path and query) for the site it is under."""
        parts = urlsplit(target)
        site = self.site_for(parts.path)
        if site is None:
            return RawResponse(404, (("Content-Type", "text/plain; charset=utf-8"),), b"no such site\n")
        if parts.path == site.mount:  # /shop -> /shop/
            location = same_site_path(site.mount + "/" + (f"?{parts.query}" if parts.query else ""))
            return RawResponse(308, (("Location", location or site.mount + "/"),), b"")
        if len(body) > MAX_BODY:
            return RawResponse(413, (("Content-Type", "text/plain; charset=utf-8"),), b"form too large\n")
        query = parse_qs(parts.query, keep_blank_values=True)
        session_id = next((v for v in query.pop("session", []) if valid_session_id(v)), "") or self._cookie(
            cookie_header) or new_session_id()
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True) if method == "POST" else {}
        session = self.store.session(session_id)
        with session.lock:
            try:
                if method == "GET":
                    kept = urlencode([(k, v) for k, vs in query.items() for v in vs])
                    session.visit(parts.path + (f"?{kept}" if kept else ""))
                path = parts.path.removeprefix(site.mount) or "/"
                response = site.handle(PageRequest(method=method, path=path, query=query, form=form,
                                                   session=session))
                location = same_site_path(response.location) if response.location else ""
                if location is None:
                    raise ValueError(f"a redirect to {response.location!r}, not a path of this server")
            except Exception:
                log.exception("%s %s: the %s site failed (answered 500)", method, parts.path, site.name)
                response, location = self._failed(site), ""
            finally:
                session.truth = self._facts(session)
        headers = [("Set-Cookie", f"{COOKIE}={session_id}; Path=/; HttpOnly; SameSite=Lax"),
                   ("Cache-Control", "no-store"), *response.headers]
        if location:
            return RawResponse(303, (*headers, ("Location", location)), b"")
        headers.append(("Content-Type", "text/html; charset=utf-8"))
        return RawResponse(response.status, tuple(headers), response.body.encode("utf-8"))

    @staticmethod
    def _failed(site: Site) -> PageResponse:
        """The page of a request the site failed to answer (a bug of the site, already logged)."""
        home = f"<a href='{esc(site.mount)}/'>{esc(site.name)}</a>"
        body = ("<h1>Something went wrong</h1><p id='server-error'>The site could not answer this request. "
                f"Go back, or start again from its <a href='{esc(site.mount)}/'>home page</a>.</p>")
        return PageResponse(layout("Server error", home, body), status=500)

    @staticmethod
    def _cookie(header: str) -> str:
        try:
            cookie = SimpleCookie(header)
        except CookieError:
            return ""
        value = cookie[COOKIE].value if COOKIE in cookie else ""
        return value if valid_session_id(value) else ""

    def facts(self, session_id: str) -> SessionFacts:
        """The ground truth of session `session_id` (``seen`` False when it never made a request):
        the snapshot of its last finished request, read without waiting for one in flight."""
        session = self.store.get(session_id)
        truth = session.truth if session is not None else None
        if truth is None:  # never seen, or its first request is still running
            return SessionFacts(session_id=session_id, seen=session is not None)
        return truth

    def _facts(self, session: Session) -> SessionFacts:
        """The session's facts now (its lock held)."""
        records = {name: site.facts(session) for name, site in self.sites.items()}
        return SessionFacts(session_id=session.id, seen=True, visited=tuple(session.visited),
                            searches=tuple(session.searches), **records)
