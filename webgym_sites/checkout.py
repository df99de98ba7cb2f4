"""The shop's checkout form and its server-side validation.

`validate_checkout(fields)` reads the submitted fields and returns the cleaned values and, per field
that is wrong, a message naming it. The rules (also shown as hints on the form):

- ``full_name``: a first and a last name (letters, spaces, ``-``, ``'``, ``.``);
- ``address``: at least 5 characters; ``city``: given;
- ``postcode``: two letters, one or two digits, a space, a digit and two letters (``AB12 3CD``; the
  space may be left out and case does not matter: it is stored normalised);
- ``card_number``: 13 to 19 digits (spaces and ``-`` ignored) whose Luhn checksum holds;
- ``card_expiry``: ``MM/YY`` with a month 01-12 (not compared with today's date, so that a task's
  outcome never depends on when it runs);
- ``shipping``: one of `SHIPPING`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["FIELDS", "SHIPPING", "ShippingMethod", "luhn_valid", "normalise_postcode", "validate_checkout"]


@dataclass(frozen=True)
class ShippingMethod:
    value: str
    label: str
    price_cents: int


SHIPPING: dict[str, ShippingMethod] = {m.value: m for m in (
    ShippingMethod("standard", "Standard (3-5 days)", 495),
    ShippingMethod("express", "Express (2 days)", 1250),
    ShippingMethod("next_day", "Next day", 2400),
)}
FIELDS: dict[str, str] = {"full_name": "full name", "address": "address", "city": "city",
                          "postcode": "postcode", "card_number": "card number", "card_expiry": "card expiry",
                          "shipping": "shipping method"}
"""The form's fields: name -> how an error message names it."""

_NAME = re.compile(r"^[^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*)+$")
_POSTCODE = re.compile(r"^([A-Z]{2}\d{1,2}) ?(\d[A-Z]{2})$")
_EXPIRY = re.compile(r"^(0[1-9]|1[0-2])/\d{2}$")


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a string of digits (ASCII 0-9) holds."""
    if not (digits.isascii() and digits.isdigit()):
        return False
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def normalise_postcode(value: str) -> str | None:
    """``AB12 3CD`` for any spelling the form accepts (``ab123cd``), None when it is not one."""
    match = _POSTCODE.match(" ".join(value.upper().split()))
    return f"{match.group(1)} {match.group(2)}" if match else None


def validate_checkout(fields: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(values, errors)``: the cleaned fields, and a message for each field that is wrong."""
    values = {name: " ".join(str(fields.get(name, "")).split()) for name in FIELDS}
    errors: dict[str, str] = {}
    if not _NAME.match(values["full_name"]):
        errors["full_name"] = "Enter your full name: a first and a last name."
    if len(values["address"]) < 5:
        errors["address"] = "Enter the street address (at least 5 characters)."
    if not values["city"]:
        errors["city"] = "Enter the city."
    postcode = normalise_postcode(values["postcode"])
    if postcode is None:
        errors["postcode"] = "The postcode must look like AB12 3CD."
    else:
        values["postcode"] = postcode
    digits = re.sub(r"[ -]", "", values["card_number"])
    if not (digits.isascii() and digits.isdigit() and 13 <= len(digits) <= 19):
        errors["card_number"] = "The card number must have 13 to 19 digits."
    elif not luhn_valid(digits):
        errors["card_number"] = "The card number is not valid (its check digit is wrong)."
    else:
        values["card_number"] = digits
    if not _EXPIRY.match(values["card_expiry"]):
        errors["card_expiry"] = "The expiry date must be MM/YY, e.g. 09/28."
    if values["shipping"] not in SHIPPING:
        errors["shipping"] = "Choose a shipping method."
    return values, errors
