"""The checkout form's server-side rules: each wrong field gets its own message."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from webgym_sites.checkout import luhn_valid, normalise_postcode, validate_checkout

GOOD = {"full_name": "Ava Nilsen", "address": "12 Harbour Road", "city": "Bristol", "postcode": "bs1 4dj",
        "card_number": "4111 1111 1111 1111", "card_expiry": "09/28", "shipping": "express"}


def _check_digit(body: str) -> str:
    return next(d for d in "0123456789" if luhn_valid(body + d))


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="0123456789", min_size=12, max_size=18), st.integers(1, 9))
def test_luhn_accepts_its_check_digit_and_refuses_a_changed_one(body, shift):
    number = body + _check_digit(body)
    assert luhn_valid(number)
    changed = number[:-1] + str((int(number[-1]) + shift) % 10)
    assert not luhn_valid(changed)


def test_postcodes_are_normalised_or_refused():
    assert normalise_postcode("bs1 4dj") == "BS1 4DJ" == normalise_postcode("BS14DJ")
    assert normalise_postcode("ab12 3cd") == "AB12 3CD"
    for bad in ("12345", "B1 4DJ", "BS1 44J", "BS123 4DJ", ""):
        assert normalise_postcode(bad) is None, bad


def test_good_form_passes_and_is_cleaned():
    values, errors = validate_checkout(GOOD)
    assert errors == {}
    assert values["postcode"] == "BS1 4DJ" and values["card_number"] == "4111111111111111"


def test_each_bad_field_is_named():
    cases = {"full_name": "Ava", "address": "12", "city": "", "postcode": "12345",
             "card_number": "4111 1111 1111 1112", "card_expiry": "13/28", "shipping": "teleport"}
    for name, bad in cases.items():
        _, errors = validate_checkout(GOOD | {name: bad})
        assert list(errors) == [name], (name, errors)
    _, errors = validate_checkout(GOOD | {"card_number": "4111"})
    assert "13 to 19 digits" in errors["card_number"]
    _, errors = validate_checkout({})
    assert set(errors) == set(cases)


def test_digits_that_are_not_ascii_are_refused_not_raised():
    """``str.isdigit`` holds for ² and ٤; ``int("²")`` raised in the Luhn sum (a 500 page)."""
    for card in ("4111 1111 1111 111²", "٤١١١١١١١١١١١١١١١"):
        _, errors = validate_checkout(GOOD | {"card_number": card})
        assert "13 to 19 digits" in errors["card_number"], card
    assert not luhn_valid("²") and not luhn_valid("١٨")
