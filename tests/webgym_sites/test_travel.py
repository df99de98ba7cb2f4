"""The travel site over real HTTP on a real SiteServer: determinism, sessions, the form's widgets,
results, validation and bookings."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.support.plan_over_http import HttpPlayer, PlayError
from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.plans import Choose, Fill, Press
from webgym_sites.state import COOKIE, new_session_id, with_session
from webgym_sites.travel_catalogue import travel_world

PERSON = {"full_name": "Ava Nilsen", "email": "Ava.Nilsen@Example.test", "passport": "ab 1234567",
          "seat": "window"}


@pytest.fixture(scope="module")
def server():
    with SiteServer(travel_seed=0) as sites:
        yield sites


def _client(server: SiteServer) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=30)


def _route(seed: int = 0) -> tuple[str, str]:
    world = travel_world(seed)
    return world.airports[0].code, world.airports[1].code


def _shown(page: str, ident: str) -> str:
    """The text of the element with this id (no nested tags)."""
    return re.search(rf"id='{ident}'[^>]*>([^<]*)<", page).group(1)


def _errors(page: str) -> set[str]:
    return set(re.findall(r"<p class='error' id='error-(\w+)'", page))


def test_same_seed_same_pages_other_seed_other_pages():
    origin, destination = _route(3)
    world = travel_world(3)
    flight = world.flights(origin, destination, "2027-03-20")[0]
    hotel = world.hotels_in(origin)[0]
    paths = ["/travel/", "/travel/suggest?field=origin&q=or", "/travel/?month=2027-04&pick=2027-04-02",
             f"/travel/flights?origin={origin}&destination={destination}&date=2027-03-20&sort=duration&page=2",
             f"/travel/flight/{flight.id}?cabin=business", f"/travel/book/{flight.id}",
             f"/travel/hotels?city={origin}&checkin=2027-03-20&nights=2", f"/travel/hotel/{hotel.id}"]

    def pages(seed: int) -> list[bytes]:
        with SiteServer(travel_seed=seed) as sites, _client(sites) as client:
            client.get(with_session("/travel/", new_session_id()))
            return [client.get(path).content for path in paths]

    first = pages(3)
    assert pages(3) == first
    assert pages(4) != first
    assert travel_world(3).airports != travel_world(4).airports


def test_two_sessions_keep_their_own_bookings(server):
    origin, destination = _route()
    flights = server.travel.world.flights(origin, destination, "2027-03-10")
    sessions = [new_session_id(), new_session_id()]
    clients = [_client(server), _client(server)]
    try:
        for client, session in zip(clients, sessions, strict=True):
            client.get(with_session("/travel/", session))
        for index, client in enumerate(clients):  # interleaved: each submits, then each confirms
            form = PERSON | {"flight_id": flights[index].id, "cabin": "economy", "passengers": str(index + 1)}
            assert "confirm-booking" in client.post("/travel/book", data=form).text
        for client in clients:
            page = client.post("/travel/book/confirm")
            assert page.url.path == "/travel/booking/TRV-0001" and "My trips (1)" in page.text
    finally:
        for client in clients:
            client.close()
    for index, session in enumerate(sessions):
        (booking,) = server.facts(session).travel.flights
        assert booking.flight_id == flights[index].id and booking.passengers == index + 1
        assert booking.total_cents == (index + 1) * flights[index].fares["economy"]
        assert (booking.email, booking.passport) == ("ava.nilsen@example.test", "AB1234567")  # normalised
        assert booking.seat == "window"
    idle = server.facts(new_session_id())
    assert not idle.seen and idle.travel is None


def test_booking_forms_name_each_wrong_field_and_book_nothing(server):
    origin, destination = _route()
    flight = server.travel.world.flights(origin, destination, "2027-04-01")[0]
    hotel = server.travel.world.hotels_in(destination)[0]
    with _client(server) as client:
        client.get("/travel/")
        session = client.cookies[COOKIE]
        bad = {"flight_id": flight.id, "cabin": "first", "passengers": "9", "full_name": "Ava",
               "email": "ava@", "passport": "A12345678", "seat": "floor"}
        page = client.post("/travel/book", data=bad).text
        assert _errors(page) == {"cabin", "passengers", "full_name", "email", "passport", "seat"}
        assert "confirm-dialog" not in page and "value='Ava'" in page  # what was typed is kept
        assert ("Please correct: passenger name, email, passport number, seat preference, cabin, "
                "passengers</div>") in page
        page = client.post("/travel/book", data=bad | PERSON | {"cabin": "premium", "passengers": "2"}).text
        assert _errors(page) == set() and "role='dialog'" in page
        bad_stay = {"hotel_id": hotel.id, "checkin": "2027-05-30", "nights": "0", "room": "attic",
                    "full_name": "", "email": "x"}
        page = client.post("/travel/hotel/book", data=bad_stay).text
        assert _errors(page) == {"checkin", "nights", "room", "full_name", "email"}
        assert "confirm-dialog" not in page
    facts = server.facts(session).travel
    assert facts.flights == () and facts.hotels == ()  # nothing before a modal's confirmation


def test_hotel_booking_is_confirmed_in_the_modal(server):
    hotel = server.travel.world.hotels_in(_route()[1])[0]
    with _client(server) as client:
        client.get(f"/travel/hotel/{hotel.id}?checkin=2027-03-05&nights=3")
        form = {"hotel_id": hotel.id, "checkin": "2027-03-05", "nights": "3", "room": "deluxe",
                "full_name": "Ben Okafor", "email": "ben@example.test"}
        page = client.post("/travel/hotel/book", data=form).text
        assert "id='confirm-dialog'" in page
        page = client.post("/travel/hotel/book/confirm")
        assert page.url.path == "/travel/booking/HTL-0001" and "Booking confirmed" in page.text
        assert client.post("/travel/hotel/book/confirm").url.path == "/travel/hotels"  # nothing pending
        session = client.cookies[COOKIE]
    (booking,) = server.facts(session).travel.hotels
    assert (booking.hotel_id, booking.room, booking.nights) == (hotel.id, "deluxe", 3)
    assert booking.checkin == "2027-03-05" and booking.total_cents == 3 * hotel.rooms["deluxe"]
    assert hotel.rooms["deluxe"] > hotel.rooms["standard"]


def test_the_date_picker_turns_months_and_fills_the_hidden_date(server):
    with _client(server) as client:
        player = HttpPlayer(client, "/travel/")
        assert _shown(player.html, "cal-month") == "March 2027"
        assert "disabled" in player.find("cal-prev").attrs
        with pytest.raises(PlayError, match="disabled"):
            player.play([Press("cal-prev")])
        assert player.find("date").value == ""
        player.play([Fill("origin", "somewhere"), Choose("cabin", "business"), Press("cal-next")])
        assert _shown(player.html, "cal-month") == "April 2027"
        assert "disabled" in player.find("cal-next").attrs
        assert player.find("origin").value == "somewhere"  # the form is kept across the calendar's buttons
        assert player.find("cabin").value == "business"
        assert "<td class='off'>30</td>" in client.get("/travel/?month=2027-04").text  # past the window
        player.play([Press("day-2027-04-29")])
        assert player.find("date").value == "2027-04-29"
        assert player.find("day-2027-04-29").attrs["aria-pressed"] == "true"
        assert _shown(player.html, "date-shown") == "Thu 29 Apr 2027"
        player.play([Press("cal-prev"), Press("day-2027-03-02")])
        assert player.find("date").value == "2027-03-02" and _shown(player.html, "cal-month") == "March 2027"


def test_suggestions_fill_the_airports_and_enter_searches(server):
    world = server.travel.world
    origin, destination = world.airports[5], world.airports[30]
    with _client(server) as client:
        player = HttpPlayer(client, "/travel/")
        player.play([Fill("origin", origin.city[:3].lower()), Press("origin-suggest")])
        listed = re.findall(r"id='origin-option-(\w+)'", player.html)
        assert origin.code in listed and listed == [a.code for a in world.suggest(origin.city[:3])]
        player.play([Press(f"origin-option-{origin.code}")])
        assert player.find("origin").value == origin.label
        player.play([Press("day-2027-03-09"), Fill("destination", destination.city[:4], submit=True)])
        # Enter searched; the destination named no airport exactly, so its suggestions are shown instead.
        assert urlparse_path(player.url) == "/travel/flights"
        player.find(f"destination-option-{destination.code}")
        with pytest.raises(PlayError):
            player.find("flights")
        player.play([Press(f"destination-option-{destination.code}"), Choose("passengers", "3"),
                     Fill("origin", origin.code, submit=True)])  # a code names its airport exactly
        assert player.find(f"select-{world.flights(origin.code, destination.code, '2027-03-09')[0].id}")
        assert "3 passengers" in player.html
        session = client.cookies[COOKIE]
        page = client.get("/travel/suggest?field=destination&q=zzzz").text
        assert "No airport matches “zzzz”" in page
    facts = server.facts(session)
    assert facts.travel.flight_searches == (f"{origin.code}-{destination.code} 2027-03-09",)
    assert facts.searches == (f"travel: {origin.code} to {destination.code} on 2027-03-09",)


def urlparse_path(url: str) -> str:
    return httpx.URL(url).path


def test_results_sort_filter_and_paginate(server):
    origin, destination = _route()
    world = server.travel.world
    every = world.day_flights(origin, destination, "2027-03-15")
    with _client(server) as client:
        base = f"/travel/flights?origin={origin}&destination={destination}&date=2027-03-15&cabin=premium"
        first = client.get(base).text
        count = int(re.search(r"(\d+) flights · page 1 of (\d+)", first).group(1))
        assert count == len(every) > 8 and "page-next" in first
        shown = re.findall(r"id='select-([\w-]+)'", first)
        assert len(shown) == 8
        fares = [world.flight(f).fares["premium"] for f in shown]
        assert fares == sorted(fares) and fares[0] == min(f.fares["premium"] for f in every)
        second = client.get(base + "&page=2").text
        assert set(re.findall(r"id='select-([\w-]+)'", second)).isdisjoint(shown)
        by_time = re.findall(r"id='select-([\w-]+)'", client.get(base + "&sort=departure").text)
        assert [world.flight(f).departure for f in by_time] == sorted(f.departure for f in every)[:8]
        direct = re.findall(r"id='select-([\w-]+)'", client.get(base + "&stops=0&sort=duration").text)
        assert direct and all(world.flight(f).stops == 0 for f in direct)
        durations = [world.flight(f).duration for f in direct]
        assert durations == sorted(durations)
        airline = every[0].airline
        theirs = re.findall(r"id='select-([\w-]+)'", client.get(base + f"&airline={airline}").text)
        assert {world.flight(f).airline for f in theirs} == {airline}
        assert client.get(f"/travel/flight/{every[0].id}").status_code == 200
        assert client.get("/travel/flight/AAA-BBB-20270315-01").status_code == 404
        assert client.get("/travel/nothing").status_code == 404
        assert client.get("/travel").url.path == "/travel/"


def test_hotels_are_listed_by_city_with_their_stars(server):
    city = _route()[1]
    hotels = server.travel.world.hotels_in(city)
    with _client(server) as client:
        assert _errors(client.get("/travel/hotels?city=&checkin=2027-03-01").text) == {"city"}
        page = client.get(f"/travel/hotels?city={city}&checkin=2027-03-01&nights=2&sort=stars").text
        listed = re.findall(r"id='open-(\w+)'", page)
        assert sorted(listed) == sorted(h.id for h in hotels)
        stars = [server.travel.world.hotel_by_id[h].stars for h in listed]
        assert stars == sorted(stars, reverse=True)
        page = client.get(f"/travel/hotel/{hotels[0].id}?checkin=2027-03-01&nights=2").text
        assert f"<span id='hotel-stars'>{hotels[0].stars} stars</span>" in page
        assert "<option value='2027-03-01' selected>" in page and "<option value='2' selected>" in page
        session = client.cookies[COOKIE]
    assert server.facts(session).travel.hotel_searches == (city,)


def test_the_world_has_forty_airports_and_sensible_flights_and_hotels():
    world = travel_world(0)
    assert len(world.airports) == 40 == len({a.code for a in world.airports})
    assert len({a.city for a in world.airports}) == 40
    for origin in world.airports[:8]:
        for destination in world.airports[30:]:
            for flight in world.day_flights(origin.code, destination.code, "2027-03-31"):
                assert 0 < flight.fares["economy"] < flight.fares["premium"] < flight.fares["business"]
                assert flight.duration > 0 and flight.stops in (0, 1, 2)
                assert world.flight(flight.id) == flight
    assert world.day_flights(origin.code, destination.code, "2027-04-30") == ()  # past the window
    assert world.day_flights(origin.code, origin.code, "2027-03-31") == ()
    for airport in world.airports:
        hotels = world.hotels_in(airport.code)
        assert 6 <= len(hotels) <= 9 and all(2 <= h.stars <= 5 for h in hotels)
        assert all(0 < h.rooms["standard"] < h.rooms["deluxe"] < h.rooms["suite"] for h in hotels)
