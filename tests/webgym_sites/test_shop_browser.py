"""The shop in a real Chromium: search, choose options, add to cart, check out through the modal."""

from __future__ import annotations

import pytest

from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.state import COOKIE, new_session_id, with_session


@pytest.mark.browser
async def test_search_add_to_cart_and_check_out(chromium):
    with SiteServer(shop_seed=0) as sites:
        product = next(p for p in sites.shop.catalogue.products if p.sizes and len(p.colours) > 1)
        session = new_session_id()
        context = await chromium.new_context(viewport={"width": 1280, "height": 720})
        try:
            page = await context.new_page()
            await page.goto(with_session(f"{sites.base_url}/shop/", session))
            await page.fill("#search", product.name)
            await page.press("#search", "Enter")
            await page.wait_for_url("**/shop/search?q=*")
            await page.get_by_role("link", name=product.name, exact=True).click()
            await page.wait_for_selector("#product-name")
            await page.click("#add-button")  # nothing chosen: the page names what is missing
            assert await page.text_content("#error-colour") == "Choose a colour."
            await page.select_option("#option-colour", product.colours[1])
            await page.select_option("#option-size", product.sizes[0])
            await page.fill("#quantity", "2")
            await page.click("#add-button")
            await page.wait_for_url("**/shop/cart?*")
            assert await page.text_content("#cart-link") == "Cart (2)"
            await page.click("#checkout-link")
            for name, value in {"full_name": "Ava Nilsen", "address": "12 Harbour Road", "city": "Bristol",
                                "postcode": "BS1 4DJ", "card_number": "4111 1111 1111 1112",
                                "card_expiry": "09/28"}.items():
                await page.fill(f"#{name}", value)
            await page.select_option("#shipping", "standard")
            await page.click("#place-order")
            assert "check digit" in await page.text_content("#error-card_number")
            await page.fill("#card_number", "4111 1111 1111 1111")
            await page.click("#place-order")
            dialog = page.get_by_role("dialog", name="Confirm your order")
            await dialog.wait_for()
            await dialog.get_by_role("button", name="Confirm order").click()
            await page.wait_for_url("**/shop/order/WG-0001")
            cookies = {c["name"]: c["value"] for c in await context.cookies()}
            assert cookies[COOKIE] == session
        finally:
            await context.close()
        facts = sites.facts(session)
        assert facts.searches == (f"shop: {product.name}",)
        assert f"/shop/product/{product.id}" in facts.visited
        (order,) = facts.shop.orders
        (line,) = order.lines
        assert (line.product_id, line.quantity) == (product.id, 2)
        assert line.options == {"colour": product.colours[1], "size": product.sizes[0]}
        assert (order.shipping, order.postcode, facts.shop.cart) == ("standard", "BS1 4DJ", ())


@pytest.mark.browser
async def test_names_and_addresses_outside_ascii_reach_the_order_as_typed(chromium):
    typed = {"full_name": "Zoë Ångström-Núñez", "address": "東京都港区 芝公園 4-2-8", "city": "São Paulo"}
    with SiteServer(shop_seed=0) as sites:
        product = next(p for p in sites.shop.catalogue.products if not p.sizes)
        session = new_session_id()
        context = await chromium.new_context(viewport={"width": 1280, "height": 720})
        try:
            page = await context.new_page()
            await page.goto(with_session(f"{sites.base_url}/shop/product/{product.id}", session))
            await page.select_option("#option-colour", product.colours[0])
            await page.click("#add-button")
            await page.wait_for_url("**/shop/cart?*")
            await page.click("#checkout-link")
            card = {"postcode": "BS1 4DJ", "card_number": "4111 1111 1111 1111", "card_expiry": "09/28"}
            for name, value in (typed | card).items():
                await page.fill(f"#{name}", value)
            await page.select_option("#shipping", "standard")
            await page.click("#place-order")
            dialog = page.get_by_role("dialog", name="Confirm your order")
            await dialog.get_by_role("button", name="Confirm order").click()
            await page.wait_for_url("**/shop/order/WG-0001")
        finally:
            await context.close()
        (order,) = sites.facts(session).shop.orders
        assert (order.full_name, order.address, order.city) == tuple(typed.values())
