"""The travel site in a real Chromium: type a city and press Enter, pick a suggestion, turn the
calendar, search, book a flight through the form's errors and the confirmation modal."""

from __future__ import annotations

import pytest

from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.state import new_session_id, with_session


@pytest.mark.browser
async def test_search_with_the_widgets_and_book_a_flight(chromium):
    with SiteServer(travel_seed=0) as sites:
        world = sites.travel.world
        origin, destination = world.airports[3], world.airports[17]
        cheapest = world.flights(origin.code, destination.code, "2027-04-08", cabin="business")[0]
        session = new_session_id()
        context = await chromium.new_context(viewport={"width": 1280, "height": 720})
        try:
            page = await context.new_page()
            await page.goto(with_session(f"{sites.base_url}/travel/", session))
            await page.fill("#origin", origin.city[:4].lower())
            await page.press("#origin", "Enter")  # searches: the text names no airport, so suggestions
            await page.click(f"#origin-option-{origin.code}")
            assert await page.input_value("#origin") == origin.label
            await page.fill("#destination", destination.code)  # a code names its airport exactly
            await page.click("#cal-next")
            assert await page.text_content("#cal-month") == "April 2027"
            await page.click("#day-2027-04-08")
            assert await page.input_value("#date") == "2027-04-08"
            await page.select_option("#cabin", "business")
            await page.click("#search-flights")
            await page.wait_for_url("**/travel/flights?*")
            await page.click(f"#select-{cheapest.id}")
            await page.click("#book-flight")
            for name, value in {"full_name": "Ava Nilsen", "email": "ava@example.test",
                                "passport": "AB12345"}.items():
                await page.fill(f"#{name}", value)
            await page.select_option("#seat", "aisle")
            await page.evaluate("document.getElementById('booking').noValidate = true")  # the server's check
            await page.click("#book-button")
            assert "seven digits" in await page.text_content("#error-passport")
            await page.fill("#passport", "AB1234567")
            await page.click("#book-button")
            dialog = page.get_by_role("dialog", name="Confirm your booking")
            await dialog.wait_for()
            await dialog.get_by_role("button", name="Confirm booking").click()
            await page.wait_for_url("**/travel/booking/TRV-0001")
        finally:
            await context.close()
        facts = sites.facts(session)
        assert facts.travel.flight_searches == (f"{origin.code}-{destination.code} 2027-04-08",)
        (booking,) = facts.travel.flights
        assert (booking.flight_id, booking.cabin, booking.seat) == (cheapest.id, "business", "aisle")
        assert booking.passport == "AB1234567" and booking.total_cents == cheapest.fares["business"]


@pytest.mark.browser
async def test_a_guest_name_outside_ascii_reaches_the_booking_as_typed(chromium):
    with SiteServer(travel_seed=0) as sites:
        hotel = sites.travel.world.hotels[5]
        session = new_session_id()
        context = await chromium.new_context(viewport={"width": 1280, "height": 720})
        try:
            page = await context.new_page()
            await page.goto(with_session(f"{sites.base_url}/travel/hotel/{hotel.id}", session))
            await page.select_option("#checkin", "2027-04-08")
            await page.select_option("#nights", "2")
            await page.select_option("#room", "deluxe")
            await page.fill("#full_name", "山田 太郎")
            await page.fill("#email", "yamada@example.test")
            await page.click("#book-room")
            dialog = page.get_by_role("dialog", name="Confirm your booking")
            assert "for 山田 太郎." in await dialog.text_content()
            await dialog.get_by_role("button", name="Confirm booking").click()
            await page.wait_for_url("**/travel/booking/HTL-0001")
            assert "Guest: 山田 太郎" in await page.text_content("main")
        finally:
            await context.close()
        (booking,) = sites.facts(session).travel.hotels
        assert (booking.hotel_id, booking.full_name, booking.nights) == (hotel.id, "山田 太郎", 2)
