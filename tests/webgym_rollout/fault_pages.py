"""Pages that misbehave, on a real HTTP server on a loopback address (for the browser tests).

``with FaultPages(forbidden_base=...) as pages:`` serves, at ``pages.url``:

    /ok                 a plain page titled "ok"
    /loop               a page stuck in ``while (true) {}``
    /never              a page whose image is held until `release` is set: its load never ends
    /slow               held until `release` is set, then a page titled "slow"; each arrival is
                        counted (`slow_arrivals`) and signalled (`slow_arrived`)
    /captcha            a block page ("Just a moment...")
    /redirect-private   302 -> /redirect-hop -> 302 -> {forbidden_base}/secret
    /private-img        an image on the forbidden host
    /private-link       a link to the forbidden host covering (0, 0)-(300, 100)
    /private-ws         a WebSocket and a worker's fetch to the forbidden host; the title turns
                        "both refused" once both failed
    /popup-link         a link with target=_blank to /ok covering (0, 0)-(300, 100)
    /popup-open         a button calling window.open('/ok') covering (0, 0)-(300, 100)

Every path asked for is recorded in `hits`. Closing the server releases what it holds.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FaultPages"]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass

    def _send(self, body: str, content_type: str = "text/html") -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        server = self.server
        path = self.path.split("?")[0]
        server.hits.append(self.path)
        forbidden = server.forbidden_base
        if path == "/loop":
            self._send("<title>loop</title><script>while (true) {}</script>")
        elif path == "/never":
            self._send("<title>never</title><p>almost</p><img src='/hang'>")
        elif path == "/hang":
            server.release.wait(60)
        elif path == "/slow":
            with server.lock:
                server.slow_arrivals += 1
            server.slow_arrived.set()
            server.release.wait(60)
            self._send("<title>slow</title><p>at last</p>")
        elif path == "/captcha":
            self._send("<title>Just a moment...</title><p>Checking your browser</p>")
        elif path == "/redirect-private":
            self._redirect("/redirect-hop")
        elif path == "/redirect-hop":
            self._redirect(f"{forbidden}/secret")
        elif path == "/private-img":
            self._send(f"<title>img</title><img src='{forbidden}/pixel.png'>")
        elif path == "/private-link":
            self._send(f"<title>link</title><a href='{forbidden}/secret' {_BOX}>go</a>")
        elif path == "/private-ws":
            ws = forbidden.replace("http", "ws")
            self._send(
                "<title>waiting</title><script>"
                "let done = 0; const mark = () => { if (++done === 2) document.title = 'both refused'; };"
                f"const ws = new WebSocket('{ws}/ws'); ws.onclose = mark;"
                "const worker = new Worker('/worker.js'); worker.onmessage = mark;"
                "</script>"
            )
        elif path == "/worker.js":
            self._send(f"fetch('{forbidden}/from-worker').catch(() => postMessage('refused'));",
                       "text/javascript")
        elif path == "/popup-link":
            self._send(f"<title>popup link</title><a href='/ok' target='_blank' {_BOX}>open</a>")
        elif path == "/popup-open":
            button = f"<button onclick=\"window.open('/ok')\" {_BOX}>open</button>"
            self._send(f"<title>popup open</title>{button}")
        else:
            self._send("<title>ok</title><p>fine</p>")


_BOX = "style='display:block;position:absolute;left:0;top:0;width:300px;height:100px;margin:0'"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, forbidden_base: str):
        super().__init__((host, 0), _Handler)
        self.forbidden_base = forbidden_base
        self.hits: list[str] = []
        self.release = threading.Event()
        self.slow_arrived = threading.Event()
        self.slow_arrivals = 0
        self.lock = threading.Lock()


class FaultPages:
    """The server of the module docstring on `host` and a free port."""

    def __init__(self, host: str = "127.0.0.1", forbidden_base: str = "http://127.0.0.2:9"):
        self._server = _Server(host, forbidden_base)
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"fault-pages:{self.url}",
                                        daemon=True)

    @property
    def hits(self) -> list[str]:
        return self._server.hits

    @property
    def release(self) -> threading.Event:
        return self._server.release

    @property
    def slow_arrived(self) -> threading.Event:
        return self._server.slow_arrived

    @property
    def slow_arrivals(self) -> int:
        return self._server.slow_arrivals

    def __enter__(self) -> FaultPages:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
