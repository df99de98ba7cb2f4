"""The travel site's booking forms and their server-side validation.

`validate_flight_booking(fields)` and `validate_hotel_booking(fields)` read the submitted fields and
return the cleaned values and, per field that is wrong, a message naming it. The rules (also shown as
hints on the forms):

- ``full_name``: a first and a last name (letters, spaces, ``-``, ``'``, ``.``);
- ``email``: ``name@domain.tld`` (stored lower case);
- ``passport``: two letters then seven digits (``AB1234567``; spaces ignored, case does not matter:
  stored upper case);
- ``seat``: one of `SEATS`; ``room``: one of the room types
  (`webgym_sites.travel_catalogue.ROOMS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from webgym_sites.travel_catalogue import ROOMS

__all__ = ["FLIGHT_FIELDS", "HOTEL_FIELDS", "PASSPORT_PATTERN", "SEATS", "validate_flight_booking",
           "validate_hotel_booking"]

SEATS = {"any": "No preference", "window": "Window", "aisle": "Aisle"}
"""The seat preferences: value -> label."""
FLIGHT_FIELDS = {"full_name": "passenger name", "email": "email", "passport": "passport number",
                 "seat": "seat preference"}
"""The flight booking form's fields: name -> how an error message names it."""
HOTEL_FIELDS = {"full_name": "guest name", "email": "email", "room": "room type"}
PASSPORT_PATTERN = "[A-Za-z]{2} ?[0-9]{7}"
"""The passport field's HTML ``pattern`` (the server checks the same, spaces ignored)."""

_NAME = re.compile(r"^[^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*)+$")
_EMAIL = re.compile(r"^[^@\s]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}$")
_PASSPORT = re.compile(r"^[A-Z]{2}\d{7}$")


def _common(fields: Mapping[str, str], names: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    values = {name: " ".join(str(fields.get(name, "")).split()) for name in names}
    errors: dict[str, str] = {}
    if not _NAME.match(values["full_name"]):
        errors["full_name"] = "Enter the full name: a first and a last name."
    if _EMAIL.match(values["email"]):
        values["email"] = values["email"].lower()
    else:
        errors["email"] = "Enter an email address like name@example.test."
    return values, errors


def validate_flight_booking(fields: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(values, errors)`` of the flight booking form."""
    values, errors = _common(fields, FLIGHT_FIELDS)
    passport = values["passport"].replace(" ", "").upper()
    if _PASSPORT.match(passport):
        values["passport"] = passport
    else:
        errors["passport"] = "The passport number must be two letters and seven digits, e.g. AB1234567."
    if values["seat"] not in SEATS:
        errors["seat"] = "Choose a seat preference."
    return values, errors


def validate_hotel_booking(fields: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(values, errors)`` of the room booking form."""
    values, errors = _common(fields, HOTEL_FIELDS)
    if values["room"] not in ROOMS:
        errors["room"] = "Choose a room type."
    return values, errors
