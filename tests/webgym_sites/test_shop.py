"""The shop over real HTTP on a real SiteServer: sessions, isolation, determinism, checkout."""

from __future__ import annotations

import re
import threading

import httpx
import pytest

from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.accounts import accounts
from webgym_sites.catalogue import Product
from webgym_sites.state import COOKIE, new_session_id, with_session

CHECKOUT = {"full_name": "Ava Nilsen", "address": "12 Harbour Road", "city": "Bristol", "postcode": "bs1 4dj",
            "card_number": "4111 1111 1111 1111", "card_expiry": "09/28", "shipping": "express"}


@pytest.fixture(scope="module")
def shop_server():
    with SiteServer(shop_seed=0) as server:
        yield server


def _client(server: SiteServer) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=30)


def _add(client: httpx.Client, product: Product, quantity: int = 1, colour: str = "") -> httpx.Response:
    form = {"product_id": product.id, "colour": colour or product.colours[0], "quantity": str(quantity)}
    if product.sizes:
        form["size"] = product.sizes[-1]
    return client.post("/shop/cart/add", data=form)


def test_concurrent_sessions_never_see_each_other(shop_server):
    products = shop_server.shop.catalogue.products[::300][:8]
    start = threading.Barrier(len(products))
    seen: dict[int, tuple[str, str]] = {}
    failures: list[BaseException] = []

    def shopper(index: int) -> None:
        try:
            with _client(shop_server) as client:
                client.get("/shop/")
                start.wait(timeout=30)
                for _ in range(3):  # interleaved with the other sessions' requests
                    assert _add(client, products[index], quantity=index % 3 + 1).status_code == 200
                    client.get(f"/shop/search?q={products[index].brand}")
                seen[index] = (client.cookies[COOKIE], client.get("/shop/cart").text)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=shopper, args=(i,)) for i in range(len(products))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures
    assert len({session for session, _ in seen.values()}) == len(products)
    for index, (session, cart) in seen.items():
        own = products[index]
        assert own.name in cart
        assert not any(p.name in cart for p in products if p is not own)
        facts = shop_server.facts(session)
        lines = [(line.product_id, line.quantity) for line in facts.shop.cart]
        assert lines == [(own.id, 3 * (index % 3 + 1))]
        assert facts.searches == tuple([f"shop: {own.brand}"] * 3)


def test_session_parameter_ties_the_facts_and_sets_the_cookie(shop_server):
    session = new_session_id()
    product = shop_server.shop.catalogue.products[5]
    with _client(shop_server) as client:
        page = client.get(with_session("/shop/search?q=mug", session))
        assert client.cookies[COOKIE] == session and page.headers["cache-control"] == "no-store"
        _add(client, product, quantity=2)
    facts = shop_server.facts(session)
    assert facts.seen and facts.visited[0] == "/shop/search?q=mug"  # the parameter is not recorded
    assert facts.shop.cart[0].product_id == product.id and facts.shop.cart[0].quantity == 2
    # A context still holding that cookie starts a new session when a start URL names one.
    later = new_session_id()
    with _client(shop_server) as client:
        client.cookies.set(COOKIE, session)
        client.get(with_session("/shop/", later))
        assert "Cart (0)" in client.get("/shop/cart").text
    assert shop_server.facts(later).shop.cart == ()
    unknown = shop_server.facts(new_session_id())
    assert not unknown.seen and unknown.shop is None


def test_same_seed_same_pages_other_seed_other_pages():
    paths = ["/shop/", "/shop/search?q=lamp&sort=price_desc&page=2", "/shop/category/boots?colour=black",
             "/shop/product/P00042", "/shop/checkout"]

    def pages(seed: int) -> list[str]:
        with SiteServer(shop_seed=seed) as server, _client(server) as client:
            session = new_session_id()
            client.get(with_session("/shop/", session))
            return [client.get(path).text for path in paths]

    first = pages(3)
    assert pages(3) == first
    assert pages(4) != first


def test_product_options_are_validated(shop_server):
    product = next(p for p in shop_server.shop.catalogue.products if p.sizes)
    with _client(shop_server) as client:
        page = client.post("/shop/cart/add", data={"product_id": product.id, "colour": "", "size": "",
                                                   "quantity": "0"})
        assert all(f'id="error-{name}"' in page.text or f"id='error-{name}'" in page.text
                   for name in ("colour", "size", "quantity"))
        assert "Cart (0)" in page.text
        page = _add(client, product, quantity=4)
        assert "Cart (4)" in page.text and "Added 4" in page.text


def test_checkout_rejects_bad_fields_then_records_the_confirmed_order(shop_server):
    products = shop_server.shop.catalogue.products
    with _client(shop_server) as client:
        _add(client, products[10], quantity=2)
        _add(client, products[700])
        session = client.cookies[COOKIE]
        bad = {"postcode": "12345", "card_number": "4111 1111 1111 1112"}
        page = client.post("/shop/checkout", data=CHECKOUT | bad)
        assert re.search(r"Please correct: postcode, card number</div>", page.text)
        assert "id='error-postcode'" in page.text and "id='error-card_number'" in page.text
        assert "confirm-dialog" not in page.text and "value='Ava Nilsen'" in page.text  # kept, card not
        assert shop_server.facts(session).shop.orders == ()
        page = client.post("/shop/checkout", data=CHECKOUT)
        assert "role='dialog'" in page.text and "confirm-order" in page.text
        assert shop_server.facts(session).shop.orders == ()  # not before the modal's confirmation
        page = client.post("/shop/checkout/confirm")
        assert "Thank you for your order" in page.text and "Cart (0)" in page.text
    facts = shop_server.facts(session).shop
    assert facts.cart == () and len(facts.orders) == 1
    order = facts.orders[0]
    lines = [(line.product_id, line.quantity) for line in order.lines]
    assert lines == [(products[10].id, 2), (products[700].id, 1)]
    assert (order.shipping, order.postcode, order.card_last4) == ("express", "BS1 4DJ", "1111")
    assert order.account == ""
    assert order.total_cents == 2 * products[10].price_cents + products[700].price_cents + 1250
    assert order.lines[0].options["colour"] == products[10].colours[0]


def test_sign_in_is_recorded_on_the_session_and_its_orders(shop_server):
    account = accounts(0)[0]
    with _client(shop_server) as client:
        page = client.post("/shop/signin", data={"email": account.email, "password": "wrong"})
        assert "wrong password" in page.text and "signin-link" in page.text
        right = {"email": account.email.upper(), "password": account.password}
        page = client.post("/shop/signin", data=right)
        assert account.full_name in page.text
        _add(client, shop_server.shop.catalogue.products[1])
        client.post("/shop/checkout", data=CHECKOUT | {"shipping": "next_day"})
        client.post("/shop/checkout/confirm")
        assert "WG-0001" in client.get("/shop/account").text
        session = client.cookies[COOKIE]
    facts = shop_server.facts(session).shop
    assert facts.account == account.email and facts.sign_ins == (account.email,)
    assert facts.orders[0].account == account.email and facts.orders[0].shipping == "next_day"


def test_search_paginates_and_unknown_pages_are_404(shop_server):
    with _client(shop_server) as client:
        first = client.get("/shop/search?q=mug")
        count = int(re.search(r"(\d+) results", first.text).group(1))
        assert count > 12 and "page 1 of" in first.text and "Next »" in first.text
        second = client.get("/shop/search?q=mug&page=2")
        assert "page 2 of" in second.text and "« Previous" in second.text
        assert client.get("/shop/product/P99999").status_code == 404
        assert client.get("/shop/nothing").status_code == 404
        assert client.get("/shop").url.path == "/shop/"


def test_a_price_the_filter_cannot_read_is_named_and_left_out(shop_server):
    """``inf`` once raised OverflowError in the handler: the connection closed with no reply."""
    with _client(shop_server) as client:
        count = re.search(r"(\d+) results", client.get("/shop/search?q=mug").text).group(1)
        for bad in ("inf", "-inf", "nan", "1e999", "-5", "abc", "9" * 400):
            for field in ("min_price", "max_price"):
                page = client.get("/shop/search", params={"q": "mug", field: bad})
                assert page.status_code == 200, (field, bad)
                assert f"<p class='error' id='error-{field}'>Enter a price in dollars" in page.text
                assert f"{count} results" in page.text  # the bad bound is left out, shown as typed
                assert f"name='{field}' size='6' value='{bad}'" in page.text
        cheap = client.get("/shop/search", params={"q": "mug", "max_price": "$1,000.00"})
        assert "id='error-max_price'" not in cheap.text and "value='1000'" in cheap.text


def test_sign_in_goes_on_only_to_a_path_of_the_shop(shop_server):
    account = accounts(0)[0]
    form = {"email": account.email, "password": account.password}
    with httpx.Client(base_url=shop_server.base_url, trust_env=False) as client:
        for next_page, location in [("/cart", "/shop/cart"),
                                    ("/search?q=été", "/shop/search?q=%C3%A9t%C3%A9"),
                                    ("/a\r\nSet-Cookie: webgym_session=stolen01", "/shop/account"),
                                    ("//evil.test/", "/shop/account"), ("/\\evil.test/", "/shop/account"),
                                    ("https://evil.test/", "/shop/account")]:
            signin = with_session("/shop/signin", new_session_id())
            answer = client.post(signin, data=form | {"next": next_page})
            assert answer.status_code == 303 and answer.headers["location"] == location, next_page
            assert "stolen01" not in str(answer.headers)
