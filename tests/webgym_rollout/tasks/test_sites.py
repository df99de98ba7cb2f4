"""The local site server: MiniWoB pages from the miniwob package, sandbox pages, the CLI, and an
answer to every request of a stateful site."""

from __future__ import annotations

import socket

import httpx
from click.testing import CliRunner

from webgym_rollout.tasks.miniwob import task_url as miniwob_task_url
from webgym_rollout.tasks.sites import SiteServer, serve_sites_command


def test_serves_miniwob_and_sandbox_pages():
    with SiteServer() as sites:
        assert sites.base_url.startswith("http://127.0.0.1:")
        url = miniwob_task_url(sites.base_url + "/", "click-button")
        assert url == f"{sites.base_url}/miniwob/click-button.html"
        with httpx.Client(trust_env=False) as http:
            page = http.get(url)
            assert page.status_code == 200 and "Click Button Task" in page.text
            assert "core.startEpisodeReal" in http.get(f"{sites.base_url}/core/core.js").text
            form = http.get(f"{sites.base_url}/sandbox/form.html")
            assert form.status_code == 200 and 'id="greet"' in form.text
            assert http.get(f"{sites.base_url}/sandbox/nothing.html").status_code == 404
            assert http.get(f"{sites.base_url}/miniwob/no-such-task.html").status_code == 404


def test_serve_sites_help_has_example():
    result = CliRunner().invoke(serve_sites_command, ["--help"])
    assert (
        result.exit_code == 0 and "Example:" in result.output and "miniwob/click-button.html" in result.output
    )
    # The shop, its session parameter and the truth listener are documented, with the allowlist to use.
    text = " ".join(result.output.split())
    assert "/shop/?session=" in text and "--truth-port 8401" in text and "/facts?session=" in text
    assert "--allow-hosts 127.0.0.1:8400" in text and "never the truth port" in text
    assert "/travel/?session=" in text and "--travel-seed" in text


def test_a_stateful_site_answers_every_request_never_dropping_the_connection(monkeypatch):
    """A site that raises answers 500 (a closed connection is what a browser server counts as the
    site being down); a malformed length answers 400; the server serves on."""
    with SiteServer() as sites:
        def broken(self, request, state, category):
            raise OverflowError("cannot convert float infinity to integer")

        monkeypatch.setattr(type(sites.shop), "_search", broken)
        with httpx.Client(base_url=sites.base_url, trust_env=False) as http:
            page = http.get("/shop/search?min_price=inf")
            assert page.status_code == 500 and "Something went wrong" in page.text
            assert page.headers["cache-control"] == "no-store"
            assert "webgym_session=" in page.headers["set-cookie"]
            assert http.get("/shop/").status_code == 200
        head = b"POST /shop/cart/add HTTP/1.1\r\nHost: x\r\nContent-Length: "
        for length, status in ((b"abc", b"400"), (b"-1", b"400"), (b"1e3", b"400"), (b"9" * 20, b"413")):
            with socket.create_connection(("127.0.0.1", sites.port), timeout=30) as raw:
                raw.sendall(head + length + b"\r\n\r\n")
                assert raw.recv(4096).split(b"\r\n", 1)[0].split()[1] == status, length
