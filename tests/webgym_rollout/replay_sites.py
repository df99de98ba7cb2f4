"""A small website that changes under the agent, on a real HTTP server on 127.0.0.1, for the
record / replay tests and benchmark.

``with ReplaySite() as site:`` serves, at ``site.url``:

    /               a counter of visits and the server's clock (new on every load), and two
                    links: "Search" covering (0, 100)-(400, 180) to /search, "Gallery" covering
                    (0, 200)-(400, 280) to /go, which redirects (302) to /gallery
    /search         a search form submitted by POST to /results, with a hidden nonce that changes on
                    every load (a POST body that differs per run); its text box covers
                    (0, 100)-(400, 160) and has the focus
    /results        (POST) the results for the query, with the visit counter
    /gallery        two images (/img/a.png, /img/b.png) and a script (/app.js) that fetches
                    /fragment (a synchronous XMLHttpRequest, so it is in before DOMContentLoaded)
                    and inserts it; the title turns "gallery ready" once it has
    /fragment       a fragment with the visit counter

Every response says ``Cache-Control: no-store``. ``site.version`` (1 to start) changes the colours,
images and wording of every page: "change the site" between a recording and its replay. Each path
asked for is counted in ``site.hits``.
"""

from __future__ import annotations

import io
import secrets
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

__all__ = ["ReplaySite"]

_COLOURS = {1: ("#1d6fb8", "#f4d35e"), 2: ("#b81d3c", "#3ec46d")}


def _png(colour: str, size: tuple[int, int] = (160, 120)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


class ReplaySite:
    """Context manager: the site on a free port of 127.0.0.1 (see the module docstring)."""

    def __init__(self, host: str = "127.0.0.1"):
        self.version = 1
        self.hits: Counter[str] = Counter()
        self._visits = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ReplaySite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _visit(self) -> int:
        with self._lock:
            self._visits += 1
            return self._visits

    def _page(self, title: str, body: str) -> bytes:
        ink, paper = _COLOURS[self.version]
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>"
                f"body {{ margin: 0; font: 20px monospace; background: {paper}; color: {ink}; }}"
                "a.big, input.big { display: block; position: absolute; left: 0; width: 400px; "
                "height: 80px; box-sizing: border-box; font: 20px monospace; }"
                f"a.big {{ background: {ink}; color: {paper}; }}"
                f"</style></head><body>{body}</body></html>").encode()

    def _route(self, method: str, path: str, form: dict[str, list[str]]) -> tuple[int, dict, bytes]:
        v = self.version
        html = {"Content-Type": "text/html; charset=utf-8"}
        if method == "GET" and path == "/":
            body = (f"<p>Welcome (v{v}), visit #{self._visit()} at {time.time():.6f}</p>"
                    "<a class='big' style='top:100px' href='/search'>Search</a>"
                    "<a class='big' style='top:200px' href='/go'>Gallery</a>")
            return 200, html, self._page("home", body)
        if method == "GET" and path == "/go":
            return 302, {"Location": "/gallery"}, b""
        if method == "GET" and path == "/search":
            body = ("<form method='post' action='/results'>"
                    "<input class='big' style='top:100px' name='q' autofocus>"
                    f"<input type='hidden' name='nonce' value='{secrets.token_hex(8)}'></form>"
                    f"<p style='position:absolute; top:200px'>search v{v}</p>")
            return 200, html, self._page("search", body)
        if method == "POST" and path == "/results":
            query = (form.get("q") or [""])[0]
            items = "".join(f"<li>{query} result {i} (v{v})</li>" for i in range(3))
            body = f"<p>Results for {query}, visit #{self._visit()}</p><ul>{items}</ul>"
            return 200, html, self._page("results", body)
        if method == "GET" and path == "/gallery":
            body = ("<p>Gallery</p><img src='/img/a.png'> <img src='/img/b.png'>"
                    "<div id='slot'>loading</div><script src='/app.js'></script>")
            return 200, html, self._page("gallery", body)
        if method == "GET" and path == "/app.js":
            # A synchronous request from a parser-blocking script: the fragment is in before the
            # page's DOMContentLoaded, so the screenshot after the click never races it.
            script = ("const xhr = new XMLHttpRequest(); xhr.open('GET', '/fragment', false); xhr.send();"
                      "document.getElementById('slot').innerHTML = xhr.responseText;"
                      "document.title = 'gallery ready';")
            return 200, {"Content-Type": "text/javascript"}, script.encode()
        if method == "GET" and path == "/fragment":
            return 200, html, f"<b>fragment v{v}, visit #{self._visit()}</b>".encode()
        if method == "GET" and path in ("/img/a.png", "/img/b.png"):
            ink, paper = _COLOURS[v]
            return 200, {"Content-Type": "image/png"}, _png(ink if path.endswith("a.png") else paper)
        return 404, html, self._page("not found", f"<p>no page {path}</p>")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
                pass

            def _answer(self, method: str) -> None:
                path = self.path.split("?", 1)[0]
                site.hits[path] += 1
                form: dict[str, list[str]] = {}
                if method == "POST":
                    length = int(self.headers.get("Content-Length") or 0)
                    form = parse_qs(self.rfile.read(length).decode())
                status, headers, body = site._route(method, path, form)
                self.send_response(status)
                for name, value in {**headers, "Cache-Control": "no-store"}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

        return Handler
