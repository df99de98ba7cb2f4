"""`ServerThread`: answers between start and stop, and leaves no listener behind."""

from __future__ import annotations

import http.server

import httpx
import pytest

from webgym_sites.serving import ServerThread


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args) -> None:
        pass


def test_it_answers_between_start_and_stop_and_closes_its_port():
    serving = ServerThread(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello), "test-server")
    url = f"http://127.0.0.1:{serving.port}/"
    serving.start()
    try:
        assert httpx.get(url, trust_env=False).text == "hello"
    finally:
        serving.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, trust_env=False, timeout=2)
    ServerThread(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello), "never-started").stop()
