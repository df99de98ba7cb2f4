"""The travel site's world: generated cities with their airports, flights and hotels, the same for the
same seed.

`travel_world(seed)` builds (and caches) a `TravelWorld`: `CITIES` cities, each with one airport (a
three-letter code) and a few hotels, and flights between any two of them on each day of the fixed
window `DAYS` days from `FIRST_DAY` (never today's date, so a task's answer never depends on when it
runs). A day's flights of one route are drawn when first asked for, from the seed, the route and the
date alone, so the same seed always serves the same flights. No third-party data: every name comes
from the small lists below. Prices are integer cents.

`TravelWorld.flights` is what the results page shows: one route's flights on one day, filtered and in
the chosen order; `TravelWorld.hotels_in` the hotels of a city.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import random
import re
from dataclasses import dataclass

__all__ = ["AMENITIES", "CABINS", "CITIES", "DAYS", "FIRST_DAY", "FLIGHT_SORTS", "HOTEL_SORTS", "ROOMS",
           "Airport", "Flight", "Hotel", "TravelWorld", "format_duration", "format_price", "parse_day",
           "travel_world", "window_days"]

CITIES = 40
FIRST_DAY = dt.date(2027, 3, 1)
"""The first day with flights."""
DAYS = 60
"""How many days, from `FIRST_DAY`, have flights (and hotel check-ins)."""
CABINS = {"economy": "Economy", "premium": "Premium economy", "business": "Business"}
"""The cabins: value -> label."""
_CABIN_FACTOR = {"economy": 1.0, "premium": 1.65, "business": 2.9}
ROOMS = {"standard": "Standard room", "deluxe": "Deluxe room", "suite": "Suite"}
"""The room types: value -> label."""
_ROOM_FACTOR = {"standard": 1.0, "deluxe": 1.35, "suite": 2.1}
AMENITIES = ("free wifi", "pool", "gym", "spa", "parking", "breakfast", "airport shuttle", "restaurant")
FLIGHT_SORTS = {"price": "Price: lowest first", "departure": "Departure: earliest first",
                "duration": "Duration: shortest first"}
HOTEL_SORTS = {"price": "Price: lowest first", "stars": "Stars: most first"}
_AIRLINES = ("Aurora Air", "Bluewing", "Corvid Airways", "Dunlin Jet", "Estuary Air", "Fulmar Airlines",
             "Gannet Express", "Heron Skies")
_START = ("Val", "Kor", "Bren", "Tal", "Mir", "Osk", "Dun", "Lis", "Ferr", "Gal", "Hav", "Ist", "Jor", "Kel",
          "Lun", "Mar", "Nor", "Pel", "Quen", "Ros", "Sar", "Tor", "Ulm", "Ves", "Wyn", "Zar")
_END = ("ora", "avik", "mund", "ford", "heim", "ona", "port", "stad", "ava", "enza", "bury", "ria", "holm",
        "ino", "gard", "esse")
_HOTEL_FIRST = ("Harbour", "Grand", "Old Town", "Riverside", "Park", "Skyline", "Garden", "Station", "Royal",
                "Lighthouse", "Market", "Cedar", "Summit", "Quayside")
_HOTEL_LAST = ("Hotel", "Inn", "Lodge", "Suites", "House", "Residence")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def format_price(cents: int) -> str:
    """``$1,234.50`` for 123450 cents."""
    return f"${cents // 100:,}.{cents % 100:02d}"


def format_duration(minutes: int) -> str:
    """``5h 05m`` for 305 minutes."""
    return f"{minutes // 60}h {minutes % 60:02d}m"


def window_days() -> list[dt.date]:
    """Every day of the window, in order."""
    return [FIRST_DAY + dt.timedelta(days=n) for n in range(DAYS)]


def parse_day(value: str) -> dt.date | None:
    """The day ``YYYY-MM-DD`` names when it is in the window, else None."""
    if not _DATE.match(value or ""):
        return None
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        return None
    return day if FIRST_DAY <= day < FIRST_DAY + dt.timedelta(days=DAYS) else None


@dataclass(frozen=True)
class Airport:
    code: str
    city: str
    x: float
    y: float
    """A position on a flat map, in kilometres (it sets the flights' durations and fares)."""

    @property
    def label(self) -> str:
        """``Valora (VAL)``: what the search form shows."""
        return f"{self.city} ({self.code})"


@dataclass(frozen=True)
class Flight:
    id: str
    """``VAL-KOR-20270314-03``: the route, the day and the flight's number on that day."""
    origin: str
    destination: str
    date: str
    """``YYYY-MM-DD``."""
    airline: str
    number: str
    """The flight number (``AU 412``)."""
    departure: int
    """Minutes after midnight."""
    duration: int
    """Minutes."""
    stops: int
    fares: dict[str, int]
    """The fare of one passenger in each cabin, cents."""

    @property
    def departs(self) -> str:
        return f"{self.departure // 60:02d}:{self.departure % 60:02d}"

    @property
    def arrives(self) -> str:
        end = self.departure + self.duration
        days = f" +{end // 1440}" if end >= 1440 else ""
        return f"{end % 1440 // 60:02d}:{end % 60:02d}{days}"

    @property
    def stops_text(self) -> str:
        return "Direct" if self.stops == 0 else f"{self.stops} stop" + ("s" if self.stops > 1 else "")


@dataclass(frozen=True)
class Hotel:
    id: str
    name: str
    city: str
    """The city's airport code."""
    stars: int
    rooms: dict[str, int]
    """The nightly price of each room type, cents (`ROOMS`)."""
    amenities: tuple[str, ...]

    @property
    def nightly_cents(self) -> int:
        """The standard room's nightly price (what the list shows as "from")."""
        return self.rooms["standard"]


class TravelWorld:
    """The airports, hotels and flights of one seed."""

    def __init__(self, seed: int, airports: list[Airport], hotels: list[Hotel]):
        self.seed = seed
        self.airports = tuple(airports)
        self.by_code = {a.code: a for a in self.airports}
        self.hotels = tuple(hotels)
        self.hotel_by_id = {h.id: h for h in self.hotels}

    def hotels_in(self, code: str, sort: str = "price") -> list[Hotel]:
        found = [h for h in self.hotels if h.city == code]
        if sort == "stars":
            return sorted(found, key=lambda h: (-h.stars, h.nightly_cents, h.id))
        return sorted(found, key=lambda h: (h.nightly_cents, h.id))

    def suggest(self, text: str) -> list[Airport]:
        """The airports whose city, code or label contains `text` (case ignored), in city order."""
        needle = " ".join(text.split()).casefold()
        if not needle:
            return []
        return sorted((a for a in self.airports if needle in a.label.casefold()), key=lambda a: a.city)

    def resolve(self, text: str) -> Airport | None:
        """The airport `text` names exactly: its code, its city or its label (case ignored)."""
        needle = " ".join(text.split()).casefold()
        return next((a for a in self.airports if needle in (a.code.casefold(), a.city.casefold(),
                                                            a.label.casefold())), None)

    def day_flights(self, origin: str, destination: str, date: str) -> tuple[Flight, ...]:
        """Every flight of the route on `date` (empty for an unknown airport or a day outside the window)."""
        if origin == destination or origin not in self.by_code or destination not in self.by_code:
            return ()
        if parse_day(date) is None:
            return ()
        return _day_flights(self.seed, self.by_code[origin], self.by_code[destination], date)

    def flight(self, flight_id: str) -> Flight | None:
        parts = flight_id.split("-")
        if len(parts) != 4 or len(parts[2]) != 8:
            return None
        date = f"{parts[2][:4]}-{parts[2][4:6]}-{parts[2][6:]}"
        return next((f for f in self.day_flights(parts[0], parts[1], date) if f.id == flight_id), None)

    def flights(self, origin: str, destination: str, date: str, *, cabin: str = "economy",
                sort: str = "price", max_stops: int | None = None, airline: str = "") -> list[Flight]:
        """The route's flights on `date` with at most `max_stops` stops (and of `airline`), in `sort` order
        (ties by departure, then id)."""
        found = [f for f in self.day_flights(origin, destination, date)
                 if (max_stops is None or f.stops <= max_stops) and (not airline or f.airline == airline)]
        if sort == "departure":
            return sorted(found, key=lambda f: (f.departure, f.fares[cabin], f.id))
        if sort == "duration":
            return sorted(found, key=lambda f: (f.duration, f.fares[cabin], f.id))
        return sorted(found, key=lambda f: (f.fares[cabin], f.departure, f.id))

    @property
    def airlines(self) -> tuple[str, ...]:
        return _AIRLINES


@functools.lru_cache(maxsize=4096)
def _day_flights(seed: int, origin: Airport, destination: Airport, date: str) -> tuple[Flight, ...]:
    rng = random.Random(f"travel-flights:{seed}:{origin.code}:{destination.code}:{date}")
    distance = math.hypot(origin.x - destination.x, origin.y - destination.y)
    flights = []
    for number in range(1, rng.randint(10, 20) + 1):
        stops = rng.choices((0, 1, 2), weights=(5, 4, 1))[0]
        airline = rng.choice(_AIRLINES)
        duration = int(35 + distance / 780 * 60) + sum(rng.randint(55, 200) for _ in range(stops))
        duration += rng.randint(0, 5) * 5
        base = (5_000 + distance * 10) * rng.uniform(0.8, 1.5) * (1.0, 0.78, 0.66)[stops]
        fares = {cabin: int(base * factor) // 100 * 100 + rng.choice((0, 49, 99)) for cabin, factor
                 in _CABIN_FACTOR.items()}
        flights.append(Flight(
            id=f"{origin.code}-{destination.code}-{date.replace('-', '')}-{number:02d}", origin=origin.code,
            destination=destination.code, date=date, airline=airline,
            number=f"{airline[:2].upper()} {rng.randint(100, 989)}", departure=rng.randint(60, 275) * 5,
            duration=duration, stops=stops, fares=fares))
    return tuple(flights)


@functools.lru_cache(maxsize=4)
def travel_world(seed: int) -> TravelWorld:
    """The world of `seed` (built once per seed and cached; immutable)."""
    rng = random.Random(f"travel-world:{seed}")
    airports: list[Airport] = []
    while len(airports) < CITIES:
        city = rng.choice(_START) + rng.choice(_END)
        code = city[:3].upper()
        if any(a.code == code or a.city == city for a in airports):
            code = (city[0] + city[2] + city[-1]).upper()
            if any(a.code == code or a.city == city for a in airports):
                continue
        airports.append(Airport(code, city, round(rng.uniform(0, 4_500), 1), round(rng.uniform(0, 3_000), 1)))
    airports.sort(key=lambda a: a.code)
    hotels: list[Hotel] = []
    for airport in airports:
        names: set[str] = set()
        count = rng.randint(6, 9)
        while len(names) < count:
            name = f"{rng.choice(_HOTEL_FIRST)} {rng.choice(_HOTEL_LAST)}"
            if name in names:
                continue
            names.add(name)
            stars = rng.choices((2, 3, 4, 5), weights=(2, 4, 3, 1))[0]
            nightly = (40 + stars * 30 + rng.randint(0, 60 + stars * 25)) * 100 + rng.choice((0, 50, 99))
            rooms = {room: int(nightly * factor) // 100 * 100 + nightly % 100 for room, factor in
                     _ROOM_FACTOR.items()}
            amenities = tuple(a for a in AMENITIES if rng.random() < 0.25 + stars * 0.1)
            hotels.append(Hotel(id=f"H{airport.code}{len(names):02d}", name=f"{name} {airport.city}",
                                city=airport.code, stars=stars, rooms=rooms, amenities=amenities))
    return TravelWorld(seed, airports, hotels)
