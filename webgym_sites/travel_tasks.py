"""Generated travel tasks as rows of the published task schema, the same for the same seeds.

`travel_tasks(count, seed=..., travel_seed=...)` draws `count` tasks for the travel site served with
``--travel-seed travel_seed`` from nine templates, taken in turn so that the levels come out about a
third each (the level follows from the fact count: easy 1-3, medium 4-6, hard 7+):

    easy    cheapest_direct  report the cheapest direct economy fare of a route on a day (information
                             seeking: `definite_answer`)
            hotel_stars      report a named hotel's stars and standard nightly price (information seeking)
            earliest         report the airline and departure time of a route's first flight of a day
    medium  book_cheapest    book a route's cheapest flight of a day in a cabin, with passenger details
            book_airline     book the cheapest direct flight of a given airline on a route and day
            book_hotel       book a room type at a named hotel for some nights from a day
    hard    trip             book a route's cheapest economy flight, then the cheapest hotel of 4 stars
                             or more at the destination from the day of arrival
            group            book a route's earliest flight of a day in a cabin for several passengers
            fastest          book a route's shortest flight of a day in a cabin

Every fact has its check (`webgym_sites.goals`) in ``source.metadata["checks"]``,
beside ``params``: what a session that does the task right does (the search, the filters, the flight
and hotel, the form fields), for the scripted expert (`expert_moves`) and the tests. An answer fact's
candidates are what the page that answers it lists beside the right value: the day's other flights,
the city's other hotels (and the hotel's dearer rooms). A booking task's booking fact is that the
session booked one flight (one room), the right one (``one_flight``, ``one_hotel``). A template
whose draw has no single right answer (two flights tied for cheapest) draws again.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from webgym_data.schema import Task
from webgym_sites.drawing import (
    DEFAULT_BASE_URL,
    Draw,
    Fact,
    SiteRows,
    answer_fact,
    draw_tasks,
)
from webgym_sites.plans import Answer, Choose, Fill, Goto, Move, Press
from webgym_sites.travel_catalogue import (
    CABINS,
    ROOMS,
    Airport,
    Flight,
    Hotel,
    TravelWorld,
    format_price,
    travel_world,
    window_days,
)
from webgym_sites.travel_forms import SEATS

__all__ = ["BENCHMARK", "DEFAULT_BASE_URL", "TEMPLATES", "expert_moves", "travel_tasks"]

BENCHMARK = "webgym-travel"
"""The `benchmark_name` of the generated rows."""
_ROWS = SiteRows(site="travel", benchmark=BENCHMARK, domain="travel")

_FIRST = ("Ava", "Ben", "Chloe", "Dev", "Elin", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Liam")
_LAST = ("Nilsen", "Okafor", "Moreau", "Tanaka", "Kowalski", "Haddad", "Silva", "Byrne", "Novak", "Ferreira")
_SEAT_TEXT = {"any": "no seat preference", "window": "a window seat", "aisle": "an aisle seat"}



def _draw(template: str, subdomain: str, instruction: str, groups: list[tuple[str, list[Fact]]],
          params: dict[str, Any], answer: str = "") -> Draw:
    """A travel draw: a hotel task starts on the hotel search, the others on the flight search."""
    start = "/hotels" if subdomain == "hotels" else "/"
    return Draw(template, instruction, groups, params, answer, start=start, subdomain=subdomain)


def _day_text(date: str) -> str:
    return dt.date.fromisoformat(date).strftime("%A %d %B %Y")


def _route(rng: random.Random, world: TravelWorld) -> tuple[Airport, Airport, str]:
    origin, destination = rng.sample(world.airports, 2)
    return origin, destination, rng.choice(window_days()).isoformat()


def _search(origin: Airport, destination: Airport, date: str, passengers: int = 1,
            cabin: str = "economy") -> dict[str, Any]:
    return {"origin": origin.code, "destination": destination.code, "date": date, "passengers": passengers,
            "cabin": cabin}


def _searched(origin: Airport, destination: Airport, date: str) -> Fact:
    return (f"The flights from {origin.label} to {destination.label} on {_day_text(date)} were listed.",
            {"type": "flight_searched", "origin": origin.code, "destination": destination.code, "date": date})


def _only_best(flights: list[Flight], key: Callable[[Flight], Any]) -> Flight | None:
    """The first flight when its key is strictly the best, else None (no single right answer)."""
    if not flights or (len(flights) > 1 and key(flights[0]) == key(flights[1])):
        return None
    return flights[0]


def _traveller(rng: random.Random) -> dict[str, str]:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    letters = "ABCDEFGHJKLMNPRSTUVWXYZ"
    return {"full_name": f"{first} {last}", "email": f"{first.lower()}.{last.lower()}@example.test",
            "passport": f"{rng.choice(letters)}{rng.choice(letters)}{rng.randint(0, 9_999_999):07d}",
            "seat": rng.choice(sorted(SEATS))}


def _traveller_text(person: dict[str, str]) -> str:
    return (f"for {person['full_name']} (email {person['email']}, passport {person['passport']}) with "
            f"{_SEAT_TEXT[person['seat']]}")


def _booking_facts(person: dict[str, str], names: tuple[str, ...]) -> list[Fact]:
    said = {"full_name": "The booking's lead passenger is {}.", "email": "The booking's email is {}.",
            "passport": "The booking's passport number is {}.",
            "seat": "The booking's seat preference is {}.",
            "cabin": "The booking is in the {} cabin.", "passengers": "The booking is for {} passengers."}
    return [(said[name].format(person[name]), {"type": "flight_booking_field", "name": name,
                                               "value": str(person[name])}) for name in names]


def _flight_booked(flight: Flight) -> Fact:
    return (f"The flight {flight.number} ({flight.departs}) was booked, and no other flight.",
            {"type": "one_flight", "flight_id": flight.id})


def _hotel_booked(hotel: Hotel) -> Fact:
    return (f"A room at the {hotel.name} was booked, and no other room.",
            {"type": "one_hotel", "hotel_id": hotel.id})


# ------------------------------------------------------------------------------------ templates

def _cheapest_direct(rng: random.Random, world: TravelWorld) -> Draw | None:
    origin, destination, date = _route(rng, world)
    flight = _only_best(world.flights(origin.code, destination.code, date, max_stops=0),
                        lambda f: f.fares["economy"])
    if flight is None:
        return None
    price = format_price(flight.fares["economy"])
    fares = [format_price(f.fares["economy"]) for f in world.flights(origin.code, destination.code, date)]
    return _draw("cheapest_direct", "flights",
                 f"On Webgym Travel, what is the cheapest economy fare for one passenger on a direct flight "
                 f"from {origin.label} to {destination.label} on {_day_text(date)}?",
                 [("Search", [_searched(origin, destination, date)]),
                  ("Answer", [answer_fact(f"The answer gives the fare {price}.", "price", price, fares)])],
                 {"search": _search(origin, destination, date), "filters": {"stops": "0", "sort": "price"},
                  "flight_id": flight.id}, answer=price)


def _hotel_stars(rng: random.Random, world: TravelWorld) -> Draw:
    hotel = rng.choice(world.hotels)
    city = world.by_code[hotel.city].city
    price = format_price(hotel.nightly_cents)
    others = [h for h in world.hotels_in(hotel.city) if h != hotel]
    prices = [format_price(cents) for cents in (*hotel.rooms.values(), *(h.nightly_cents for h in others))]
    stars = f"{hotel.stars} stars"
    return _draw("hotel_stars", "hotels",
                 f"On Webgym Travel, how many stars does the {hotel.name} in {city} have, and what does its "
                 "standard room cost a night?",
                 [("Hotel found", [(f"The page of the {hotel.name} was opened.",
                                    {"type": "visited", "path": f"/travel/hotel/{hotel.id}"})]),
                  ("Answer", [answer_fact(f"The answer gives {stars}.", "rating", stars,
                                          [f"{h.stars} stars" for h in others]),
                              answer_fact(f"The answer gives the nightly price {price}.", "price", price,
                                          prices)])],
                 {"hotel_id": hotel.id}, answer=f"{stars}, {price} a night")


def _earliest(rng: random.Random, world: TravelWorld) -> Draw | None:
    origin, destination, date = _route(rng, world)
    day = world.flights(origin.code, destination.code, date, sort="departure")
    flight = _only_best(day, lambda f: f.departure)
    if flight is None:
        return None
    return _draw("earliest", "flights",
                 f"On Webgym Travel, which airline flies the first flight of the day from {origin.label} to "
                 f"{destination.label} on {_day_text(date)}, and at what time does it depart?",
                 [("Search", [_searched(origin, destination, date)]),
                  ("Answer", [answer_fact(f"The answer names {flight.airline}.", "name", flight.airline,
                                          [f.airline for f in day]),
                              answer_fact(f"The answer gives the departure time {flight.departs}.", "time",
                                          flight.departs, [f.departs for f in day])])],
                 {"search": _search(origin, destination, date), "filters": {"sort": "departure"},
                  "flight_id": flight.id}, answer=f"{flight.airline}, departing at {flight.departs}")


def _book_cheapest(rng: random.Random, world: TravelWorld) -> Draw | None:
    origin, destination, date = _route(rng, world)
    cabin = rng.choice(sorted(CABINS))
    flight = _only_best(world.flights(origin.code, destination.code, date, cabin=cabin),
                        lambda f: f.fares[cabin])
    if flight is None:
        return None
    person = _traveller(rng) | {"cabin": cabin}
    return _draw("book_cheapest", "flights",
                 f"On Webgym Travel, book the cheapest {CABINS[cabin].lower()} flight from {origin.label} to "
                 f"{destination.label} on {_day_text(date)} for one passenger, {_traveller_text(person)}.",
                 [("Search", [_searched(origin, destination, date)]),
                  ("Booking", [_flight_booked(flight),
                               *_booking_facts(person, ("cabin", "full_name", "passport", "seat"))])],
                 {"search": _search(origin, destination, date, 1, cabin), "filters": {"sort": "price"},
                  "flight_id": flight.id, "booking": person})


def _book_airline(rng: random.Random, world: TravelWorld) -> Draw | None:
    origin, destination, date = _route(rng, world)
    direct = world.flights(origin.code, destination.code, date, max_stops=0)
    if not direct:
        return None
    airline = rng.choice(sorted({f.airline for f in direct}))
    flight = _only_best([f for f in direct if f.airline == airline], lambda f: f.fares["economy"])
    if flight is None:
        return None
    person = _traveller(rng)
    return _draw("book_airline", "flights",
                 f"On Webgym Travel, book the cheapest direct {airline} flight from {origin.label} to "
                 f"{destination.label} on {_day_text(date)} in economy, {_traveller_text(person)}.",
                 [("Search", [_searched(origin, destination, date)]),
                  ("Booking", [_flight_booked(flight),
                               *_booking_facts(person, ("full_name", "email", "passport"))])],
                 {"search": _search(origin, destination, date),
                  "filters": {"stops": "0", "airline": airline, "sort": "price"}, "flight_id": flight.id,
                  "booking": person | {"cabin": "economy"}})


def _stay(rng: random.Random) -> tuple[str, int]:
    return rng.choice(window_days()).isoformat(), rng.randint(1, 7)


def _hotel_facts(checkin: str, nights: int, values: dict[str, str],
                 names: tuple[str, ...]) -> list[Fact]:
    said = {"checkin": f"The stay starts on {_day_text(checkin)}.", "nights": f"The stay is {nights} nights.",
            "room": "The room booked is a {}.", "full_name": "The hotel booking is in the name of {}.",
            "email": "The hotel booking's email is {}."}
    fields = values | {"checkin": checkin, "nights": str(nights)}
    shown = fields | {"room": ROOMS.get(fields.get("room", ""), "").lower()}
    return [(said[name].format(shown[name]),
             {"type": "hotel_booking_field", "name": name, "value": fields[name]}) for name in names]


def _book_hotel(rng: random.Random, world: TravelWorld) -> Draw:
    hotel = rng.choice(world.hotels)
    checkin, nights = _stay(rng)
    person = _traveller(rng)
    room = rng.choice(sorted(ROOMS))
    values = {"room": room, "full_name": person["full_name"], "email": person["email"]}
    return _draw("book_hotel", "hotels",
                 f"On Webgym Travel, book a {ROOMS[room].lower()} at the {hotel.name} for {nights} night"
                 f"{'s' if nights > 1 else ''} from {_day_text(checkin)}, for {person['full_name']} "
                 f"(email {person['email']}).",
                 [("Booking", [_hotel_booked(hotel),
                               *_hotel_facts(checkin, nights, values,
                                             ("checkin", "nights", "room", "full_name", "email"))])],
                 {"stay": {"checkin": checkin, "nights": nights}, "hotel_id": hotel.id,
                  "hotel_booking": values})


def _trip(rng: random.Random, world: TravelWorld) -> Draw | None:
    origin, destination, date = _route(rng, world)
    flight = _only_best(world.flights(origin.code, destination.code, date), lambda f: f.fares["economy"])
    good = [h for h in world.hotels_in(destination.code) if h.stars >= 4]
    if flight is None or not good or (len(good) > 1 and good[0].nightly_cents == good[1].nightly_cents):
        return None
    hotel, nights = good[0], rng.randint(2, 6)
    landing = dt.date.fromisoformat(date) + dt.timedelta(days=(flight.departure + flight.duration) // 1440)
    checkin = landing.isoformat()
    if checkin not in {d.isoformat() for d in window_days()}:
        return None
    person = _traveller(rng)
    values = {"room": "standard", "full_name": person["full_name"], "email": person["email"]}
    return _draw("trip", "trips",
                 f"On Webgym Travel, plan a trip: book the cheapest economy flight from {origin.label} to "
                 f"{destination.label} on {_day_text(date)}, {_traveller_text(person)}; then book a standard "
                 f"room for {nights} nights, from the day the flight lands, at the cheapest hotel in "
                 f"{destination.city} with 4 stars or more, in the same name and email.",
                 [("Flight", [_searched(origin, destination, date), _flight_booked(flight),
                              *_booking_facts(person, ("full_name", "passport"))]),
                  ("Hotel", [(f"The hotels of {destination.city} were listed.",
                              {"type": "hotel_searched", "city": destination.code}),
                             _hotel_booked(hotel),
                             *_hotel_facts(checkin, nights, values, ("checkin", "nights", "full_name"))])],
                 {"search": _search(origin, destination, date), "filters": {"sort": "price"},
                  "flight_id": flight.id,
                  "booking": person | {"cabin": "economy"},
                  "hotel": {"city": destination.code, "checkin": checkin, "nights": nights, "sort": "price"},
                  "hotel_id": hotel.id, "hotel_booking": values})


def _group(rng: random.Random, world: TravelWorld) -> Draw | None:
    origin, destination, date = _route(rng, world)
    cabin, passengers = rng.choice(sorted(CABINS)), rng.randint(2, 5)
    flight = _only_best(world.flights(origin.code, destination.code, date, cabin=cabin, sort="departure"),
                        lambda f: f.departure)
    if flight is None:
        return None
    person = _traveller(rng) | {"cabin": cabin, "passengers": str(passengers)}
    return _draw("group", "flights",
                 f"On Webgym Travel, book the earliest flight of the day from {origin.label} "
                 f"to {destination.label} "
                 f"on {_day_text(date)} for {passengers} passengers in {CABINS[cabin].lower()}; the "
                 "lead passenger "
                 f"is {person['full_name']} (email {person['email']}, passport {person['passport']}), with "
                 f"{_SEAT_TEXT[person['seat']]}.",
                 [("Search", [_searched(origin, destination, date)]),
                  ("Booking", [_flight_booked(flight),
                               *_booking_facts(person, ("cabin", "passengers", "full_name", "email",
                                                        "passport", "seat"))])],
                 {"search": _search(origin, destination, date, passengers, cabin),
                  "filters": {"sort": "departure"},
                  "flight_id": flight.id, "booking": person})


def _fastest(rng: random.Random, world: TravelWorld) -> Draw | None:
    origin, destination, date = _route(rng, world)
    cabin = rng.choice(("premium", "business"))
    flight = _only_best(world.flights(origin.code, destination.code, date, cabin=cabin, sort="duration"),
                        lambda f: f.duration)
    if flight is None:
        return None
    person = _traveller(rng) | {"cabin": cabin}
    return _draw("fastest", "flights",
                 f"On Webgym Travel, book the shortest flight (by duration) from {origin.label} to "
                 f"{destination.label} on {_day_text(date)} in {CABINS[cabin].lower()} for one passenger, "
                 f"{_traveller_text(person)}.",
                 [("Search", [_searched(origin, destination, date)]),
                  ("Booking", [_flight_booked(flight),
                               *_booking_facts(person, ("cabin", "full_name", "email", "passport",
                                                        "seat"))])],
                 {"search": _search(origin, destination, date, 1, cabin), "filters": {"sort": "duration"},
                  "flight_id": flight.id, "booking": person})


TEMPLATES: dict[str, Callable[[random.Random, TravelWorld], Draw | None]] = {
    "cheapest_direct": _cheapest_direct, "book_cheapest": _book_cheapest, "trip": _trip,
    "hotel_stars": _hotel_stars, "book_airline": _book_airline, "group": _group,
    "earliest": _earliest, "book_hotel": _book_hotel, "fastest": _fastest,
}
"""The templates, in the order `travel_tasks` takes them (easy, medium, hard, easy, ...)."""


def travel_tasks(count: int, *, seed: int = 0, travel_seed: int = 0,
                 base_url: str = DEFAULT_BASE_URL) -> list[Task]:
    """`count` distinct tasks for the travel site of `travel_seed`, drawn with `seed`; start URLs under
    `base_url` (the site server's, ``http://host:port``)."""
    return draw_tasks(_ROWS, TEMPLATES, travel_world(travel_seed), count, seed=seed, data_seed=travel_seed,
                      base_url=base_url)


# ------------------------------------------------------------------------------ the expert's plan

def expert_moves(params: dict[str, Any], task: Task) -> list[Move]:
    """The scripted expert's plan for a travel task (`webgym_sites.plans`).

    It opens the results page of the task's search straight away (sorted and filtered so that its
    flight comes first) and the hotel list or page by URL, then clicks and types through the rest:
    the plans fit the train split's step budgets (a hard trip takes 27 steps). The search form's
    widgets are left to the agents (and the site's tests)."""
    moves: list[Move] = []
    if "search" in params:
        moves.append(Goto("/travel/flights?" + urlencode(params["search"] | params.get("filters", {}))))
    if "booking" in params:
        person = params["booking"]
        moves += [Press(f"select-{params['flight_id']}"), Press("book-flight")]
        moves += [Fill(name, person[name]) for name in ("full_name", "email", "passport")]
        moves += [Choose("seat", person["seat"]), Press("book-button"), Press("confirm-booking")]
    if "hotel" in params:
        moves += [Goto("/travel/hotels?" + urlencode(params["hotel"])), Press(f"open-{params['hotel_id']}")]
    elif "hotel_id" in params:
        stay = f"?{urlencode(params['stay'])}" if "stay" in params else ""
        moves.append(Goto(f"/travel/hotel/{params['hotel_id']}{stay}"))
    if "hotel_booking" in params:
        values = params["hotel_booking"]
        moves += [Choose("room", values["room"]), Fill("full_name", values["full_name"]),
                  Fill("email", values["email"]), Press("book-room"), Press("confirm-booking")]
    return [*moves, Answer(task.definite_answer or "Done.")]
