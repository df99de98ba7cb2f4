"""Local web environments on 127.0.0.1: the MiniWoB++ pages of the ``miniwob`` package and a sandbox.

`SiteServer` serves, from one port:

- ``/miniwob/<task>.html`` (and ``/core``, ``/common``, ``/flight``): the pages shipped in
  ``site-packages/miniwob/html/``, read in place (never copied);
- ``/sandbox/form.html``, ``/sandbox/next.html``: a small page with a form, a select, a link and a long
  body to scroll, for smoke tests and demos.

`webgym_rollout.tasks.miniwob.task_url(base, "click-button")` is the page URL of a MiniWoB task.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import logging
import threading

import click

from webgym_rollout.tasks import miniwob

__all__ = ["SANDBOX_PAGES", "SiteServer", "serve_sites_command"]

log = logging.getLogger(__name__)

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
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s " + format, self.address_string(), *args)

    def end_headers(self) -> None:
        # Pages are static; let the browser cache them across sessions of one context.
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def do_GET(self) -> None:
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
    """The site server in a background thread; a context manager yielding itself (`base_url`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        try:
            root = miniwob.html_dir()
        except ImportError as exc:
            raise click.ClickException(str(exc)) from exc
        handler = functools.partial(_Handler, directory=str(root))
        self._server = http.server.ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.host = host
        self.port = self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SiteServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="webgym-sites", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> SiteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@click.command("serve-sites")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8400, show_default=True, type=int, help="Port to bind (0: any free port).")
def serve_sites_command(host: str, port: int) -> None:
    """Serve the MiniWoB++ pages and the sandbox pages over HTTP until interrupted.

    \b
    Example:
      webgym-rollout serve-sites --port 8400
      # MiniWoB click-button: http://127.0.0.1:8400/miniwob/click-button.html
      # sandbox form:         http://127.0.0.1:8400/sandbox/form.html
    """
    server = SiteServer(host, port)
    click.echo(f"serving MiniWoB++ and sandbox sites on {server.base_url} (Ctrl-C stops)")
    with contextlib.suppress(KeyboardInterrupt):
        server._server.serve_forever()
    server._server.server_close()
