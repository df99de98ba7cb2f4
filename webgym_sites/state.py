"""Per-session server-side state of the stateful sites, keyed by a session id.

How a session id is tied to a browser session: the id travels in the ``webgym_session`` cookie
(path ``/``). A request whose URL carries ``?session=<id>`` (8 to 64 characters of letters, digits,
``-`` and ``_``) takes that id and the response sets the cookie to it; this is how the toolkit opens
an episode: it draws a fresh, unguessable id (`new_session_id`), appends it to the task's start URL
(`with_session`), and later asks for that id's facts. A browser context reused from an earlier
episode thus starts a new session, whatever cookie it still holds. A request with neither gets a
fresh id and the cookie; its id can be read from the browser context's cookies. Ids are
unguessable, so concurrent episodes never see each other's state.

`SessionStore` holds the sessions (at most `max_sessions`; the least recently used one is dropped
beyond that). Each `Session` has a lock its site holds while it handles a request, the pages visited
and searches made (shared by every site), one state object per site (`Session.site_state`), and
`Session.truth`, the snapshot of its facts the router takes as each request ends (what the truth
reads, without the lock).
"""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from webgym_sites.facts import SessionFacts

__all__ = ["COOKIE", "MAX_VISITED", "Session", "SessionStore", "new_session_id", "session_in",
           "valid_session_id", "with_session"]

COOKIE = "webgym_session"
"""The cookie that carries the session id."""
MAX_VISITED = 2_000
"""The most pages (and searches) a session remembers; older ones are dropped first."""
_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


def new_session_id() -> str:
    """A fresh, unguessable session id (22 URL-safe characters)."""
    return secrets.token_urlsafe(16)


def valid_session_id(value: str) -> bool:
    """`value` is a session id the sites accept (8-64 letters, digits, ``-``, ``_``)."""
    return bool(_ID.match(value or ""))


def with_session(url: str, session_id: str) -> str:
    """`url` with ``session=<session_id>`` in its query (replacing one already there)."""
    if not valid_session_id(session_id):
        raise ValueError(f"session id {session_id!r}: expected 8-64 letters, digits, '-' or '_'")
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "session"]
    query.append(("session", session_id))
    return urlunsplit(parts._replace(query=urlencode(query)))


def session_in(urls: Iterable[str]) -> str:
    """The ``session`` parameter of the first URL that carries a valid one (``""`` when none does)."""
    for url in urls:
        for value in parse_qs(urlsplit(url or "").query).get("session", []):
            if valid_session_id(value):
                return value
    return ""


class Session:
    """One session's state. Hold `lock` while reading or changing it."""

    def __init__(self, session_id: str):
        self.id = session_id
        self.lock = threading.Lock()
        self.visited: list[str] = []
        self.searches: list[str] = []
        self.truth: SessionFacts | None = None
        """The session's facts as its last finished request left them (set by the router, with the
        lock held; read without it: a request in flight never holds the truth up)."""
        self._sites: dict[str, Any] = {}

    def site_state(self, name: str, factory: Callable[[], Any]) -> Any:
        """The state object of site `name` in this session, made by `factory` on first use."""
        state = self._sites.get(name)
        if state is None:
            state = self._sites[name] = factory()
        return state

    def peek_site_state(self, name: str) -> Any:
        """The state of site `name`, or None when the session never used that site."""
        return self._sites.get(name)

    def visit(self, page: str) -> None:
        self.visited.append(page)
        del self.visited[:-MAX_VISITED]

    def search(self, site: str, query: str) -> None:
        self.searches.append(f"{site}: {query}")
        del self.searches[:-MAX_VISITED]


class SessionStore:
    """The sessions of one site server, thread-safe."""

    def __init__(self, max_sessions: int = 10_000):
        if max_sessions < 1:
            raise ValueError(f"max_sessions: must be >= 1, got {max_sessions}")
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def session(self, session_id: str) -> Session:
        """The session `session_id`, created when new (and marked most recently used)."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                session = self._sessions[session_id] = Session(session_id)
                while len(self._sessions) > self.max_sessions:
                    self._sessions.popitem(last=False)
            else:
                self._sessions.move_to_end(session_id)
            return session

    def get(self, session_id: str) -> Session | None:
        """The session `session_id`, or None when it never made a request (or was dropped)."""
        with self._lock:
            return self._sessions.get(session_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
