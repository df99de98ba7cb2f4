"""The ground truth of a session: what happened on the local sites, as typed records.

`SessionFacts` is what `SiteServer.facts(session_id)` returns in-process and what the truth
listener (`webgym_sites.truth`) sends as JSON; it is never served on the sites'
own port. It holds what every site records (the pages visited, the searches made) and one record
per site the session used (`shop`, `reference`, `travel`).

Prices are integer cents, never floats, so that a fact compares exactly.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EditFacts", "FlightBookingFacts", "HotelBookingFacts", "LineFacts", "OrderFacts",
           "ReferenceFacts", "SessionFacts", "ShopFacts", "TravelFacts"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LineFacts(_Record):
    """One line of a cart or an order: a product with its chosen options and quantity."""

    product_id: str
    name: str
    options: dict[str, str] = Field(default_factory=dict)
    """The chosen options by name (``colour``, ``size``); a product without sizes has no ``size``."""
    quantity: int
    unit_price_cents: int


class OrderFacts(_Record):
    """A placed order (confirmed in the checkout's modal)."""

    order_id: str
    lines: tuple[LineFacts, ...]
    shipping: str
    """The shipping method's value: ``standard``, ``express`` or ``next_day``."""
    full_name: str
    address: str
    city: str
    postcode: str
    """Normalised: upper case, one space before the inward part (``AB12 3CD``)."""
    card_last4: str
    account: str = ""
    """The email of the account signed in when the order was placed; ``""`` for a guest."""
    total_cents: int


class ShopFacts(_Record):
    """The shop's record of a session."""

    seed: int
    """The catalogue's seed: tasks generated for another seed do not apply."""
    account: str = ""
    """The email of the signed-in account; ``""`` when signed out."""
    sign_ins: tuple[str, ...] = ()
    """Every successful sign-in, in order (account emails)."""
    cart: tuple[LineFacts, ...] = ()
    orders: tuple[OrderFacts, ...] = ()


class EditFacts(_Record):
    """An edit suggested on the reference site (accepted by its form's validation)."""

    article_id: str
    field: str
    """The infobox value's key (``population``, ``founded``, ``currency``)."""
    value: str
    """As accepted: a number without separators (``12345``), else the text with spacing collapsed."""
    summary: str


class ReferenceFacts(_Record):
    """The reference site's record of a session."""

    seed: int
    """The encyclopedia's seed: tasks generated for another seed do not apply."""
    read: tuple[str, ...] = ()
    """The ids of the articles opened (``/reference/wiki/<id>``), in order, repeats included."""
    watchlist: tuple[str, ...] = ()
    """The ids of the watched articles, in the order they were added."""
    edits: tuple[EditFacts, ...] = ()
    """The accepted edit suggestions, in order."""


class FlightBookingFacts(_Record):
    """A flight booked on the travel site (confirmed in the booking's modal)."""

    reference: str
    flight_id: str
    airline: str
    origin: str
    """The airport codes (``VAL``)."""
    destination: str
    date: str
    """``YYYY-MM-DD``."""
    departure: str
    """``HH:MM``."""
    stops: int
    cabin: str
    """``economy``, ``premium`` or ``business``."""
    passengers: int
    full_name: str
    """The lead passenger's."""
    email: str
    """Lower case."""
    passport: str
    """Normalised: upper case, no spaces (``AB1234567``)."""
    seat: str
    """``window``, ``aisle`` or ``any``."""
    fare_cents: int
    """One passenger's fare."""
    total_cents: int


class HotelBookingFacts(_Record):
    """A hotel room booked on the travel site (confirmed in the booking's modal)."""

    reference: str
    hotel_id: str
    hotel_name: str
    city: str
    """The city's airport code."""
    checkin: str
    """``YYYY-MM-DD``."""
    nights: int
    room: str
    """``standard``, ``deluxe`` or ``suite``."""
    full_name: str
    email: str
    nightly_cents: int
    total_cents: int


class TravelFacts(_Record):
    """The travel site's record of a session."""

    seed: int
    """The world's seed: tasks generated for another seed do not apply."""
    flight_searches: tuple[str, ...] = ()
    """Every flight results page shown, in order: ``VAL-KOR 2027-03-14`` (route and date)."""
    hotel_searches: tuple[str, ...] = ()
    """Every hotel list shown, in order: the city's airport code."""
    flights: tuple[FlightBookingFacts, ...] = ()
    hotels: tuple[HotelBookingFacts, ...] = ()


class SessionFacts(_Record):
    """Everything the sites know of one session."""

    session_id: str
    seen: bool = False
    """The session made at least one request (False: no page of any site was ever loaded with it)."""
    visited: tuple[str, ...] = ()
    """Pages loaded, in order: path and query (``/shop/search?q=lamp``), at most the last 2,000."""
    searches: tuple[str, ...] = ()
    """Search queries submitted, in order, as typed (``shop: linen shirt``: the site, then the text)."""
    shop: ShopFacts | None = None
    """The shop's record; None when the session never loaded a shop page."""
    reference: ReferenceFacts | None = None
    """The reference site's record; None when the session never loaded one of its pages."""
    travel: TravelFacts | None = None
    """The travel site's record; None when the session never loaded a travel page."""
