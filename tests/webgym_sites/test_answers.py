"""Answers read as a person grading them reads them: plain forms of the right value pass; a second value
of the asked kind, a candidate, a list or a spray of numbers fails."""

from __future__ import annotations

import pytest

from webgym_sites.answers import (
    ANY_UNIT,
    Value,
    answer_gives,
    answer_holds,
    read_value,
    stated,
)
from webgym_sites.shortcuts import SPRAY


def _gives(answer: str, kind: str, value: str, candidates=(), asked=()) -> bool:
    return answer_gives(answer, read_value(kind, value), candidates=[read_value(kind, c) for c in candidates],
                        asked=[read_value(k, v) for k, v in asked])


@pytest.mark.parametrize(("kind", "value", "said"), [
    ("price", "$1,234.50", ["$1,234.50", "1234.50", "It costs $1234.50.", "USD 1,234.50", "1,234.50 dollars",
                             "US$1234.50"]),
    ("price", "$24.00", ["$24", "24 dollars", "$24.00", "24.00"]),
    ("rating", "5.0 out of 5", ["5.0/5 based on 208 reviews", "5 out of 5", "5 stars", "rated 5", "★★★★★",
                                "a 5.0 / 5 rating", "rating: 5", "5"]),
    ("rating", "4 stars", ["4 stars", "a 4-star hotel", "4", "4.0 out of 5 stars", "★★★★☆"]),
    ("number", "208 reviews", ["208 reviews", "208", "it has 208 customer reviews"]),
    ("number", "1,234,567", ["1,234,567", "1234567", "about 1,234,567 people", "1\u202f234\u202f567"]),
    ("number", "12,345 km²", ["12,345 km²", "12345 km2", "12,345 square kilometres", "12,345",
                              "12345 sq km"]),
    ("number", "1,375 m", ["1,375 m", "1375 metres", "1,375 m above sea level", "1375"]),
    ("time", "09:05", ["09:05", "9:05", "9:05 am", "at 9.05? no: 9:05 a.m.", "9:05 AM"]),
    ("time", "21:00", ["21:00", "9 pm", "9:00 p.m."]),
    ("date", "2027-03-14", ["2027-03-14", "14 March 2027", "March 14, 2027", "Sunday 14 March 2027",
                            "14th of Mar", "Mar 14th"]),
    ("name", "Aurora Air", ["Aurora Air", "aurora air, departing at 09:05", "AURORA-AIR"]),
])
def test_plain_forms_of_the_right_value_pass(kind, value, said):
    for answer in said:
        assert _gives(answer, kind, value), answer


@pytest.mark.parametrize(("kind", "value", "wrong"), [
    ("price", "$23.99", ["$123.99", "$23.90", "$23.999", "23.9", "$23.99 or $19.99", "23", ""]),
    ("rating", "4.5 out of 5", ["4.6 out of 5", "4.5 or 4.6 out of 5", "4.5/5, 5 stars", "45"]),
    ("number", "1,234", ["11,234", "1,234.5", "12,340", "1,2345", "1,234 or 1,235", "1,234 km"]),
    ("number", "1,234 km", ["1,234 m", "1,234 km, 2,000 km"]),
    ("time", "09:05", ["9:50", "21:05", "9:05 pm", "09:05 or 10:30"]),
    ("date", "2027-03-14", ["2027-03-15", "14 April 2027", "14 March 2026", "14 or 15 March 2027"]),
])
def test_a_wrong_value_or_a_second_value_of_the_kind_fails(kind, value, wrong):
    for answer in wrong:
        assert not _gives(answer, kind, value), answer


def test_a_candidate_fails_and_a_value_the_task_asks_elsewhere_does_not():
    names = ["Velkford", "Port Velkor", "Ostholm"]
    assert _gives("Velkford is the oldest", "name", "Velkford", names[1:])
    assert not _gives("Velkford or Ostholm", "name", "Velkford", names[1:])  # a list of candidates
    assert not _gives("Port Velkor", "name", "Velkor", ["Port Velkor"])  # the longer name claims its words
    assert _gives("Port Velkor", "name", "Port Velkor", ["Velkor"])
    # Velkford, founded 1032, lies 1,375 m high: two numbers, each the other's fact's value.
    founded, elevation = ("number", "1032"), ("number", "1,375 m")
    assert _gives("Velkford, 1032, 1375", *founded, asked=[elevation])
    assert _gives("Velkford, 1032, 1375", *elevation, asked=[founded])
    assert not _gives("Velkford, 1032, 1375", *founded)  # 1375 unexplained: which is the answer?
    assert not _gives("born 1850, died 1920", "number", "1850")  # a year not asked is a second answer
    assert _gives("1850, 1920", "number", "1850", asked=[("number", "1920")])
    assert not _gives("4 stars, 3 stars", "rating", "4 stars", ["3 stars"])
    assert _gives("4 stars, $120.50 a night", "rating", "4 stars", asked=[("price", "$120.50")])
    assert _gives("5.0/5 based on 5 reviews", "rating", "5.0 out of 5", asked=[("number", "5 reviews")])


def test_sprays_fail_every_kind():
    pages = "$23.99 4.5 5 208 $19.99 09:05 10:30 1,234,567"
    for kind, value in (("number", "1032"), ("number", "1,234,567"), ("rating", "4.5 out of 5"),
                        ("rating", "4 stars"), ("number", "12,345 km²")):
        assert not _gives(SPRAY, kind, value), value
    for kind, value in (("price", "$23.99"), ("rating", "4.5 out of 5"), ("number", "208 reviews"),
                        ("time", "09:05"), ("number", "1,234,567")):
        assert not _gives(pages, kind, value), value
        assert not _gives(f"{SPRAY} {pages}", kind, value), value


def test_reading_values():
    assert read_value("price", "$1,234.50") == Value("price", 123450)
    assert read_value("rating", "4.5 out of 5") == read_value("rating", "4.5/5") == Value("rating", 45)
    assert read_value("number", "12,345 km²") == Value("number", 12345, "km²")
    assert read_value("time", "9:05 pm") == Value("time", 21 * 60 + 5)
    assert read_value("date", "Sunday 14 March 2027") == Value("date", (2027, 3, 14))
    assert read_value("name", "  Port-Velkor ") == Value("name", "port velkor")
    assert stated("4.5 out of 5, 208 reviews") == [Value("rating", 45), Value("number", 208)]
    # the 14 and the 2027 of a date are no numbers of their own
    assert stated("14 March 2027 at 09:05") == [Value("date", (2027, 3, 14)), Value("time", 545)]
    assert stated("Velkford") == []
    for kind, text in (("price", "free"), ("time", "25:00"), ("date", "31 Feb"), ("name", "--")):
        with pytest.raises(ValueError, match="no "):
            read_value(kind, text)
    with pytest.raises(ValueError, match="unknown answer kind"):
        read_value("colour", "blue")
    number = Value("number", 1234, ANY_UNIT)  # an old row's number: any unit
    assert answer_gives("It is 1,234 km long.", number) and answer_gives("1234", number)


def test_a_definite_answer_holds_by_the_same_rule():
    assert answer_holds("$12.95", "about $12.95.") and not answer_holds("$12.95", "$112.95")
    assert not answer_holds("$12.95", "$12.950") and not answer_holds("", "anything")
    assert answer_holds("5.0 out of 5, 208 reviews", "5.0/5 based on 208 reviews")
    assert answer_holds("5.0 out of 5, 208 reviews", "Five stars? It shows 5 stars from 208 reviews")
    two = "5.0 out of 5, 208 reviews; 4.8 out of 5, 12 reviews"
    assert not answer_holds("5.0 out of 5, 208 reviews", two)
    assert not answer_holds("$23.99", f"{SPRAY} $23.99 $19.99")
    best = "Nor Classic Cotton Tee: 4.5 out of 5, $23.99"
    names = {"names": ["Nor Classic Cotton Tee"], "candidates": ["Vik Urban Linen Tee"]}
    assert answer_holds(best, "The nor classic cotton tee, rated 4.5, costs 23.99.", **names)
    both = "Nor Classic Cotton Tee 4.5 $23.99; Vik Urban Linen Tee 4.5 $23.99"
    assert not answer_holds(best, both, **names)
    assert not answer_holds(best, "Vik Urban Linen Tee: 4.5 out of 5, $23.99", **names)  # the name missing
    assert answer_holds("Velkaria", "It is velkaria.") and not answer_holds("Velkaria", "Velkarian")


def test_the_sites_guide_examples():
    """The examples of docs/guides/sites.md ("How an answer is graded"), as the site judge sees them."""
    rating = [("rating", "5.0 out of 5"), ("number", "208 reviews")]
    for answer in ("5.0/5 based on 208 reviews", "5 stars, 208", "rated 5 out of 5 by 208 reviews"):
        assert all(_gives(answer, *fact, asked=rating) for fact in rating), answer
    assert not _gives("5.0 out of 5, 208 reviews; 4.8 out of 5, 12 reviews", *rating[0], asked=rating)
    assert _gives("It costs 23.99.", "price", "$23.99")
    assert not _gives("$23.99 or $19.99", "price", "$23.99")
    assert not _gives(f"{SPRAY} $23.99 $19.99", "price", "$23.99")
    best = [("name", "Nor Classic Cotton Tee"), ("rating", "4.5 out of 5"), ("price", "$23.99")]
    said = "The Nor Classic Cotton Tee is rated 4.5 and costs $23.99."
    assert all(_gives(said, *fact, asked=best) for fact in best)
    listed = "Nor Classic Cotton Tee: 4.5 out of 5, $23.99; Vik Urban Linen Tee: 4.2 out of 5, $19.99"
    assert not _gives(listed, *best[0], candidates=["Vik Urban Linen Tee"], asked=best)
    assert not _gives(listed, *best[2], candidates=["$19.99"], asked=best)
    first = [("name", "Aurora Air"), ("time", "09:05")]
    said = "Aurora Air, flight AU 412, at 9:05 am on 14 March 2027"
    assert _gives(said, *first[0], candidates=["Bluewing"], asked=first)
    assert _gives(said, *first[1], asked=first)  # 412, 14 and 2027 are no time
    assert not _gives("Aurora Air 09:05, Bluewing 10:30", *first[0], candidates=["Bluewing"], asked=first)
    assert not _gives("Aurora Air 09:05, Bluewing 10:30", *first[1], asked=first)
    founder = [("name", "Ostsol Vekdor"), ("number", "1850")]
    assert _gives("Ostsol Vekdor, 1850", *founder[1], asked=founder)
    assert not _gives("Ostsol Vekdor (born 1850, died 1920)", *founder[1], asked=founder)
    restated = "Of Velkford, Ostholm and Brenmark, Velkford"
    assert not _gives(restated, "name", "Velkford", ["Ostholm", "Brenmark"])
    pages = "1,234,567 12,345 km² 1032 1,375 m 4 12"
    assert not _gives(SPRAY, "number", "1,234,567") and not _gives(pages, "number", "1,234,567")
