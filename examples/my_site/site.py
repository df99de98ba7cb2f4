"""The Larkspur Library: a tiny stateful website with ground truth, on 127.0.0.1.

Pages (every one keeps the visitor's session, from ``?session=<id>`` or the cookie):
``/`` the shelves, ``/shelf/<name>`` and ``/books`` lists of books, ``/book/<id>`` one book with a
"Reserve this book" button (a POST to ``/book/<id>/reserve``), ``/reservations`` what the session
reserved. The catalogue is drawn from a seed, so the same seed gives the same books.

The ground truth (what each session reserved) is served on a second port, never on the site's own:
``GET /truth/<session>`` answers ``{"reserved": [...], "visited": [...]}``. Browsers are allowed the
site's ``host:port`` only, so no page can read the truth; a request with an ``Origin`` header (what a
page's fetch sends) is refused all the same.
"""

from __future__ import annotations

import html
import http.server
import json
import random
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

COOKIE = "library_session"
_SESSION = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
_WORDS = ("Quiet", "Copper", "Northern", "Hidden", "Silver", "Winter", "Paper", "Amber", "Distant", "Salt")
_THINGS = ("Harbour", "Orchard", "Lantern", "Meadow", "Archive", "Compass", "Garden", "Tide", "Signal")
_AUTHORS = ("Ines Marlow", "Tomas Reyle", "Ada Fenwick", "Oskar Lind", "Maren Holt", "Jun Okafor")
SHELVES = ("fiction", "history", "science")


@dataclass(frozen=True)
class Book:
    book_id: str
    title: str
    author: str
    year: int
    shelf: str


def catalogue(seed: int = 0, size: int = 12) -> list[Book]:
    """`size` books with distinct titles, the same for the same `seed`."""
    rng = random.Random(seed)
    titles = rng.sample([f"The {word} {thing}" for word in _WORDS for thing in _THINGS], size)
    return [Book(f"b{i + 1:02d}", title, rng.choice(_AUTHORS), rng.randint(1950, 2024), SHELVES[i % 3])
            for i, title in enumerate(titles)]


# --8<-- [start:state]
@dataclass
class Session:
    """What one visitor did: the truth the judge reads."""

    reserved: list[str] = field(default_factory=list)
    visited: list[str] = field(default_factory=list)
# --8<-- [end:state]


def _page(title: str, body: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><title>{html.escape(title)} - Larkspur Library</title>"
            "<style>body{font:18px sans-serif;margin:24px} li{margin:8px 0} button{font-size:18px}</style>"
            f"</head><body><p><a href='/'>Larkspur Library</a> | <a href='/reservations'>My reservations</a>"
            f"</p><h1>{html.escape(title)}</h1>{body}</body></html>").encode()


def _links(books: list[Book]) -> str:
    items = "".join(f"<li><a href='/book/{b.book_id}'>{html.escape(b.title)}</a> by {html.escape(b.author)}"
                    "</li>" for b in books)
    return f"<ul>{items}</ul>"


class _SiteHandler(http.server.BaseHTTPRequestHandler):
    site: LibrarySite

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        pass

    def _session(self) -> tuple[str, Session]:
        """The request's session id (query first, then the cookie; a fresh one otherwise) and state."""
        query = parse_qs(urlsplit(self.path).query).get("session", [""])[0]
        cookie = re.search(rf"{COOKIE}=([A-Za-z0-9_-]+)", self.headers.get("Cookie", ""))
        session_id = query if _SESSION.match(query) else cookie.group(1) if cookie else ""
        if not _SESSION.match(session_id):
            session_id = f"visitor-{random.getrandbits(64):016x}"
        with self.site.lock:
            return session_id, self.site.sessions.setdefault(session_id, Session())

    def _answer(self, status: int, body: bytes, session_id: str, location: str = "") -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", f"{COOKIE}={session_id}; Path=/; SameSite=Lax")
        if location:
            self.send_header("Location", location)
        self.end_headers()
        self.wfile.write(body)

    # --8<-- [start:pages]
    def do_GET(self) -> None:
        session_id, session = self._session()
        path = urlsplit(self.path).path
        with self.site.lock:
            session.visited.append(path)
        books = self.site.books
        by_id = {book.book_id: book for book in books}
        shelf = path.removeprefix("/shelf/")
        book = by_id.get(path.removeprefix("/book/"))
        if path == "/":
            shelves = "".join(f"<li><a href='/shelf/{name}'>{name.title()}</a></li>" for name in SHELVES)
            body = _page("Shelves", f"<ul>{shelves}<li><a href='/books'>All books</a></li></ul>")
        elif path == "/books":
            body = _page("All books", _links(books))
        elif shelf in SHELVES:
            body = _page(shelf.title(), _links([b for b in books if b.shelf == shelf]))
        elif book is not None:
            body = _page(book.title, f"<p>by {html.escape(book.author)}, {book.year}</p>"
                         f"<form method='post' action='/book/{book.book_id}/reserve'>"
                         "<button type='submit'>Reserve this book</button></form>")
        elif path == "/reservations":
            mine = [by_id[book_id] for book_id in session.reserved]
            body = _page("My reservations", _links(mine) if mine else "<p>Nothing reserved yet.</p>")
        else:
            self._answer(404, _page("Not found", "<p>No such page.</p>"), session_id)
            return
        self._answer(200, body, session_id)

    def do_POST(self) -> None:
        session_id, session = self._session()
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        book_id = urlsplit(self.path).path.removeprefix("/book/").removesuffix("/reserve")
        if book_id not in {book.book_id for book in self.site.books}:
            self._answer(404, _page("Not found", "<p>No such book.</p>"), session_id)
            return
        with self.site.lock:
            if book_id not in session.reserved:
                session.reserved.append(book_id)
        self._answer(303, b"", session_id, location="/reservations")
    # --8<-- [end:pages]


class _TruthHandler(http.server.BaseHTTPRequestHandler):
    site: LibrarySite

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        pass

    # --8<-- [start:truth]
    def do_GET(self) -> None:
        session_id = self.path.removeprefix("/truth/")
        if self.headers.get("Origin"):  # a page's fetch: the truth is never a page's to read
            self.send_error(403)
            return
        if not self.path.startswith("/truth/") or not _SESSION.match(session_id):
            self.send_error(404)
            return
        with self.site.lock:
            session = self.site.sessions.get(session_id, Session())
            body = json.dumps({"reserved": list(session.reserved), "visited": list(session.visited)})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())
    # --8<-- [end:truth]


class LibrarySite:
    """The site on 127.0.0.1:`port` and its truth on 127.0.0.1:`truth_port` (0: any free port), from
    `start` (or ``with``) to `stop`."""

    def __init__(self, seed: int = 0, *, port: int = 0, truth_port: int = 0):
        self.books = catalogue(seed)
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()
        self._servers = [self._bound(port, _SiteHandler), self._bound(truth_port, _TruthHandler)]

    def _bound(self, port: int, handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.HTTPServer:
        """A server on 127.0.0.1:`port` whose handler reads this site."""
        bound = type(handler.__name__.lstrip("_"), (handler,), {"site": self})
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), bound)

    @property
    def url(self) -> str:
        """The site's base URL (what browsers are allowed to reach)."""
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def truth_url(self) -> str:
        """The truth listener's base URL (for the judge only)."""
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def start(self) -> LibrarySite:
        for server in self._servers:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> LibrarySite:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
