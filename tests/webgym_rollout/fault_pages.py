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
    /redirect-file      302 -> file:///etc/passwd
    /popup-form         a button covering (0, 0)-(300, 100) that submits a form with target=_blank
                        to /ok
    /link?to=U          a link to U covering (0, 0)-(300, 100)
    /ping-loop          a page that fetches /ping?from=main every 50 ms and submits two forms with
                        target=_blank to /ping-popup (a popup that would fetch /ping?from=popup
                        every 50 ms)
    /clock              a page that fetches /tick?n=1 ... /tick?n=20, one every 50 ms: a clock made
                        of requests, to let time pass in a test without a sleep
    /escape/ROUTE?to=T  a page that tries one way out to the base URL T (see `ESCAPE_ROUTES`) once
                        it has loaded; once its attempt has settled, as far as the page can tell,
                        it fetches /done?route=ROUTE

Every path asked for is recorded in `hits`, every connection accepted is counted in `connections`
(a TLS handshake or a tunnel that never sends a request counts too). Closing the server releases
what it holds.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

__all__ = ["ESCAPE_ROUTES", "FaultPages", "UdpListener"]

# Each way out a page may try, as the body of a script that can use T (the target base URL, e.g.
# http://127.0.0.2:PORT), HOST and PORT (its parts) and done() (report that the attempt settled).
ESCAPE_ROUTES = {
    "form-popup": "const f = document.createElement('form'); f.method = 'post'; f.target = '_blank';"
                  "f.action = T + '/form-popup'; document.body.appendChild(f); f.submit(); done();",
    "window-open": "window.open(T + '/window-open'); done();",
    "iframe-open": "const i = document.createElement('iframe'); document.body.appendChild(i);"
                   "i.contentWindow.open(T + '/iframe-open'); done();",
    "link-blank": "const a = document.createElement('a'); a.href = T + '/link-blank'; a.target = '_blank';"
                  "a.rel = 'noopener'; document.body.appendChild(a); a.click(); done();",
    "worker-fetch": "const w = new Worker('/escape-worker.js?to=' + encodeURIComponent(T) + '&how=fetch');"
                    "w.onmessage = done; w.onerror = done;",
    "worker-websocket": "const w = new Worker('/escape-worker.js?to=' + encodeURIComponent(T) + '&how=ws');"
                        "w.onmessage = done; w.onerror = done;",
    "shared-worker": "const w = new SharedWorker('/escape-worker.js?to=' + encodeURIComponent(T) +"
                     "'&how=shared'); w.port.onmessage = done; w.onerror = done;",
    "service-worker": "navigator.serviceWorker.register('/escape-worker.js?to=' + encodeURIComponent(T) +"
                      "'&how=service').then(r => { navigator.serviceWorker.onmessage = done;"
                      " setTimeout(done, 3000); }, done);",
    "beacon": "navigator.sendBeacon(T + '/beacon', 'x'); done();",
    "prefetch": "const l = document.createElement('link'); l.rel = 'prefetch'; l.href = T + '/prefetch';"
                "l.onload = done; l.onerror = done; document.head.appendChild(l);",
    "fetch": "fetch(T + '/fetch', {mode: 'no-cors'}).then(done, done);",
    "webrtc": "const pc = new RTCPeerConnection({iceServers: [{urls: 'stun:' + HOST + ':' + PORT}]});"
              "pc.createDataChannel('x'); pc.onicegatheringstatechange = () => {"
              " if (pc.iceGatheringState === 'complete') done(); };"
              "pc.createOffer().then(o => pc.setLocalDescription(o)); setTimeout(done, 5000);",
}
_ESCAPE_WORKER = """
const to = new URL(location.href).searchParams.get('to');
const how = new URL(location.href).searchParams.get('how');
const settle = (port) => (port ? port.postMessage('settled') : postMessage('settled'));
function attempt(port) {
  if (how === 'ws') {
    const ws = new WebSocket(to.replace('http', 'ws') + '/worker-websocket');
    ws.onclose = () => settle(port);
  } else {
    fetch(to + '/' + how, {mode: 'no-cors'}).then(() => settle(port), () => settle(port));
  }
}
if (how === 'shared') { onconnect = (e) => attempt(e.ports[0]); }
else if (how === 'service') {
  addEventListener('install', (e) => e.waitUntil(fetch(to + '/service-worker', {mode: 'no-cors'})
    .catch(() => null).then(() => self.clients.matchAll({includeUncontrolled: true}))
    .then((all) => all.forEach((c) => c.postMessage('settled')))));
} else { attempt(null); }
"""


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

    def _escape(self, route: str) -> None:
        target = parse_qs(urlsplit(self.path).query).get("to", [""])[0]
        parts = urlsplit(target)
        script = (
            f"const T = {json.dumps(target)}, HOST = {json.dumps(parts.hostname or '')},"
            f" PORT = {parts.port or 80};"
            f"let reported = false; const done = () => {{ if (!reported) {{ reported = true;"
            f" fetch('/done?route={route}').catch(() => null); }} }};"
            # After the load event: the attempt must not race the page's own load.
            f"addEventListener('load', () => setTimeout(() => {{ {ESCAPE_ROUTES[route]} }}, 0));"
        )
        self._send(f"<title>escape {route}</title><body><script>{script}</script></body>")

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        self.server.hits.append(self.path)
        self._send("<title>posted</title>")

    def do_GET(self):
        server = self.server
        path = self.path.split("?")[0]
        server.hits.append(self.path)
        forbidden = server.forbidden_base
        if path.startswith("/escape/"):
            self._escape(path.removeprefix("/escape/"))
        elif path == "/escape-worker.js":
            self._send(_ESCAPE_WORKER, "text/javascript")
        elif path == "/link":
            target = parse_qs(urlsplit(self.path).query).get("to", [""])[0]
            self._send(f"<title>link</title><a href={json.dumps(target)} {_BOX}>go</a>")
        elif path == "/popup-form":
            self._send("<title>popup form</title><form id=f target=_blank action='/ok'></form>"
                       f"<button onclick='f.submit()' {_BOX}>open</button>")
        elif path == "/redirect-file":
            self._redirect("file:///etc/passwd")
        elif path == "/ping-loop":
            self._send(
                "<title>ping loop</title><script>"
                "setInterval(() => fetch('/ping?from=main').catch(() => null), 50);"
                "for (const n of [1, 2]) { setTimeout(() => { const f = document.createElement('form');"
                " f.target = '_blank'; f.action = '/ping-popup'; document.body.appendChild(f); f.submit(); },"
                " 100 * n); }"
                "</script>"
            )
        elif path == "/clock":
            self._send("<title>clock</title><script>let n = 0; const t = setInterval(() => {"
                       " if (++n > 20) { clearInterval(t); return; } fetch('/tick?n=' + n); }, 50);</script>")
        elif path == "/ping-popup":
            self._send("<title>popup</title><script>"
                       "setInterval(() => fetch('/ping?from=popup').catch(() => null), 50);</script>")
        elif path == "/loop":
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
        self.connections = 0
        self.release = threading.Event()
        self.slow_arrived = threading.Event()
        self.slow_arrivals = 0
        self.lock = threading.Lock()

    def process_request(self, request, client_address):
        with self.lock:
            self.connections += 1
        super().process_request(request, client_address)


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
    def connections(self) -> int:
        """TCP connections accepted so far."""
        return self._server.connections

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


class UdpListener:
    """Counts the UDP datagrams sent to `host` and a free port (a STUN server a page names)."""

    def __init__(self, host: str = "127.0.0.2"):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((host, 0))
        self._sock.settimeout(0.1)
        self.host, self.port = self._sock.getsockname()
        self.datagrams = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"udp:{host}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sock.recvfrom(65536)
            except (TimeoutError, OSError):
                continue
            self.datagrams += 1

    def __enter__(self) -> UdpListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


async def until(condition, what: str, tries: int = 200) -> None:
    """Poll `condition` (at most `tries` x 50 ms): the pages report through requests, not events."""
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"never happened: {what}")
