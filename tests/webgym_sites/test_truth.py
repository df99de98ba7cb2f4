"""The ground truth is served only on the truth listener, with the token; never on the site's port.
A listener that does not answer in time is a `TruthTimeout` naming it."""

from __future__ import annotations

import threading

import httpx
import pytest

from webgym_rollout.browser.guard import UrlGuard
from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.errors import TruthTimeout, TruthUnavailable
from webgym_sites.facts import SessionFacts
from webgym_sites.state import new_session_id, with_session
from webgym_sites.truth import TruthClient, TruthServer


@pytest.fixture(scope="module")
def server():
    with SiteServer(shop_seed=0) as sites:
        yield sites


def _shop_a_little(server: SiteServer) -> tuple[str, str]:
    session = new_session_id()
    product = server.shop.catalogue.products[17]
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True) as client:
        client.get(with_session("/shop/", session))
        form = {"product_id": product.id, "colour": product.colours[0], "quantity": "3"}
        form |= {"size": product.sizes[0]} if product.sizes else {}
        client.post("/shop/cart/add", data=form)
    return session, product.id


def test_facts_only_with_the_token_on_the_truth_port(server):
    session, product_id = _shop_a_little(server)
    assert server.truth_url.startswith("http://127.0.0.1:")
    assert not server.truth_url.endswith(f":{server.port}")
    with TruthClient(server.truth_url, server.truth_token) as client:
        facts = client.facts(session)
    assert facts == server.facts(session) and facts.shop.cart[0].product_id == product_id
    with httpx.Client(trust_env=False) as http:
        url = f"{server.truth_url}/facts"
        assert http.get(url, params={"session": session}).status_code == 401
        wrong = {"Authorization": "Bearer not-the-token"}
        assert http.get(url, params={"session": session}, headers=wrong).status_code == 401
        good = {"Authorization": f"Bearer {server.truth_token}"}
        page_fetch = good | {"Origin": server.base_url}
        assert http.get(url, params={"session": session}, headers=page_fetch).status_code == 403
        assert http.get(url, params={"session": "../x"}, headers=good).status_code == 400
    with pytest.raises(TruthUnavailable, match="HTTP 401"), TruthClient(server.truth_url, "nope") as client:
        client.facts(session)


def test_the_site_port_never_serves_facts(server):
    session, product_id = _shop_a_little(server)
    paths = ["/facts", f"/facts?session={session}", f"/shop/facts?session={session}", "/truth", "/shop/truth",
             "/health", f"/shop/../facts?session={session}", f"/sandbox/../facts?session={session}"]
    with httpx.Client(base_url=server.base_url, trust_env=False) as http:
        headers = {"Authorization": f"Bearer {server.truth_token}"}
        for path in paths:
            response = http.get(path, headers=headers)
            assert response.status_code == 404, path
            assert session not in response.text and '"product_id"' not in response.text


def test_the_guard_allowlisting_the_site_port_refuses_the_truth_port(server):
    guard = UrlGuard([f"127.0.0.1:{server.port}"])
    assert guard.allows(f"{server.base_url}/shop/")
    assert not guard.allows(f"{server.truth_url}/facts?session=abcdefgh")


def test_an_unreachable_truth_listener_is_named():
    with SiteServer() as sites:
        url = sites.truth_url
    with pytest.raises(TruthUnavailable, match=url), TruthClient(url, "token", timeout_s=5) as client:
        client.facts("abcdefgh")


def test_a_listener_that_does_not_answer_in_time_is_a_timeout_naming_it():
    release = threading.Event()

    def stalled(session_id: str) -> SessionFacts:
        release.wait(timeout=60)
        return SessionFacts(session_id=session_id)

    listener = TruthServer(stalled).start()
    try:
        with pytest.raises(TruthTimeout, match=rf"{listener.url}/facts: no answer within 0.2 s"), \
                TruthClient(listener.url, listener.token, timeout_s=0.2) as client:
            client.facts("abcdefgh")
    finally:
        release.set()
        listener.stop()
    assert issubclass(TruthTimeout, TruthUnavailable)
