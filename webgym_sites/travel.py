"""The travel site: flights and hotels, served at ``/travel/`` by the site server, from a seeded world.

Pages (paths below ``/travel``; GET unless marked)::

    /                      the flight search form: origin and destination with suggestions, a
                           calendar (a month of day buttons, previous and next month), passengers
                           and cabin; every button of the form submits it, so what was typed and
                           chosen is kept (no scripts)
    /suggest               the form with the airports matching the ``field``'s text (``q``, else the
                           field's own value) listed as buttons; one fills the field
    /flights               the results of a route on a day (or, while the form is incomplete, the
                           form again with suggestions and each field's error): sort (price,
                           departure, duration), filters (stops, airline), 8 flights a page
    /flight/<id>           a flight's details and fares; a link to book it
    /book/<id>             the booking form; POST /book validates it server-side and shows each
                           field's error, or opens the confirmation modal; POST /book/confirm books
                           it and redirects to /booking/<reference>
    /hotels                the hotel search (city, check-in day, nights, sort) and its list
    /hotel/<id>            a hotel's stars, amenities, rooms and the room booking form; POST
                           /hotel/book and /hotel/book/confirm as for flights
    /booking/<reference>   a booking's confirmation; /bookings lists the session's bookings

How the form's widgets work without scripts: the Search button comes first in the form, so Enter in
a text field searches; a search whose origin or destination does not name one airport exactly shows
the form again with that field's suggestions. A suggestion, a day of the calendar and the month
links are submit buttons of the same form (``formaction`` the home page) carrying ``origin_pick``,
``pick`` (the day, which fills the hidden ``date`` field) or ``month``.

Each session (`webgym_sites.state`) has its own searches, bookings and pending
bookings (`TravelState`); `TravelSite.facts` is their ground-truth record (`TravelFacts`). The world
comes from the seed (`travel_catalogue`), so the same seed serves the same pages.
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from webgym_sites.base import PageRequest, PageResponse, Site, esc, layout
from webgym_sites.facts import FlightBookingFacts, HotelBookingFacts, TravelFacts
from webgym_sites.state import Session
from webgym_sites.travel_catalogue import (
    CABINS,
    FIRST_DAY,
    FLIGHT_SORTS,
    HOTEL_SORTS,
    ROOMS,
    Flight,
    Hotel,
    TravelWorld,
    format_duration,
    format_price,
    parse_day,
    travel_world,
    window_days,
)
from webgym_sites.travel_forms import (
    FLIGHT_FIELDS,
    HOTEL_FIELDS,
    PASSPORT_PATTERN,
    SEATS,
    validate_flight_booking,
    validate_hotel_booking,
)

__all__ = ["MAX_NIGHTS", "MAX_PASSENGERS", "PAGE_SIZE", "TravelSite", "TravelState"]

PAGE_SIZE = 8
"""Flights per results page."""
MAX_PASSENGERS = 6
MAX_NIGHTS = 14
_STOPS = {"": "Any number of stops", "0": "Direct only", "1": "At most 1 stop"}
_CSS = ("<style>.search{display:flex;flex-direction:column;gap:4px;max-width:560px}.search .go{order:9}"
        ".suggestions{list-style:none;padding:0;margin:2px 0}.suggestions button{margin:1px 0}"
        ".calendar td{padding:2px;border:none}.calendar button{width:38px}.calendar .off{color:#aaa;"
        "text-align:center}.calendar [aria-pressed=true]{background:#234;color:#fff}</style>")


@dataclass
class TravelState:
    """One session's travel site: the searches shown, the bookings, bookings awaiting confirmation."""

    flight_searches: list[str] = field(default_factory=list)
    hotel_searches: list[str] = field(default_factory=list)
    flights: list[FlightBookingFacts] = field(default_factory=list)
    hotels: list[HotelBookingFacts] = field(default_factory=list)
    pending_flight: dict[str, str] | None = None
    """The validated flight booking fields while its confirmation modal is open."""
    pending_hotel: dict[str, str] | None = None


@dataclass
class _SearchForm:
    """The flight search form's values as the page shows them."""

    origin: str = ""
    destination: str = ""
    date: str = ""
    month: str = ""
    passengers: str = "1"
    cabin: str = "economy"


def _int(value: str, default: int | None = None) -> int | None:
    try:
        return int(value)
    except ValueError:
        return default


def _option(value: str, label: str, selected: bool) -> str:
    return f"<option value='{esc(value)}'{' selected' if selected else ''}>{esc(label)}</option>"


def _options(items: dict[str, str], chosen: str) -> str:
    return "".join(_option(value, label, value == chosen) for value, label in items.items())


def _error(errors: dict[str, str], name: str) -> str:
    return f"<p class='error' id='error-{name}'>{esc(errors[name])}</p>" if name in errors else ""


def _long_day(value: str) -> str:
    return dt.date.fromisoformat(value).strftime("%a %d %b %Y")


def _months() -> list[str]:
    return sorted({day.strftime("%Y-%m") for day in window_days()})


def _stars(count: int) -> str:
    return f"{count} stars"


class TravelSite(Site):
    """The travel site of one world seed."""

    name = "travel"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.world: TravelWorld = travel_world(seed)

    # ------------------------------------------------------------------------------ plumbing

    def new_state(self) -> TravelState:
        return TravelState()

    def facts(self, session: Session) -> TravelFacts | None:
        state: TravelState | None = session.peek_site_state(self.name)
        if state is None:
            return None
        return TravelFacts(seed=self.seed, flight_searches=tuple(state.flight_searches),
                           hotel_searches=tuple(state.hotel_searches), flights=tuple(state.flights),
                           hotels=tuple(state.hotels))

    def handle(self, request: PageRequest) -> PageResponse:
        state: TravelState = request.session.site_state(self.name, self.new_state)
        path, method = request.path, request.method
        if method == "GET":
            if path == "/":
                return self._home(state, self._read_form(request))
            if path == "/suggest":
                form, which = self._read_form(request), request.arg("field")
                if which in ("origin", "destination") and request.arg("q"):
                    setattr(form, which, request.arg("q"))
                return self._home(state, form, suggest=(which,))
            if path == "/flights":
                return self._results(request, state)
            if path.startswith("/flight/") and (flight := self.world.flight(path.removeprefix("/flight/"))):
                return self._flight(request, state, flight)
            if path.startswith("/book/") and (flight := self.world.flight(path.removeprefix("/book/"))):
                values = {"cabin": request.arg("cabin", "economy"),
                          "passengers": request.arg("passengers", "1")}
                return self._booking_form(state, flight, values, {})
            if path == "/hotels":
                return self._hotels(request, state)
            hotel = self.world.hotel_by_id.get(path.removeprefix("/hotel/"))
            if path.startswith("/hotel/") and hotel is not None:
                values = {"checkin": request.arg("checkin"), "nights": request.arg("nights", "1")}
                return self._hotel(state, hotel, values, {})
            if path == "/bookings":
                return self._bookings(state)
            if path.startswith("/booking/"):
                page = self._booking(state, path.removeprefix("/booking/"))
                if page is not None:
                    return page
        elif method == "POST":
            action = {"/book": self._submit_flight, "/book/confirm": self._confirm_flight,
                      "/hotel/book": self._submit_hotel, "/hotel/book/confirm": self._confirm_hotel}.get(path)
            if action is not None:
                return action(request, state)
        return PageResponse(self._page(state, "Not found", "<h1>Page not found</h1>"
                                       f"<p><a href='{self.mount}/'>Back to Webgym Travel</a>"
                                       "</p>"), status=404)

    def _redirect(self, path: str, **query: str) -> PageResponse:
        return PageResponse(location=f"{self.mount}{path}" + (f"?{urlencode(query)}" if query else ""))

    def _page(self, state: TravelState, title: str, body: str) -> str:
        m = self.mount
        count = len(state.flights) + len(state.hotels)
        header = (f"<a href='{m}/'><b>Webgym Travel</b></a><a id='flights-link' href='{m}/'>Flights</a>"
                  f"<a id='hotels-link' href='{m}/hotels'>Hotels</a>"
                  f"<a id='trips-link' href='{m}/bookings'>My trips ({count})</a>")
        return layout(f"{title} - Webgym Travel", header, _CSS + body)

    # ------------------------------------------------------------------- the flight search form

    def _read_form(self, request: PageRequest) -> _SearchForm:
        form = _SearchForm(origin=request.arg("origin"), destination=request.arg("destination"),
                           passengers=request.arg("passengers", "1"), cabin=request.arg("cabin", "economy"))
        for which in ("origin", "destination"):
            picked = self.world.by_code.get(request.arg(f"{which}_pick"))
            if picked is not None:
                setattr(form, which, picked.label)
        pick = parse_day(request.arg("pick"))
        date = pick or parse_day(request.arg("date"))
        form.date = date.isoformat() if date else ""
        months = _months()
        for candidate in (request.arg("month"), pick and pick.strftime("%Y-%m"), request.arg("view"),
                          date and date.strftime("%Y-%m"), months[0]):
            if candidate in months:
                form.month = candidate
                break
        return form

    def _home(self, state: TravelState, form: _SearchForm, *, suggest: tuple[str, ...] = (),
              errors: dict[str, str] | None = None) -> PageResponse:
        body = ("<h1>Find a flight</h1><p>Fly between 40 cities from "
                f"{FIRST_DAY.strftime('%d %B %Y')}. <a href='{self.mount}/hotels'>Looking for a "
                "hotel?</a></p>"
                + self._search_form(form, suggest, errors or {}))
        return PageResponse(self._page(state, "Flights", body))

    def _search_form(self, form: _SearchForm, suggest: tuple[str, ...], errors: dict[str, str]) -> str:
        m = self.mount

        def place(which: str, label: str) -> str:
            value = getattr(form, which)
            listed = ""
            if which in suggest:
                found = self.world.suggest(value)
                items = "".join(f"<li><button type='submit' role='option' formaction='{m}/' "
                                f"name='{which}_pick' value='{a.code}' id='{which}-option-{a.code}'>"
                                f"{esc(a.label)}</button></li>" for a in found)
                listed = (f"<ul class='suggestions' id='{which}-suggestions' role='listbox' "
                          f"aria-label='{label} suggestions'>{items}</ul>" if items
                          else f"<p id='{which}-suggestions'>No airport matches “{esc(value)}”.</p>")
            return (f"<div><label>{label} <input id='{which}' name='{which}' value='{esc(value)}' "
                    f"autocomplete='off' placeholder='City or airport code'></label> "
                    f"<button type='submit' id='{which}-suggest' formaction='{m}/suggest' name='field' "
                    f"value='{which}'>Find airports</button>{listed}{_error(errors, which)}</div>")

        passengers = {str(n): f"{n} passenger" + ("s" if n > 1 else "") for n in range(1, MAX_PASSENGERS + 1)}
        shown = _long_day(form.date) if form.date else "not chosen"
        return (f"<form id='flight-search' class='search' action='{m}/flights' method='get'>"
                "<div class='go'><button type='submit' id='search-flights'>Search flights</button></div>"
                + place("origin", "From") + place("destination", "To")
                + f"<input type='hidden' name='date' id='date' value='{form.date}'>"
                f"<input type='hidden' name='view' value='{form.month}'>"
                f"<fieldset id='date-picker'><legend>Departure date: <b id='date-shown'>{shown}</b></legend>"
                + self._calendar(form) + f"</fieldset>{_error(errors, 'date')}"
                f"<div><label>Passengers <select id='passengers' name='passengers'>"
                f"{_options(passengers, form.passengers)}</select></label></div>"
                f"<div><label>Cabin <select id='cabin' name='cabin'>{_options(CABINS, form.cabin)}</select>"
                "</label></div></form>")

    def _calendar(self, form: _SearchForm) -> str:
        m, months = self.mount, _months()
        year, month = (int(part) for part in form.month.split("-"))
        index = months.index(form.month)

        def turn(target: int, ident: str, label: str) -> str:
            if 0 <= target < len(months):
                return (f"<button type='submit' id='{ident}' formaction='{m}/' name='month' "
                        f"value='{months[target]}'>{label}</button>")
            return f"<button type='button' id='{ident}' disabled>{label}</button>"

        rows = []
        for week in calendar.Calendar().monthdatescalendar(year, month):
            cells = []
            for day in week:
                value = day.isoformat()
                if day.month != month:
                    cells.append("<td></td>")
                elif parse_day(value) is None:
                    cells.append(f"<td class='off'>{day.day}</td>")
                else:
                    pressed = "true" if value == form.date else "false"
                    cells.append(f"<td><button type='submit' formaction='{m}/' name='pick' value='{value}' "
                                 f"id='day-{value}' aria-pressed='{pressed}' "
                                 f"aria-label='{_long_day(value)}'>{day.day}</button></td>")
            rows.append(f"<tr>{''.join(cells)}</tr>")
        title = dt.date(year, month, 1).strftime("%B %Y")
        head = "".join(f"<th>{name}</th>" for name in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"))
        return (f"<div>{turn(index - 1, 'cal-prev', '‹ Previous month')} <b id='cal-month'>{title}</b> "
                f"{turn(index + 1, 'cal-next', 'Next month ›')}</div>"
                f"<table class='calendar' role='grid' aria-label='{title}'>"
                f"<tr>{head}</tr>{''.join(rows)}</table>")

    # ----------------------------------------------------------------------------- flights

    def _results(self, request: PageRequest, state: TravelState) -> PageResponse:
        form = self._read_form(request)
        origin, destination = self.world.resolve(form.origin), self.world.resolve(form.destination)
        errors: dict[str, str] = {}
        suggest = []
        for which, airport, label in (("origin", origin, "departure"),
                                      ("destination", destination, "arrival")):
            if airport is None:
                text = getattr(form, which)
                errors[which] = (f"Choose the {label} airport from the suggestions." if text
                                 else f"Enter the {label} city or airport.")
                if text:
                    suggest.append(which)
        if origin is not None and origin == destination:
            errors["destination"] = "The destination must differ from the origin."
        if not form.date:
            errors["date"] = "Pick a departure date in the calendar."
        if form.cabin not in CABINS:
            form.cabin = "economy"
        passengers = _int(form.passengers, 1) or 1
        if not 1 <= passengers <= MAX_PASSENGERS:
            passengers = 1
        if errors or origin is None or destination is None:
            return self._home(state, form, suggest=tuple(suggest), errors=errors)
        sort = request.arg("sort") if request.arg("sort") in FLIGHT_SORTS else "price"
        stops = request.arg("stops") if request.arg("stops") in _STOPS else ""
        airline = request.arg("airline") if request.arg("airline") in self.world.airlines else ""
        found = self.world.flights(origin.code, destination.code, form.date, cabin=form.cabin, sort=sort,
                                   max_stops=_int(stops), airline=airline)
        state.flight_searches.append(f"{origin.code}-{destination.code} {form.date}")
        request.session.search(self.name, f"{origin.code} to {destination.code} on {form.date}")
        pages = max(1, -(-len(found) // PAGE_SIZE))
        page = min(max(1, _int(request.arg("page"), 1) or 1), pages)
        chosen = {"sort": sort, "stops": stops, "airline": airline}
        kept = {"origin": origin.code, "destination": destination.code, "date": form.date,
                "passengers": str(passengers), "cabin": form.cabin}
        choice = urlencode({"passengers": passengers, "cabin": form.cabin})
        rows = "".join(
            f"<tr id='flight-{f.id}'><td>{esc(f.airline)}<br><small>{f.number}</small></td>"
            f"<td>{f.departs} – {f.arrives}</td><td>{format_duration(f.duration)}</td><td>{f.stops_text}</td>"
            f"<td class='price'>{format_price(f.fares[form.cabin])}</td>"
            f"<td><a id='select-{f.id}' href='{self.mount}/flight/{f.id}?{choice}'>Select</a></td></tr>"
            for f in found[(page - 1) * PAGE_SIZE:page * PAGE_SIZE])
        table = (f"<table id='flights'><tr><th>Airline</th><th>Departs – arrives</th><th>Duration</th>"
                 f"<th>Stops</th><th>Fare per passenger</th><th></th></tr>{rows}</table>" if rows
                 else "<p id='no-flights'>No flight matches these filters.</p>")
        change = urlencode({"origin": origin.label, "destination": destination.label, "date": form.date,
                            "passengers": passengers, "cabin": form.cabin})
        body = (f"<h1>{esc(origin.label)} to {esc(destination.label)}</h1>"
                f"<p id='search-summary'>{_long_day(form.date)} · {passengers} passenger"
                f"{'s' if passengers > 1 else ''} · {CABINS[form.cabin]} · "
                f"<a id='change-search' href='{self.mount}/?{esc(change)}'>Change search</a></p>"
                + self._filters(kept, sort, stops, airline)
                + f"<div class='results'><p id='result-count'>{len(found)} flights · page {page} "
                  f"of {pages}</p>"
                f"{table}{self._pagination(kept | chosen, page, pages)}"
                "</div>")
        return PageResponse(self._page(state, "Flights", body))

    def _filters(self, kept: dict[str, str], sort: str, stops: str, airline: str) -> str:
        hidden = "".join(f"<input type='hidden' name='{k}' value='{esc(v)}'>" for k, v in kept.items())
        airlines = {"": "All airlines"} | {a: a for a in self.world.airlines}
        return (f"<form class='side' id='flight-filters' action='{self.mount}/flights' method='get'>{hidden}"
                f"<label>Sort by <select id='sort' name='sort'>{_options(FLIGHT_SORTS, sort)}</select>"
                "</label>"
                f"<label>Stops <select id='stops' name='stops'>{_options(_STOPS, stops)}</select></label>"
                f"<label>Airline <select id='airline' name='airline'>{_options(airlines, airline)}</select>"
                "</label><p><button type='submit' id='apply-filters'>Apply</button></p></form>")

    def _pagination(self, params: dict[str, str], page: int, pages: int) -> str:
        if pages == 1:
            return ""

        def link(number: int, label: str, ident: str) -> str:
            href = f"{self.mount}/flights?{urlencode(params | {'page': str(number)})}"
            return f"<a id='{ident}' href='{esc(href)}'>{label}</a>"

        parts = [link(page - 1, "« Previous", "page-prev")] if page > 1 else []
        for number in range(1, pages + 1):
            parts.append(f"<span aria-current='page'><b>{number}</b></span>" if number == page
                         else link(number, str(number), f"page-{number}"))
        if page < pages:
            parts.append(link(page + 1, "Next »", "page-next"))
        return f"<nav class='pages' aria-label='Pages'>{''.join(parts)}</nav>"

    def _flight_table(self, flight: Flight) -> str:
        origin, destination = self.world.by_code[flight.origin], self.world.by_code[flight.destination]
        return ("<table id='flight-details'>"
                f"<tr><th>Flight</th><td id='flight-number'>{flight.number}</td></tr>"
                f"<tr><th>Airline</th><td id='flight-airline'>{esc(flight.airline)}</td></tr>"
                f"<tr><th>From</th><td>{esc(origin.label)}</td></tr><tr><th>To</th><td>{esc(destination.label)}"
                f"</td></tr><tr><th>Date</th><td>{_long_day(flight.date)}</td></tr>"
                f"<tr><th>Departs</th><td id='flight-departs'>{flight.departs}</td></tr>"
                f"<tr><th>Arrives</th><td>{flight.arrives}</td></tr>"
                f"<tr><th>Duration</th><td id='flight-duration'>{format_duration(flight.duration)}</td></tr>"
                f"<tr><th>Stops</th><td id='flight-stops'>{flight.stops_text}</td></tr></table>")

    def _flight(self, request: PageRequest, state: TravelState, flight: Flight) -> PageResponse:
        cabin = request.arg("cabin") if request.arg("cabin") in CABINS else "economy"
        passengers = _int(request.arg("passengers"), 1) or 1
        passengers = passengers if 1 <= passengers <= MAX_PASSENGERS else 1
        fares = "".join(f"<tr><th>{label}</th><td id='fare-{value}'>{format_price(flight.fares[value])}"
                        "</td></tr>" for value, label in CABINS.items())
        query = urlencode({"cabin": cabin, "passengers": passengers})
        body = (f"<h1>{esc(flight.airline)} {flight.number}</h1>{self._flight_table(flight)}"
                f"<h2>Fares per passenger</h2><table id='fares'>{fares}</table>"
                f"<p>{passengers} × {CABINS[cabin]}: <b id='flight-total'>"
                f"{format_price(passengers * flight.fares[cabin])}</b></p>"
                f"<p><a id='book-flight' href='{self.mount}/book/{flight.id}?{query}'>Book this "
                "flight</a></p>")
        return PageResponse(self._page(state, f"Flight {flight.number}", body))

    def _booking_form(self, state: TravelState, flight: Flight, values: dict[str, str],
                      errors: dict[str, str], *, modal: bool = False) -> PageResponse:
        m = self.mount

        def entry(name: str, label: str, extra: str = "") -> str:
            return (f"<label>{label} <input id='{name}' name='{name}' value='{esc(values.get(name, ''))}'"
                    f"{extra}></label>{_error(errors, name)}")

        passengers = {str(n): str(n) for n in range(1, MAX_PASSENGERS + 1)}
        named = FLIGHT_FIELDS | {"cabin": "cabin", "passengers": "passengers"}
        wrong = ", ".join(label for name, label in named.items() if name in errors)
        summary = (f"<div class='error' id='error-summary' role='alert'>Please correct: {wrong}</div>"
                   if errors else "")
        body = (f"<h1>Book {esc(flight.airline)} {flight.number}</h1>{summary}{self._flight_table(flight)}"
                f"<form id='booking' action='{m}/book' method='post'>"
                f"<input type='hidden' name='flight_id' value='{flight.id}'>"
                f"<label>Cabin <select id='cabin' name='cabin'><option value=''>Choose a cabin</option>"
                f"{_options(CABINS, values.get('cabin', ''))}</select></label>{_error(errors, 'cabin')}"
                f"<label>Passengers <select id='passengers' name='passengers'>"
                f"{_options(passengers, values.get('passengers', ''))}</select>"
                f"</label>{_error(errors, 'passengers')}"
                + entry("full_name", "Lead passenger's full name")
                + entry("email", "Email", " type='email'")
                + entry("passport", "Passport number",
                        f" pattern='{PASSPORT_PATTERN}' placeholder='AB1234567'")
                + "<label>Seat preference <select id='seat' name='seat'><option value=''>Choose a "
                  "seat</option>"
                f"{_options(SEATS, values.get('seat', ''))}</select></label>{_error(errors, 'seat')}"
                "<p><button type='submit' id='book-button'>Book flight</button></p></form>")
        pending = state.pending_flight
        if modal and pending is not None:
            total = int(pending["passengers"]) * flight.fares[pending["cabin"]]
            choice = {"cabin": pending["cabin"], "passengers": pending["passengers"]}
            body += (f"<div class='modal-bg'><div class='modal' role='dialog' aria-modal='true' "
                     "aria-labelledby='confirm-title' id='confirm-dialog'><h2 id='confirm-title'>"
                     "Confirm your "
                     f"booking</h2><p>{flight.number} on {_long_day(flight.date)} at {flight.departs}, "
                     f"{pending['passengers']} × {CABINS[pending['cabin']]}, for {esc(pending['full_name'])}."
                     f"</p><p>Total: <b id='confirm-total'>{format_price(total)}</b></p>"
                     f"<form action='{m}/book/confirm' method='post'>"
                     "<button type='submit' id='confirm-booking'>Confirm booking</button> "
                     f"<a id='cancel-booking' href='{m}/book/{flight.id}?{urlencode(choice)}'>"
                     "Cancel</a></form></div></div>")
        return PageResponse(self._page(state, "Book a flight", body))

    def _submit_flight(self, request: PageRequest, state: TravelState) -> PageResponse:
        flight = self.world.flight(request.arg("flight_id"))
        if flight is None:
            return self._redirect("/")
        values, errors = validate_flight_booking({name: request.arg(name) for name in FLIGHT_FIELDS})
        values |= {"flight_id": flight.id, "cabin": request.arg("cabin"),
                   "passengers": request.arg("passengers")}
        if values["cabin"] not in CABINS:
            errors["cabin"] = "Choose a cabin."
        if not 1 <= (_int(values["passengers"], 0) or 0) <= MAX_PASSENGERS:
            errors["passengers"] = f"Choose from 1 to {MAX_PASSENGERS} passengers."
        state.pending_flight = None if errors else values
        return self._booking_form(state, flight, values, errors, modal=not errors)

    def _confirm_flight(self, request: PageRequest, state: TravelState) -> PageResponse:
        pending = state.pending_flight
        flight = self.world.flight(pending["flight_id"]) if pending else None
        if pending is None or flight is None:
            return self._redirect("/")
        passengers, cabin = int(pending["passengers"]), pending["cabin"]
        booking = FlightBookingFacts(
            reference=f"TRV-{len(state.flights) + 1:04d}", flight_id=flight.id, airline=flight.airline,
            origin=flight.origin, destination=flight.destination, date=flight.date, departure=flight.departs,
            stops=flight.stops, cabin=cabin, passengers=passengers, full_name=pending["full_name"],
            email=pending["email"], passport=pending["passport"], seat=pending["seat"],
            fare_cents=flight.fares[cabin], total_cents=passengers * flight.fares[cabin])
        state.flights.append(booking)
        state.pending_flight = None
        return self._redirect(f"/booking/{booking.reference}")

    # ------------------------------------------------------------------------------ hotels

    def _hotels(self, request: PageRequest, state: TravelState) -> PageResponse:
        m = self.mount
        city, checkin, nights = request.arg("city"), request.arg("checkin"), request.arg("nights", "1")
        sort = request.arg("sort") if request.arg("sort") in HOTEL_SORTS else "price"
        asked = any(request.arg(name) for name in ("city", "checkin"))
        errors: dict[str, str] = {}
        if asked:
            if city not in self.world.by_code:
                errors["city"] = "Choose a city."
            if parse_day(checkin) is None:
                errors["checkin"] = "Choose a check-in day."
            if not 1 <= (_int(nights, 0) or 0) <= MAX_NIGHTS:
                errors["nights"] = f"Choose from 1 to {MAX_NIGHTS} nights."
        by_city = sorted(self.world.airports, key=lambda a: a.city)
        cities = {"": "Choose a city"} | {a.code: a.label for a in by_city}
        body = (f"<h1>Find a hotel</h1><form id='hotel-search' action='{m}/hotels' method='get'>"
                f"<label>City <select id='hotel-city' name='city'>{_options(cities, city)}</select></label>"
                f"{_error(errors, 'city')}{self._stay_fields({'checkin': checkin, 'nights': nights}, errors)}"
                "<label>Sort by <select id='hotel-sort' "
                f"name='sort'>{_options(HOTEL_SORTS, sort)}</select></label>"
                "<p><button type='submit' id='search-hotels'>Search hotels</button></p></form>")
        if asked and not errors:
            airport = self.world.by_code[city]
            state.hotel_searches.append(city)
            request.session.search(self.name, f"hotels in {airport.city}")
            stay = urlencode({"checkin": checkin, "nights": nights})
            cards = "".join(
                f"<div class='card' id='hotel-{h.id}'><a id='open-{h.id}' href='{m}/hotel/{h.id}?{stay}'>"
                f"{esc(h.name)}</a><div>{_stars(h.stars)}</div><div class='price'>from "
                f"{format_price(h.nightly_cents)} a night</div>"
                f"<div>{esc(', '.join(h.amenities) or 'no extras')}"
                "</div></div>" for h in self.world.hotels_in(city, sort))
            count = len(self.world.hotels_in(city))
            body += (f"<h2 id='hotel-count'>{count} hotels in {esc(airport.city)}</h2>"
                     f"<div class='grid' id='hotels'>{cards}</div>")
        return PageResponse(self._page(state, "Hotels", body))

    def _stay_fields(self, values: dict[str, str], errors: dict[str, str]) -> str:
        days = {"": "Choose a day"} | {d.isoformat(): d.strftime("%a %d %b %Y") for d in window_days()}
        nights = {str(n): f"{n} night" + ("s" if n > 1 else "") for n in range(1, MAX_NIGHTS + 1)}
        return ("<label>Check-in <select id='checkin' name='checkin'>"
                f"{_options(days, values.get('checkin', ''))}"
                f"</select></label>{_error(errors, 'checkin')}<label>Nights <select id='nights' "
                "name='nights'>"
                f"{_options(nights, values.get('nights', ''))}</select></label>{_error(errors, 'nights')}")

    def _hotel(self, state: TravelState, hotel: Hotel, values: dict[str, str], errors: dict[str, str], *,
               modal: bool = False) -> PageResponse:
        m = self.mount
        airport = self.world.by_code[hotel.city]
        rooms = "".join(f"<tr><th>{label}</th><td id='room-{value}'>{format_price(hotel.rooms[value])}"
                        "</td></tr>" for value, label in ROOMS.items())
        named = HOTEL_FIELDS | {"checkin": "check-in day", "nights": "nights"}
        wrong = ", ".join(label for name, label in named.items() if name in errors)
        summary = (f"<div class='error' id='error-summary' role='alert'>Please correct: {wrong}</div>"
                   if errors else "")

        def entry(name: str, label: str, extra: str = "") -> str:
            return (f"<label>{label} <input id='{name}' name='{name}' value='{esc(values.get(name, ''))}'"
                    f"{extra}></label>{_error(errors, name)}")

        body = (f"<h1 id='hotel-name'>{esc(hotel.name)}</h1>{summary}<p>{esc(airport.city)} · "
                f"<span id='hotel-stars'>{_stars(hotel.stars)}</span></p>"
                f"<p id='hotel-amenities'>Amenities: {esc(', '.join(hotel.amenities) or 'none')}</p>"
                f"<h2>Rooms, per night</h2><table id='rooms'>{rooms}</table>"
                f"<form id='room-booking' action='{m}/hotel/book' method='post'>"
                f"<input type='hidden' name='hotel_id' value='{hotel.id}'>"
                + self._stay_fields(values, errors)
                + f"<label>Room <select id='room' name='room'><option value=''>Choose a room</option>"
                f"{_options(ROOMS, values.get('room', ''))}</select></label>{_error(errors, 'room')}"
                + entry("full_name", "Guest's full name") + entry("email", "Email", " type='email'")
                + "<p><button type='submit' id='book-room'>Book room</button></p></form>")
        pending = state.pending_hotel
        if modal and pending is not None:
            nights = int(pending["nights"])
            body += (f"<div class='modal-bg'><div class='modal' role='dialog' aria-modal='true' "
                     "aria-labelledby='confirm-title' id='confirm-dialog'><h2 id='confirm-title'>"
                     "Confirm your "
                     f"booking</h2><p>{ROOMS[pending['room']]} at {esc(hotel.name)}, {nights} night"
                     f"{'s' if nights > 1 else ''} from {_long_day(pending['checkin'])}, for "
                     f"{esc(pending['full_name'])}.</p><p>Total: <b id='confirm-total'>"
                     f"{format_price(nights * hotel.rooms[pending['room']])}</b></p>"
                     f"<form action='{m}/hotel/book/confirm' method='post'>"
                     "<button type='submit' id='confirm-booking'>Confirm booking</button> "
                     f"<a id='cancel-booking' href='{m}/hotel/{hotel.id}'>Cancel</a></form></div></div>")
        return PageResponse(self._page(state, hotel.name, body))

    def _submit_hotel(self, request: PageRequest, state: TravelState) -> PageResponse:
        hotel = self.world.hotel_by_id.get(request.arg("hotel_id"))
        if hotel is None:
            return self._redirect("/hotels")
        values, errors = validate_hotel_booking({name: request.arg(name) for name in HOTEL_FIELDS})
        values |= {"hotel_id": hotel.id, "checkin": request.arg("checkin"), "nights": request.arg("nights")}
        if parse_day(values["checkin"]) is None:
            errors["checkin"] = "Choose a check-in day."
        if not 1 <= (_int(values["nights"], 0) or 0) <= MAX_NIGHTS:
            errors["nights"] = f"Choose from 1 to {MAX_NIGHTS} nights."
        state.pending_hotel = None if errors else values
        return self._hotel(state, hotel, values, errors, modal=not errors)

    def _confirm_hotel(self, request: PageRequest, state: TravelState) -> PageResponse:
        pending = state.pending_hotel
        hotel = self.world.hotel_by_id.get(pending["hotel_id"]) if pending else None
        if pending is None or hotel is None:
            return self._redirect("/hotels")
        nights, room = int(pending["nights"]), pending["room"]
        booking = HotelBookingFacts(
            reference=f"HTL-{len(state.hotels) + 1:04d}", hotel_id=hotel.id, hotel_name=hotel.name,
            city=hotel.city, checkin=pending["checkin"], nights=nights, room=room,
            full_name=pending["full_name"], email=pending["email"], nightly_cents=hotel.rooms[room],
            total_cents=nights * hotel.rooms[room])
        state.hotels.append(booking)
        state.pending_hotel = None
        return self._redirect(f"/booking/{booking.reference}")

    # ---------------------------------------------------------------------------- bookings

    def _booking(self, state: TravelState, reference: str) -> PageResponse | None:
        flight = next((b for b in state.flights if b.reference == reference), None)
        hotel = next((b for b in state.hotels if b.reference == reference), None)
        if flight is not None:
            what = (f"<p>{esc(flight.airline)}, {esc(self.world.by_code[flight.origin].label)} to "
                    f"{esc(self.world.by_code[flight.destination].label)}, {_long_day(flight.date)} at "
                    f"{flight.departure}; {flight.passengers} × {CABINS[flight.cabin]}, seat: "
                    f"{SEATS[flight.seat]}.</p><p>Lead passenger: {esc(flight.full_name)}</p>")
            total = flight.total_cents
        elif hotel is not None:
            what = (f"<p>{ROOMS[hotel.room]} at {esc(hotel.hotel_name)}, {hotel.nights} night"
                    f"{'s' if hotel.nights > 1 else ''} from {_long_day(hotel.checkin)}.</p>"
                    f"<p>Guest: {esc(hotel.full_name)}</p>")
            total = hotel.total_cents
        else:
            return None
        body = (f"<h1>Booking confirmed</h1><p>Reference <b id='booking-ref'>{reference}</b></p>{what}"
                f"<p>Total: <b id='booking-total'>{format_price(total)}</b></p>"
                f"<p><a href='{self.mount}/bookings'>My trips</a></p>")
        return PageResponse(self._page(state, f"Booking {reference}", body))

    def _bookings(self, state: TravelState) -> PageResponse:
        items = [f"<li><a href='{self.mount}/booking/{b.reference}'>{b.reference}</a>: flight {b.origin} to "
                 f"{b.destination} on {b.date}</li>" for b in state.flights]
        items += [f"<li><a href='{self.mount}/booking/{b.reference}'>{b.reference}</a>: "
                  f"{esc(b.hotel_name)} from {b.checkin}</li>" for b in state.hotels]
        body = f"<h1>My trips</h1><ul id='bookings'>{''.join(items) or '<li>No bookings yet.</li>'}</ul>"
        return PageResponse(self._page(state, "My trips", body))

    def describe(self) -> dict[str, Any]:
        """What the site serves, for logs: seed, airports, hotels."""
        return {"site": self.name, "seed": self.seed, "airports": len(self.world.airports),
                "hotels": len(self.world.hotels)}
