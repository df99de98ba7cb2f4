"""Local web environments on 127.0.0.1: the MiniWoB++ pages, a sandbox, and the stateful sites.

`SiteServer` serves, from one port:

- ``/miniwob/<task>.html`` (and ``/core``, ``/common``, ``/flight``): the pages shipped in
  ``site-packages/miniwob/html/``, read in place (never copied);
- ``/sandbox/form.html``, ``/sandbox/next.html``: a small page with a form, a select, a link and a long
  body to scroll, for smoke tests and demos;
- ``/shop/...``: the stateful shop (`webgym_sites.shop`), its catalogue drawn from
  ``shop_seed``, with per-session carts, sign-in and orders (a session per ``webgym_session`` cookie,
  or per ``?session=<id>`` start-URL parameter: see `webgym_sites.state`);
- ``/reference/...``: the stateful encyclopedia (`webgym_sites.reference`), its
  articles drawn from ``reference_seed``, with per-session articles read, watchlist and edit suggestions;
- ``/travel/...``: the stateful travel site (`webgym_sites.travel`), its airports,
  flights and hotels drawn from ``travel_seed``, with per-session searches and bookings.

The ground truth of a session (`SiteServer.facts`) is never served on that port, which the
egress guard allowlists: only in-process, and on the truth listener (`truth_url`, on 127.0.0.1 and
its own port, with the bearer token `truth_token`; `webgym_sites.truth`). It is
the snapshot of each session's last finished request, so a request in flight never holds it up.

Every request to a stateful site gets an answer: a site that fails answers a 500 page (the router,
`webgym_sites.router`), a malformed ``Content-Length`` a 400; the connection is
never dropped, so a browser server never reads one episode's bad request as the site being down.

`webgym_rollout.tasks.miniwob.task_url(base, "click-button")` is the page URL of a MiniWoB task.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import logging
import os
import threading

import click

from webgym_rollout.tasks import miniwob
from webgym_sites.facts import SessionFacts
from webgym_sites.reference import ReferenceSite
from webgym_sites.router import MAX_BODY, SiteRouter
from webgym_sites.serving import ServerThread
from webgym_sites.shop import ShopSite
from webgym_sites.travel import TravelSite
from webgym_sites.truth import TRUTH_TOKEN_ENV, TruthServer

__all__ = ["SANDBOX_PAGES", "TRUTH_TOKEN_ENV", "SiteServer", "serve_sites_command"]


log = logging.getLogger(__name__)

_READ_TIMEOUT_S = 60.0
"""How long the server waits for the rest of a request a client started sending."""

SANDBOX_PAGES: dict[str, str] = {
    "form.html": """<!DOCTYPE html>
<html><head><title>Sandbox form</title>
<style>body{font:16px sans-serif;margin:20px} #spacer{height:3000px}</style></head>
<body>
<h1 id="heading">Sandbox form</h1>
<input id="name" placeholder="Your name" style="width:200px">
<button id="greet"
  onclick="document.getElementById('out').textContent='Hello, '+document.getElementById('name').value"
>Greet</button>
<select id="colour" onchange="document.getElementById('picked').textContent=this.value">
  <option value="">pick one</option><option value="red">Red</option><option value="blue">Blue</option>
</select>
<p>Output: <span id="out"></span></p><p>Picked: <span id="picked"></span></p>
<p><span id="hovered"></span> <a id="next" href="next.html">Next page</a>
<span id="hoverme" tabindex="0"
  onmouseover="document.getElementById('hovered').textContent='hovered'">hover me</span></p>
<div id="spacer"></div><p id="bottom">Bottom of the page</p>
</body></html>
""",
    "next.html": """<!DOCTYPE html>
<html><head><title>Sandbox next</title></head>
<body><h1>Second page</h1><a href="form.html">Back to the form</a></body></html>
""",
}


class _Handler(http.server.SimpleHTTPRequestHandler):
    timeout = _READ_TIMEOUT_S  # a client that stops sending mid-request frees its thread

    def __init__(self, *args: object, router: SiteRouter, **kwargs: object):
        self.router = router  # before the base class's __init__, which handles the request
        super().__init__(*args, **kwargs)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s " + format, self.address_string(), *args)

    def end_headers(self) -> None:
        # The static pages (MiniWoB, sandbox) may be cached across sessions of one context.
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def _stateful(self, method: str) -> bool:
        """Answer the request when it is under a stateful site's mount; False when it is not. Every
        request gets an answer: a bad length 400, a failure of ours 500 (the router answers a site's
        own failures), never a dropped connection."""
        if self.router.site_for(self.path.split("?", 1)[0]) is None:
            return False
        declared = (self.headers.get("Content-Length") or "0") if method == "POST" else "0"
        if not (declared.isascii() and declared.isdigit()):
            self.send_error(400, f"Content-Length {declared[:40]!r} is not a number of bytes")
            return True
        length = int(declared) if len(declared) < 12 else MAX_BODY + 1
        if length > MAX_BODY:
            self.send_error(413, f"a form of at most {MAX_BODY} bytes")
            return True
        body = self.rfile.read(length) if length > 0 else b""
        try:
            response = self.router.serve(method, self.path, self.headers.get("Cookie", ""), body)
        except Exception:
            log.exception("%s %s failed (answered 500)", method, self.path)
            self.send_error(500, "the site server failed on this request")
            return True
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        try:
            http.server.BaseHTTPRequestHandler.end_headers(self)  # no caching header
            self.wfile.write(response.body)
        except ConnectionError:  # the client left before the answer (a closed popup, a stopped load)
            log.debug("%s %s: the client left before the answer", method, self.path)
        return True

    def do_POST(self) -> None:
        if not self._stateful("POST"):
            self.send_error(405, f"no form at {self.path.split('?', 1)[0]}")

    def do_GET(self) -> None:
        if self._stateful("GET"):
            return
        path = self.path.split("?", 1)[0]
        if path.startswith("/sandbox/"):
            page = SANDBOX_PAGES.get(path.removeprefix("/sandbox/"))
            if page is None:
                self.send_error(404, f"no sandbox page {path}")
                return
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


class SiteServer:
    """The site server in a background thread; a context manager yielding itself (`base_url`).

    `shop_seed` draws the shop's catalogue and accounts, `reference_seed` the reference site's
    encyclopedia, `travel_seed` the travel site's airports, flights and hotels; the truth listener
    binds 127.0.0.1:`truth_port` (0: any free port) and answers the bearer `truth_token` (drawn when
    not given)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, shop_seed: int = 0, truth_port: int = 0,
                 truth_token: str | None = None, reference_seed: int = 0, travel_seed: int = 0):
        try:
            root = miniwob.html_dir()
        except ImportError as exc:
            raise click.ClickException(str(exc)) from exc
        self.shop = ShopSite(shop_seed)
        self.reference = ReferenceSite(reference_seed)
        self.travel = TravelSite(travel_seed)
        self.router = SiteRouter([self.shop, self.reference, self.travel])
        handler = functools.partial(_Handler, directory=str(root), router=self.router)
        self._serving = ServerThread(http.server.ThreadingHTTPServer((host, port), handler), "webgym-sites")
        self.host = host
        self.port = self._serving.port
        self._truth = TruthServer(self.router.facts, truth_port, truth_token)

    def facts(self, session_id: str) -> SessionFacts:
        """The ground truth of session `session_id` on the stateful sites (in-process): the snapshot
        of its last finished request, never waiting for one in flight."""
        return self.router.facts(session_id)

    @property
    def truth_url(self) -> str:
        """The truth listener's URL (``http://127.0.0.1:<port>``); never allowlist it."""
        return self._truth.url

    @property
    def truth_token(self) -> str:
        """The bearer token the truth listener answers."""
        return self._truth.token

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SiteServer:
        self._truth.start()
        self._serving.start()
        return self

    def stop(self) -> None:
        self._serving.stop()
        self._truth.stop()

    def __enter__(self) -> SiteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@click.command("serve-sites")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8400, show_default=True, type=int, help="Port to bind (0: any free port).")
@click.option("--shop-seed", default=0, show_default=True, type=int,
              help="Seed of the shop's catalogue and accounts (tasks generated for it apply).")
@click.option("--reference-seed", default=0, show_default=True, type=int,
              help="Seed of the reference site's encyclopedia (tasks generated for it apply).")
@click.option("--travel-seed", default=0, show_default=True, type=int,
              help="Seed of the travel site's airports, flights and hotels (tasks generated for it apply).")
@click.option("--truth-port", default=0, show_default=True, type=int,
              help="Port of the ground-truth listener on 127.0.0.1 (0: any free port); never allowlist it. "
                   f"Its bearer token is ${TRUTH_TOKEN_ENV}, else drawn and printed.")
def serve_sites_command(host: str, port: int, shop_seed: int, reference_seed: int, travel_seed: int,
                        truth_port: int) -> None:
    """Serve the MiniWoB++ pages, the sandbox pages, the shop, the reference site and the travel
    site over HTTP until interrupted.

    The shop (/shop/) keeps a cart, a sign-in and orders per session, the reference site
    (/reference/, an encyclopedia) the articles read, a watchlist and edit suggestions, the travel
    site (/travel/) flight and hotel searches and bookings: the session is the ?session=<id>
    parameter of the start URL (8-64 letters, digits, - or _), else the webgym_session cookie. Its
    ground truth is served only by the truth listener, on 127.0.0.1 at --truth-port with a bearer
    token; allowlist the site port in the browser server (webgym-rollout serve --allow-hosts
    127.0.0.1:8400), never the truth port.

    \b
    Example:
      export WEBGYM_TRUTH_TOKEN=change-me
      webgym-rollout serve-sites --port 8400 --shop-seed 0 --truth-port 8401
      # MiniWoB click-button: http://127.0.0.1:8400/miniwob/click-button.html
      # sandbox form:         http://127.0.0.1:8400/sandbox/form.html
      # shop, one session:    http://127.0.0.1:8400/shop/?session=episode-0001
      # the encyclopedia:     http://127.0.0.1:8400/reference/?session=episode-0002
      # travel, one session:  http://127.0.0.1:8400/travel/?session=episode-0003
      # its ground truth:     curl -H "Authorization: Bearer $WEBGYM_TRUTH_TOKEN" \\
      #                         "http://127.0.0.1:8401/facts?session=episode-0001"
      webgym-rollout serve --port 8300 --allow-hosts 127.0.0.1:8400
    """
    token = os.environ.get(TRUTH_TOKEN_ENV) or None
    server = SiteServer(host, port, shop_seed=shop_seed, truth_port=truth_port, truth_token=token,
                        reference_seed=reference_seed, travel_seed=travel_seed)
    click.echo(f"serving MiniWoB++, sandbox, shop (seed {shop_seed}), reference (seed {reference_seed}) "
               f"and travel (seed {travel_seed}) on {server.base_url} (Ctrl-C stops)")
    shown = f"${TRUTH_TOKEN_ENV}" if token else server.truth_token
    click.echo(f"ground truth for the toolkit only: {server.truth_url}/facts?session=<id> "
               f"(bearer token {shown})")
    server.start()
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    server.stop()
